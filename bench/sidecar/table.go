package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// figures holds summary.tsv: a value per part, peer, case and figure.
type figures map[[4]string]string

// readFigures parses summary.tsv ("part peer case figure value" lines, a
// header first).
func readFigures(r io.Reader) (figures, error) {
	f := make(figures)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		c := strings.Split(sc.Text(), "\t")
		if len(c) != 5 || c[0] == "part" {
			continue
		}
		f[[4]string{c[0], c[1], c[2], c[3]}] = c[4]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read summary: %w", err)
	}
	return f, nil
}

// num is a figure as a number, and whether there is one.
func (f figures) num(part, peer, kase, figure string) (float64, bool) {
	v, ok := f[[4]string{part, peer, kase, figure}]
	if !ok {
		return 0, false
	}
	x, err := strconv.ParseFloat(v, 64)
	return x, err == nil
}

// verdict says whether x met "at most limit" (or, with atLeast, "at least").
func verdict(x, limit float64, ok, atLeast bool) string {
	switch {
	case !ok:
		return "-"
	case atLeast && x >= limit, !atLeast && x <= limit:
		return "met"
	default:
		return "missed"
	}
}

func show(x float64, ok bool, prec int) string {
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

// restRow is one row of the at-rest table: a CPU figure whose target is
// perSecond ms per second of its interval, or the time to the first 200.
type restRow struct {
	kase, what string
	perSecond  float64 // target: ms of CPU per second measured
	fixed      float64 // target in ms when perSecond is 0
	figure     string
}

var restRows = []restRow{
	{kase: "a", what: "CPU, upstream down, nobody probing", perSecond: 1, figure: "cpu_ms"},
	{kase: "b", what: "CPU, upstream down, a kubelet probe each second", perSecond: 5, figure: "cpu_ms"},
	{kase: "c", what: "upstream starts after %s down, probes every 5 ms: first 200 within", fixed: 20, figure: "first200_ms"},
	{kase: "d", what: "CPU, healthy, 1 scrape + 1 probe per second", perSecond: 1, figure: "cpu_ms"},
}

// writeRest writes the at-rest table: queue's figures against their
// targets and, when the run measured a baseline build beside it (peer
// queuebase), the baseline's figures of the same seconds and the ratio.
func writeRest(w io.Writer, f figures, downFor string) {
	_, base := f.num("rest", "queuebase", "a", "cpu_ms")
	if base {
		fmt.Fprintln(w, "| figure | queue | queuebase | queue/queuebase | target |")
		fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	} else {
		fmt.Fprintln(w, "| figure | queue | target |")
		fmt.Fprintln(w, "| --- | --- | --- |")
	}
	for _, r := range restRows {
		x, ok := f.num("rest", "queue", r.kase, r.figure)
		what, limit := fmt.Sprintf(r.what, downFor), r.fixed
		if r.perSecond != 0 {
			secs, _ := f.num("rest", "queue", r.kase, "seconds")
			secs = math.Round(secs)
			what, limit = fmt.Sprintf("%s, %.0f s", r.what, secs), r.perSecond*secs
		}
		cols := showMS(x, ok)
		if base {
			y, yok := f.num("rest", "queuebase", r.kase, r.figure)
			ratio := "-"
			if ok && yok && y > 0 {
				ratio = fmt.Sprintf("%.2fx", x/y)
			}
			cols += " | " + showMS(y, yok) + " | " + ratio
		}
		fmt.Fprintf(w, "| %s | %s | at most %.0f ms: %s |\n", what, cols, limit, verdict(x, limit, ok, false))
	}
	wakes := func(peer string) string {
		var cs []string
		for _, k := range []string{"a", "b", "d"} {
			x, ok := f.num("rest", peer, k, "ctxsw")
			cs = append(cs, show(x, ok, 0))
		}
		return strings.Join(cs, "/")
	}
	if base {
		fmt.Fprintf(w, "| wake-ups (context switches), idle rows a/b/d | %s | %s | | |\n", wakes("queue"), wakes("queuebase"))
	} else {
		fmt.Fprintf(w, "| wake-ups (context switches), idle rows a/b/d | %s | |\n", wakes("queue"))
	}
}

func showMS(x float64, ok bool) string {
	if !ok {
		return "-"
	}
	return show(x, ok, 1) + " ms"
}

// writeTable writes the markdown tables of what f holds: the at-rest part,
// then the throttled part, each only when measured.
func writeTable(w io.Writer, f figures, rates, peers []string, downFor string) {
	if _, ok := f.num("rest", "queue", "a", "cpu_ms"); ok {
		writeRest(w, f, downFor)
	}
	any := false
	for _, r := range rates {
		for _, p := range peers {
			if _, ok := f.num("throttled", p, r, "requests"); ok {
				any = true
			}
		}
	}
	if !any {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "| rps |")
	for _, p := range peers {
		fmt.Fprintf(w, " %s success %% | %s p99 ms | %s CPU µs/req |", p, p, p)
	}
	fmt.Fprintln(w, " queue/haproxy CPU/req | target: success 100% | target: p99 at most 5 ms | target: at most 1.2x |")
	fmt.Fprint(w, "| ---: |")
	for range peers {
		fmt.Fprint(w, " ---: | ---: | ---: |")
	}
	fmt.Fprintln(w, " ---: | --- | --- | --- |")
	for _, r := range rates {
		fmt.Fprintf(w, "| %s |", r)
		for _, p := range peers {
			s, sok := f.num("throttled", p, r, "success_pct")
			p99, pok := f.num("throttled", p, r, "p99_ms")
			c, cok := f.num("throttled", p, r, "cpu_us_per_req")
			fmt.Fprintf(w, " %s | %s | %s |", show(s, sok, 2), show(p99, pok, 2), show(c, cok, 1))
		}
		q, qok := f.num("throttled", "queue", r, "cpu_us_per_req")
		h, hok := f.num("throttled", "haproxy", r, "cpu_us_per_req")
		ratio, rok := 0.0, qok && hok && h > 0
		if rok {
			ratio = q / h
		}
		rs := "-"
		if rok {
			rs = fmt.Sprintf("%.2fx", ratio)
		}
		s, sok := f.num("throttled", "queue", r, "success_pct")
		p99, pok := f.num("throttled", "queue", r, "p99_ms")
		pv, cv := verdict(p99, 5, pok, false), verdict(ratio, 1.2, rok, false)
		if r != "250" && r != "500" && r != "1000" {
			pv, cv = "-", "-"
		}
		fmt.Fprintf(w, " %s | %s | %s | %s |\n", rs, verdict(s, 100, sok, true), pv, cv)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "| rps |")
	for _, p := range peers {
		fmt.Fprintf(w, " %s p50 ms | %s throttled periods | %s context switches/req |", p, p, p)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "| ---: |")
	for range peers {
		fmt.Fprint(w, " ---: | ---: | ---: |")
	}
	fmt.Fprintln(w)
	for _, r := range rates {
		fmt.Fprintf(w, "| %s |", r)
		for _, p := range peers {
			p50, ok1 := f.num("throttled", p, r, "p50_ms")
			th, ok2 := f.num("throttled", p, r, "throttled")
			cs, ok3 := f.num("throttled", p, r, "ctxsw_per_req")
			fmt.Fprintf(w, " %s | %s | %s |", show(p50, ok1, 2), show(th, ok2, 0), show(cs, ok3, 2))
		}
		fmt.Fprintln(w)
	}
}

func cmdTable(args []string) error {
	fs := flag.NewFlagSet("table", flag.ExitOnError)
	summary := fs.String("summary", "summary.tsv", "the figures")
	rates := fs.String("rates", "250,500,1000,2000", "the rates, in the table's order")
	peers := fs.String("peers", "nginx,haproxy,queue", "the peers, in the table's order")
	down := fs.String("down", "30 s", "how long the upstream was down before row c, for its label")
	fs.Parse(args)
	file, err := os.Open(*summary)
	if err != nil {
		return fmt.Errorf("open summary: %w", err)
	}
	defer file.Close()
	f, err := readFigures(file)
	if err != nil {
		return err
	}
	writeTable(os.Stdout, f, strings.Split(*rates, ","), strings.Split(*peers, ","), *down)
	return nil
}
