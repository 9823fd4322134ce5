package bench

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestChart draws the shared harness's results as an SVG bar chart: proxy
// CPU per request for each scenario and proxy, and RSS. It always renders a
// fixture (so the renderer is tested); with QUEUE_BENCH_SUMMARY set to a
// run's summary.tsv it also writes the chart of that run to
// QUEUE_BENCH_SVG (default results.svg in this folder):
//
//	QUEUE_BENCH_SUMMARY=/path/to/results/<run>/summary.tsv go test ./bench -run TestChart -count=1
func TestChart(t *testing.T) {
	rows, err := readSummary(strings.NewReader(fixtureSummary))
	if err != nil {
		t.Fatal(err)
	}
	svg := renderChart(rows)
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("the chart is not well-formed XML: %v", err)
	}
	for _, want := range []string{"queue", "nginx", "c64", "conn1000"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	path := os.Getenv("QUEUE_BENCH_SUMMARY")
	if path == "" {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err = readSummary(f)
	if err != nil {
		t.Fatal(err)
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

type summaryRow struct {
	name, scenario string
	cpuPerReq      float64 // proxy CPU microseconds per request; 0 when absent
	rssPeakKB      float64
	rssIdleKB      float64
}

func readSummary(r io.Reader) ([]summaryRow, error) {
	sc := bufio.NewScanner(r)
	var cols map[string]int
	var rows []summaryRow
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if cols == nil {
			cols = map[string]int{}
			for i, c := range f {
				cols[c] = i
			}
			for _, need := range []string{"name", "scenario", "proxy_us_per_req", "rss_peak_kb", "rss_idle_kb"} {
				if _, ok := cols[need]; !ok {
					return nil, fmt.Errorf("summary lacks column %s", need)
				}
			}
			continue
		}
		num := func(c string) float64 {
			v, _ := strconv.ParseFloat(f[cols[c]], 64)
			return v
		}
		rows = append(rows, summaryRow{name: f[cols["name"]], scenario: f[cols["scenario"]],
			cpuPerReq: num("proxy_us_per_req"), rssPeakKB: num("rss_peak_kb"), rssIdleKB: num("rss_idle_kb")})
	}
	return rows, sc.Err()
}

// renderChart draws grouped bars: for each scenario, one bar per proxy
// (CPU µs per request), then a panel of RSS idle and with 1000 connections.
func renderChart(rows []summaryRow) string {
	scenarios := []string{"c64", "c256", "get64k", "post16k", "h2c", "conn1000"}
	var names []string
	seen := map[string]bool{}
	cpu := map[[2]string]float64{}
	rss := map[string][2]float64{}
	maxCPU := 1.0
	for _, r := range rows {
		if r.name == "direct" {
			continue
		}
		if !seen[r.name] {
			seen[r.name] = true
			names = append(names, r.name)
		}
		cpu[[2]string{r.name, r.scenario}] = r.cpuPerReq
		maxCPU = max(maxCPU, r.cpuPerReq)
		if r.scenario == "conn1000" {
			rss[r.name] = [2]float64{r.rssIdleKB / 1024, r.rssPeakKB / 1024}
		}
	}
	colors := []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1"}
	const (
		w, h          = 900, 500
		left, top     = 60, 50
		plotW, plotH  = 820, 300
		rssTop, rssH  = 420, 100
		groupGap      = 20
		legendY       = 30
		rssBarPerName = 2
	)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="15">Proxy CPU per request (µs, lower is better), ../shared/bench, proxy pinned to one core</text>`+"\n", left)
	for i, n := range names {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			left+i*120, legendY, colors[i%len(colors)], left+i*120+16, legendY+11, xmlEscape(n))
	}
	groupW := (plotW - groupGap*len(scenarios)) / len(scenarios)
	barW := max(groupW/max(len(names), 1), 1)
	base := top + plotH
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, base, left+plotW, base)
	for si, sc := range scenarios {
		gx := left + si*(groupW+groupGap)
		for ni, n := range names {
			v := cpu[[2]string{n, sc}]
			bh := int(v / maxCPU * float64(plotH-20))
			x := gx + ni*barW
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s %s: %.1f µs</title></rect>`+"\n",
				x, base-bh, barW-2, bh, colors[ni%len(colors)], xmlEscape(n), sc, v)
			if v > 0 {
				fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="9" text-anchor="middle">%.0f</text>`+"\n", x+barW/2, base-bh-3, v)
			}
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", gx+groupW/2, base+16, sc)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="15">RSS (MiB): idle, and with 1000 keep-alive connections</text>`+"\n", left, rssTop-12)
	maxRSS := 1.0
	for _, v := range rss {
		maxRSS = max(maxRSS, v[1], v[0])
	}
	for ni, n := range names {
		v := rss[n]
		y := rssTop + ni*14
		for k := range rssBarPerName {
			bw := int(v[k] / maxRSS * 600)
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="6" fill="%s" opacity="%s"/>`+"\n",
				left+100, y+k*6, bw, colors[ni%len(colors)], []string{"0.5", "1"}[k])
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text><text x="%d" y="%d" font-size="10">%.1f / %.1f</text>`+"\n",
			left, y+10, xmlEscape(n), left+100+int(v[1]/maxRSS*600)+6, y+10, v[0], v[1])
	}
	_ = rssH
	b.WriteString("</svg>\n")
	return b.String()
}

func xmlEscape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// fixtureSummary is a cut-down summary.tsv, as the harness writes it.
const fixtureSummary = "name\tscenario\tproxy_us_per_req\trss_peak_kb\trss_idle_kb\n" +
	"direct\tc64\t-\t-\t-\n" +
	"nginx\tc64\t11.8\t-\t-\n" +
	"nginx\tconn1000\t15.0\t27750\t18000\n" +
	"queue\tc64\t20.3\t-\t-\n" +
	"queue\tconn1000\t29.2\t85600\t9000\n"
