package bench

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestChart draws the committed sample summary (testdata/summary.tsv, in
// the format bench/compare.sh writes) and checks the chart, so that the
// renderer is tested on every run. With QUEUE_BENCH_SUMMARY set to a run's
// summary.tsv it also writes that run's chart to QUEUE_BENCH_SVG (default
// results.svg in this folder):
//
//	QUEUE_BENCH_SUMMARY=/tmp/queue-bench/<run>/summary.tsv go test ./bench -run '^TestChart$' -count=1
func TestChart(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/summary.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := readSummary(f)
	if err != nil {
		t.Fatal(err)
	}
	svg := renderChart(rows)
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("the chart is not well-formed XML: %v", err)
	}
	// Every peer but direct is in the legend, every CPU figure measured has
	// its bar, and a figure not measured has none.
	var bars int
	for _, r := range rows {
		legend := ">" + r.peer + "<"
		if got, want := strings.Contains(svg, legend), r.peer != "direct"; got != want {
			t.Errorf("legend has %s: %v, want %v", r.peer, got, want)
		}
		if r.peer == "direct" {
			continue
		}
		if r.scenario == "stall5000" && r.rssPeakKB > 0 {
			bar := fmt.Sprintf("<title>%s RSS stall5000: %.1f MiB</title>", r.peer, r.rssPeakKB/1024)
			if !strings.Contains(svg, bar) {
				t.Errorf("chart lacks %q", bar)
			}
		}
		if !slices.Contains(cpuScenarios, r.scenario) {
			continue
		}
		bar := fmt.Sprintf("<title>%s %s: %.1f µs</title>", r.peer, r.scenario, r.cpuPerReq)
		if got, want := strings.Contains(svg, bar), r.cpuPerReq > 0; got != want {
			t.Errorf("chart has %q: %v, want %v", bar, got, want)
		}
		if r.cpuPerReq > 0 {
			bars++
		}
	}
	if got, want := strings.Count(svg, " µs</title>"), bars; got != want {
		t.Errorf("chart has %d CPU bars, want %d", got, want)
	}
	if bars == 0 {
		t.Error("the sample has no CPU figure to draw")
	}
	for _, sc := range cpuScenarios {
		if !strings.Contains(svg, ">"+sc+"<") {
			t.Errorf("chart lacks the %s group", sc)
		}
	}

	path := os.Getenv("QUEUE_BENCH_SUMMARY")
	if path == "" {
		return
	}
	run, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	rows, err = readSummary(run)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	out := os.Getenv("QUEUE_BENCH_SVG")
	if out == "" {
		out = "results.svg"
	}
	if err := os.WriteFile(out, []byte(renderChart(rows)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
}

// TestReadSummary: a summary.tsv is read by its header's column names,
// "-" standing for a figure not measured, comments and blank lines
// skipped; a missing column, a short row, a figure that is not a number
// and a missing header are errors that say which and where.
func TestReadSummary(t *testing.T) {
	t.Parallel()
	const header = "peer\tscenario\truns\tproxy_us_per_req\trss_idle_kb\trss_peak_kb\n"
	tests := []struct {
		name    string
		in      string
		want    []summaryRow
		wantErr string
	}{
		{
			name: "figures and gaps",
			in:   header + "queue\tc64\t3\t20.30\t-\t-\nqueue\tconn1000\t1\t29.20\t9000\t85600\n",
			want: []summaryRow{
				{peer: "queue", scenario: "c64", cpuPerReq: 20.3},
				{peer: "queue", scenario: "conn1000", cpuPerReq: 29.2, rssIdleKB: 9000, rssPeakKB: 85600},
			},
		},
		{
			name: "comments and blank lines",
			in:   "# a note\n" + header + "\nnginx\tc64\t1\t12.70\t-\t-\n",
			want: []summaryRow{{peer: "nginx", scenario: "c64", cpuPerReq: 12.7}},
		},
		{
			name:    "a column missing",
			in:      "peer\tscenario\tproxy_us_per_req\trss_idle_kb\n",
			wantErr: "summary lacks column rss_peak_kb",
		},
		{
			name:    "a short row",
			in:      header + "queue\tc64\t3\n",
			wantErr: "line 2: 3 fields, want 6",
		},
		{
			name:    "not a number",
			in:      header + "queue\tc64\t3\tfast\t-\t-\n",
			wantErr: `line 2: proxy_us_per_req "fast" is not a number`,
		},
		{
			name:    "no header",
			in:      "",
			wantErr: "summary has no header",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := readSummary(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("readSummary error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := fmt.Sprint(got), fmt.Sprint(tt.want); got != want {
				t.Errorf("readSummary = %s, want %s", got, want)
			}
		})
	}
}

// summaryRow holds the figures the chart draws from one line of a
// summary.tsv; a figure not measured ("-") is 0.
type summaryRow struct {
	peer, scenario string
	cpuPerReq      float64 // proxy CPU microseconds per request
	rssIdleKB      float64 // conn1000: resident memory before the load
	rssPeakKB      float64 // conn1000, stall5000: peak resident memory
}

// readSummary reads a summary.tsv as bench/compare.sh writes it: a header
// naming the columns, then one line per peer and scenario. Lines starting
// with # and blank lines are skipped.
func readSummary(r io.Reader) ([]summaryRow, error) {
	sc := bufio.NewScanner(r)
	var (
		cols map[string]int
		rows []summaryRow
		line int
	)
	for sc.Scan() {
		line++
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Split(text, "\t")
		if cols == nil {
			cols = map[string]int{}
			for i, c := range f {
				cols[c] = i
			}
			for _, need := range []string{"peer", "scenario", "proxy_us_per_req", "rss_idle_kb", "rss_peak_kb"} {
				if _, ok := cols[need]; !ok {
					return nil, fmt.Errorf("summary lacks column %s", need)
				}
			}
			continue
		}
		if len(f) != len(cols) {
			return nil, fmt.Errorf("line %d: %d fields, want %d", line, len(f), len(cols))
		}
		num := func(c string) (float64, error) {
			v := f[cols[c]]
			if v == "-" {
				return 0, nil
			}
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("line %d: %s %q is not a number", line, c, v)
			}
			return n, nil
		}
		row := summaryRow{peer: f[cols["peer"]], scenario: f[cols["scenario"]]}
		for c, dst := range map[string]*float64{
			"proxy_us_per_req": &row.cpuPerReq, "rss_idle_kb": &row.rssIdleKB, "rss_peak_kb": &row.rssPeakKB,
		} {
			v, err := num(c)
			if err != nil {
				return nil, err
			}
			*dst = v
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read summary: %w", err)
	}
	if cols == nil {
		return nil, fmt.Errorf("summary has no header")
	}
	return rows, nil
}

// The chart's scenarios: proxy CPU per request for each of cpuScenarios,
// then three memory figures per peer.
var (
	cpuScenarios = []string{"c64", "get64k", "post16k", "h2c"}
	rssFigures   = []struct{ label, scenario string }{
		{"idle", "conn1000"}, {"1000 connections", "conn1000"}, {"stall5000", "stall5000"},
	}
)

// renderChart draws grouped bars: for each scenario of cpuScenarios one bar
// per peer (its CPU µs per request), then for each peer its RSS idle, at its
// peak under 1000 connections and holding 5000 stalled heads. "direct" is
// left out (it has no proxy), and so is any figure not measured.
func renderChart(rows []summaryRow) string {
	var peers []string
	seen := map[string]bool{}
	cpu := map[[2]string]float64{}
	rss := map[string][3]float64{} // MiB, in the order of rssFigures
	maxCPU, maxRSS := 1.0, 1.0
	for _, r := range rows {
		if r.peer == "direct" {
			continue
		}
		if !seen[r.peer] {
			seen[r.peer] = true
			peers = append(peers, r.peer)
		}
		if r.cpuPerReq > 0 {
			cpu[[2]string{r.peer, r.scenario}] = r.cpuPerReq
		}
		v := rss[r.peer]
		switch r.scenario {
		case "conn1000":
			v[0], v[1] = r.rssIdleKB/1024, r.rssPeakKB/1024
		case "stall5000":
			v[2] = r.rssPeakKB / 1024
		}
		rss[r.peer] = v
	}
	for k, v := range cpu {
		if slices.Contains(cpuScenarios, k[1]) {
			maxCPU = max(maxCPU, v)
		}
	}
	for _, v := range rss {
		maxRSS = max(maxRSS, v[0], v[1], v[2])
	}

	colors := []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1"}
	const (
		left, top    = 60, 50
		plotW, plotH = 820, 280
		groupGap     = 24
		legendY      = 30
		rssBar       = 7 // height of one memory bar
		rssLabelW    = 70
		rssW         = 620
	)
	rssTop := top + plotH + 70
	w, h := 900, rssTop+len(peers)*(3*rssBar+8)+20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="15">Proxy CPU per request (µs, lower is better), queue's comparison harness (bench/compare.sh), proxy pinned to one core</text>`+"\n", left)
	for i, n := range peers {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			left+i*120, legendY, colors[i%len(colors)], left+i*120+16, legendY+11, xmlEscape(n))
	}

	groupW := (plotW - groupGap*len(cpuScenarios)) / len(cpuScenarios)
	barW := min(max(groupW/max(len(peers), 1), 2), 48)
	inset := (groupW - barW*len(peers)) / 2 // centres the bars in their group
	base := top + plotH
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, base, left+plotW, base)
	for si, sc := range cpuScenarios {
		gx := left + si*(groupW+groupGap)
		for ni, n := range peers {
			v, ok := cpu[[2]string{n, sc}]
			if !ok {
				continue
			}
			bh := int(v / maxCPU * float64(plotH-20))
			x := gx + inset + ni*barW
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s %s: %.1f µs</title></rect>`+"\n",
				x, base-bh, barW-2, bh, colors[ni%len(colors)], xmlEscape(n), sc, v)
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="9" text-anchor="middle">%.0f</text>`+"\n", x+barW/2, base-bh-3, v)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", gx+groupW/2, base+16, sc)
	}

	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="15">RSS (MiB, lower is better): idle, peak under 1000 connections, holding 5000 stalled requests</text>`+"\n", left, rssTop-14)
	opacity := []string{"0.35", "0.7", "1"}
	for ni, n := range peers {
		v := rss[n]
		y := rssTop + ni*(3*rssBar+8)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", left, y+2*rssBar, xmlEscape(n))
		var labels []string
		for k, fig := range rssFigures {
			if v[k] == 0 {
				labels = append(labels, "-")
				continue
			}
			labels = append(labels, fmt.Sprintf("%.1f", v[k]))
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s" opacity="%s"><title>%s RSS %s: %.1f MiB</title></rect>`+"\n",
				left+rssLabelW, y+k*rssBar, int(v[k]/maxRSS*rssW), rssBar-1, colors[ni%len(colors)], opacity[k], xmlEscape(n), fig.label, v[k])
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10">%s</text>`+"\n",
			left+rssLabelW+int(max(v[0], v[1], v[2])/maxRSS*rssW)+6, y+2*rssBar, strings.Join(labels, " / "))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
