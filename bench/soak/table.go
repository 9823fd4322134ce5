package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// queueNames name the two queue processes by their upstream protocol, in
// the order of every "a/b" cell.
var queueNames = [2]string{"up-h1", "up-h2c"}

// row is one line of the table: the baseline (res nil) or a phase.
type row struct {
	phase   string
	elapsed time.Duration
	res     *phaseResult
	q       [2]sample
	drift   []string
}

// legend explains the table's cells; it is printed above it.
const legend = `Per protocol: requests/fault/other. "fault" failed during an injected fault
(in flight at an upstream kill, or started after it before the first success
after the restart plus the slack; or a vanishing client's own abandoned
request); "other" failed outside every fault and must be 0. "at kill" and
"after kill" split the kills' failures; "recovery" is the longest time from a
kill to the first success after its restart. Queue columns are "up-h1/up-h2c",
sampled at rest after the phase (baseline: before any load). RSS in MiB,
goroutines from go_goroutines, fds = /proc/PID/fd entries, CPU = user+system
seconds so far.`

func header() []string {
	h := []string{"phase", "elapsed"}
	for p := range nProto {
		h = append(h, p.String())
	}
	return append(h, "kills", "at kill", "after kill", "recovery", "RSS MiB", "goroutines", "fds", "CPU s", "drift")
}

func (r row) cells() []string {
	c := []string{r.phase, r.elapsed.Round(time.Second).String()}
	if r.res == nil {
		for range nProto {
			c = append(c, "")
		}
		c = append(c, "", "", "", "")
	} else {
		var at, after int
		for _, n := range r.res.counts {
			c = append(c, fmt.Sprintf("%d/%d/%d", n.req, n.fault(), n.other))
			at += n.atKill
			after += n.afterKill
		}
		c = append(c, killsCell(r.res.kills))
		recovery := "-"
		if r.res.longest > 0 {
			recovery = r.res.longest.Round(10 * time.Millisecond).String()
		}
		c = append(c, strconv.Itoa(at), strconv.Itoa(after), recovery)
	}
	pair := func(f func(sample) string) string { return f(r.q[0]) + "/" + f(r.q[1]) }
	c = append(c,
		pair(func(s sample) string { return strconv.FormatFloat(float64(s.rssKiB)/1024, 'f', 1, 64) }),
		pair(func(s sample) string { return strconv.Itoa(s.goroutines) }),
		pair(func(s sample) string { return strconv.Itoa(s.fds) }),
		pair(func(s sample) string { return strconv.FormatFloat(s.cpu, 'f', 2, 64) }),
	)
	drift := "-"
	if len(r.drift) > 0 {
		drift = strings.Join(r.drift, "; ")
	}
	return append(c, drift)
}

// killsCell is the number of kills and how many kept the upstream down
// how long: "3 (2×2s, 1×10s)".
func killsCell(kills []time.Duration) string {
	if len(kills) == 0 {
		return "0"
	}
	var order []time.Duration
	n := map[time.Duration]int{}
	for _, k := range kills {
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k]++
	}
	var d []string
	for _, k := range order {
		d = append(d, fmt.Sprintf("%d×%v", n[k], k))
	}
	return fmt.Sprintf("%d (%s)", len(kills), strings.Join(d, ", "))
}

// markdownRow is a table line of Markdown.
func markdownRow(cells []string) string {
	return "| " + strings.Join(cells, " | ") + " |"
}

// markdown is the whole table: the header, its rule and the rows.
func markdown(rows []row) string {
	var b strings.Builder
	h := header()
	b.WriteString(markdownRow(h) + "\n")
	rule := make([]string, len(h))
	for i := range rule {
		rule[i] = "---"
	}
	b.WriteString(markdownRow(rule) + "\n")
	for _, r := range rows {
		b.WriteString(markdownRow(r.cells()) + "\n")
	}
	return b.String()
}

// slack is how far above the baseline a queue may be at rest before the
// soak calls it drift.
type slack struct {
	fds, goroutines int
	rssMiB          float64
}

// drift compares each queue's sample at rest with its baseline: the
// descriptors, goroutines and RSS it had before any load.
func drift(base, now [2]sample, s slack) []string {
	var d []string
	for i := range now {
		if n := now[i].fds - base[i].fds; n > s.fds {
			d = append(d, fmt.Sprintf("%s fds +%d", queueNames[i], n))
		}
		if n := now[i].goroutines - base[i].goroutines; n > s.goroutines {
			d = append(d, fmt.Sprintf("%s goroutines +%d", queueNames[i], n))
		}
		if mib := float64(now[i].rssKiB-base[i].rssKiB) / 1024; mib > s.rssMiB {
			d = append(d, fmt.Sprintf("%s RSS +%.1f MiB", queueNames[i], mib))
		}
	}
	return d
}

// settled reports whether every queue is back within slack of its baseline
// in descriptors, goroutines and RSS.
func settled(base, now [2]sample, s slack) bool {
	return len(drift(base, now, s)) == 0
}
