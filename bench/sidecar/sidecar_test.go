package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestParseMountinfo: the cgroup v1 cpu and cpuacct mounts (apart or
// joined) and the cgroup v2 mount are found in /proc/self/mountinfo lines;
// cpuset is not taken for cpu.
func TestParseMountinfo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want mounts
	}{
		{
			name: "v1 split",
			in: `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`,
			want: mounts{v1cpu: "/sys/fs/cgroup/cpu", v1cpuacct: "/sys/fs/cgroup/cpuacct", v2: "/sys/fs/cgroup/unified"},
		},
		{
			name: "v1 together",
			in:   "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct\n",
			want: mounts{v1cpu: "/sys/fs/cgroup/cpu,cpuacct", v1cpuacct: "/sys/fs/cgroup/cpu,cpuacct"},
		},
		{
			name: "v2 only",
			in:   "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n",
			want: mounts{v2: "/sys/fs/cgroup"},
		},
		{
			name: "cpuset is not cpu",
			in:   "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n",
			want: mounts{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseMountinfo(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("parseMountinfo = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestParseKV: a cgroup stat file's "key value" lines are read into a map;
// a line whose value is not a number, or that has more fields, is left out.
func TestParseKV(t *testing.T) {
	t.Parallel()
	kv := parseKV("usage_usec 1234\nnr_periods 10\nnr_throttled 3\nbad line here\nword x\n")
	tests := []struct {
		name string
		key  string
		want int64
		ok   bool
	}{
		{name: "usage", key: "usage_usec", want: 1234, ok: true},
		{name: "periods", key: "nr_periods", want: 10, ok: true},
		{name: "throttled", key: "nr_throttled", want: 3, ok: true},
		{name: "not a number", key: "word", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := kv[tt.key]
			if ok != tt.ok || got != tt.want {
				t.Errorf("kv[%q] = %d, %v; want %d, %v", tt.key, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestUsageSub: the usage between two readings is the difference of each
// counter.
func TestUsageSub(t *testing.T) {
	t.Parallel()
	got := usage{cpuNanos: 5000, periods: 30, throttled: 4}.sub(usage{cpuNanos: 1000, periods: 10, throttled: 1})
	if want := (usage{cpuNanos: 4000, periods: 20, throttled: 3}); got != want {
		t.Errorf("sub = %+v, want %+v", got, want)
	}
}

// TestParseSwitches: a thread's context switches are its voluntary and
// nonvoluntary counts from /proc status, added; either missing, or not a
// number, is an error.
func TestParseSwitches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr bool
	}{
		{name: "both", in: "Name:\tqueue\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n", want: 127},
		{name: "one missing", in: "voluntary_ctxt_switches:\t120\n", wantErr: true},
		{name: "not a number", in: "voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t7\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseSwitches(strings.NewReader(tt.in))
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("parseSwitches error = %v, want an error: %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("parseSwitches = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestSwitchesSince: the switches between two readings sum each thread's
// growth, a new thread counted from 0 and an ended one left out.
func TestSwitchesSince(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		before, after switches
		want          int64
	}{
		{name: "same threads", before: switches{1: 10, 2: 5}, after: switches{1: 15, 2: 6}, want: 6},
		{name: "a new thread counts from 0", before: switches{1: 10}, after: switches{1: 12, 3: 4}, want: 6},
		{name: "an ended thread is lost", before: switches{1: 10, 2: 50}, after: switches{1: 11}, want: 1},
		{name: "nothing", before: switches{}, after: switches{}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, want := tt.after.since(tt.before), tt.want; got != want {
				t.Errorf("since = %d, want %d", got, want)
			}
		})
	}
}

// TestReadSwitchesSelf: this process's threads are found and read; a PID
// that does not exist has none.
func TestReadSwitchesSelf(t *testing.T) {
	t.Parallel()
	// This process has threads with counters; a PID that cannot exist has none.
	if got := readSwitches([]int{os.Getpid()}); len(got) == 0 {
		t.Error("readSwitches(this process) found no thread")
	}
	if got := readSwitches([]int{1 << 30}); len(got) != 0 {
		t.Errorf("readSwitches(no such process) = %v, want none", got)
	}
}

// TestParseReport: a vegeta JSON report gives the request count, the
// success ratio and the latency percentiles; text that is not JSON is an
// error.
func TestParseReport(t *testing.T) {
	t.Parallel()
	in := `{"latencies":{"total":1,"mean":2,"50th":1500000,"90th":3,"95th":4,"99th":4200000,"max":5,"min":6},
"bytes_in":{"total":0,"mean":0},"requests":5000,"rate":250.1,"throughput":249.9,"success":0.998,
"status_codes":{"200":4990,"0":10},"errors":["timeout"]}`
	r, err := parseReport([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		got, want float64
	}{
		{name: "requests", got: float64(r.Requests), want: 5000},
		{name: "success", got: r.Success, want: 0.998},
		{name: "p50", got: float64(r.Latencies.P50), want: 1.5e6},
		{name: "p99", got: float64(r.Latencies.P99), want: 4.2e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.got != tt.want {
				t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
			}
		})
	}
	if _, err := parseReport([]byte("not json")); err == nil {
		t.Error("parseReport(not json) succeeded, want an error")
	}
}

// TestFindGauge: a metric's value is read from a Prometheus page by its
// exact name, "-" when absent.
func TestFindGauge(t *testing.T) {
	t.Parallel()
	page := "# HELP go_sched_gomaxprocs_threads x\n# TYPE go_sched_gomaxprocs_threads gauge\n" +
		"go_sched_gomaxprocs_threads_total 9\ngo_sched_gomaxprocs_threads 1\n"
	tests := []struct {
		name, metric, want string
	}{
		{name: "present", metric: "go_sched_gomaxprocs_threads", want: "1"},
		{name: "a longer name is another metric", metric: "go_sched_gomaxprocs_threads_total", want: "9"},
		{name: "absent", metric: "nope", want: "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, want := findGauge(strings.NewReader(page), tt.metric), tt.want; got != want {
				t.Errorf("findGauge(%s) = %q, want %q", tt.metric, got, want)
			}
		})
	}
}

// TestVerdict: a figure meets its limit at or under it (at or over it for
// an "at least" target), and has no verdict without a figure.
func TestVerdict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		x, limit    float64
		ok, atLeast bool
		want        string
	}{
		{name: "under", x: 10, limit: 30, ok: true, want: "met"},
		{name: "equal", x: 30, limit: 30, ok: true, want: "met"},
		{name: "over", x: 31, limit: 30, ok: true, want: "missed"},
		{name: "at least met", x: 100, limit: 100, ok: true, atLeast: true, want: "met"},
		{name: "at least missed", x: 99.9, limit: 100, ok: true, atLeast: true, want: "missed"},
		{name: "no figure", ok: false, want: "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, want := verdict(tt.x, tt.limit, tt.ok, tt.atLeast), tt.want; got != want {
				t.Errorf("verdict = %q, want %q", got, want)
			}
		})
	}
}

// TestWriteTable: the results table has a row per idle figure with its
// target and verdict (a row measured over other than 30 s scaled to its
// length), the wake-ups row, and a row per throttled rate comparing the
// peers, "-" where a figure is missing.
func TestWriteTable(t *testing.T) {
	t.Parallel()
	summary := `part	peer	case	figure	value
rest	queue	a	seconds	30.001
rest	queue	a	cpu_ms	12.5
rest	queue	a	ctxsw	40
rest	queue	b	seconds	30.0
rest	queue	b	cpu_ms	160
rest	queue	b	ctxsw	300
rest	queue	c	first200_ms	7.2
rest	queue	d	seconds	60.2
rest	queue	d	cpu_ms	50
rest	queue	d	ctxsw	500
throttled	queue	250	requests	5000
throttled	queue	250	success_pct	100.00
throttled	queue	250	p99_ms	1.5
throttled	queue	250	cpu_us_per_req	60
throttled	haproxy	250	requests	5000
throttled	haproxy	250	success_pct	100.00
throttled	haproxy	250	p99_ms	1.0
throttled	haproxy	250	cpu_us_per_req	40
throttled	queue	2000	requests	40000
throttled	queue	2000	success_pct	99.5
throttled	queue	2000	p99_ms	80
`
	f, err := readFigures(strings.NewReader(summary))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	writeTable(&b, f, []string{"250", "2000"}, []string{"nginx", "haproxy", "queue"}, "30 s")
	out := b.String()
	tests := []struct {
		name, line string
	}{
		{name: "row a met", line: "| CPU, upstream down, nobody probing, 30 s | 12.5 ms | at most 30 ms: met |"},
		{name: "row b missed", line: "| CPU, upstream down, a kubelet probe each second, 30 s | 160.0 ms | at most 150 ms: missed |"},
		{name: "row c", line: "| upstream starts after 30 s down, probes every 5 ms: first 200 within | 7.2 ms | at most 20 ms: met |"},
		{name: "row d scaled to 60 s", line: "| CPU, healthy, 1 scrape + 1 probe per second, 60 s | 50.0 ms | at most 60 ms: met |"},
		{name: "wake-ups", line: "| wake-ups (context switches), idle rows a/b/d | 40/300/500 | |"},
		{name: "250 rps: ratio missed", line: "| 250 | - | - | - | 100.00 | 1.00 | 40.0 | 100.00 | 1.50 | 60.0 | 1.50x | met | met | missed |"},
		{name: "2000 rps: only success is a target", line: "| 2000 | - | - | - | - | - | - | 99.50 | 80.00 | - | - | missed | - | - |"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !strings.Contains(out, tt.line+"\n") {
				t.Errorf("table has no line\n%s\nit is:\n%s", tt.line, out)
			}
		})
	}
}

// TestWriteTableBaseline: with a baseline build's figures, the idle rows
// have a column for it and the ratio of queue's to it.
func TestWriteTableBaseline(t *testing.T) {
	t.Parallel()
	summary := `part	peer	case	figure	value
rest	queue	a	seconds	30.0
rest	queue	a	cpu_ms	8
rest	queue	a	ctxsw	90
rest	queuebase	a	seconds	30.0
rest	queuebase	a	cpu_ms	10
rest	queuebase	a	ctxsw	100
rest	queue	c	first200_ms	4.0
`
	f, err := readFigures(strings.NewReader(summary))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	writeTable(&b, f, nil, nil, "30 s")
	out := b.String()
	for _, line := range []string{
		"| figure | queue | queuebase | queue/queuebase | target |",
		"| CPU, upstream down, nobody probing, 30 s | 8.0 ms | 10.0 ms | 0.80x | at most 30 ms: met |",
		"| upstream starts after 30 s down, probes every 5 ms: first 200 within | 4.0 ms | - | - | at most 20 ms: met |",
		"| wake-ups (context switches), idle rows a/b/d | 90/-/- | 100/-/- | | |",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("table has no line\n%s\nit is:\n%s", line, out)
		}
	}
}

// TestWriteTableEmpty: no figures make no table.
func TestWriteTableEmpty(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	writeTable(&b, figures{}, []string{"250"}, []string{"queue"}, "30 s")
	if got := b.String(); got != "" {
		t.Errorf("table of nothing = %q, want empty", got)
	}
}

// TestEvery (on synctest's clock): requests go out once a period, one at a
// time (a slow one delays the next), until max are sent or the context
// ends.
func TestEvery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		period   time.Duration
		max      int64
		cost     time.Duration // how long each request takes
		run      time.Duration // when the context ends
		wantSent int64
		wantEnd  time.Duration // when every returns
	}{
		// Sends at 0, 1, 2, 3 and 4 s and stops at the fifth.
		{name: "count", period: time.Second, max: 5, cost: 10 * time.Millisecond, run: time.Minute,
			wantSent: 5, wantEnd: 4*time.Second + 10*time.Millisecond},
		// Sends at 0, 1 and 2 s; the context ends during the wait for the fourth.
		{name: "context", period: time.Second, max: 10, cost: 10 * time.Millisecond, run: 2500 * time.Millisecond,
			wantSent: 3, wantEnd: 2500 * time.Millisecond},
		// A request longer than the period delays the next one (no overlap):
		// sends at 0, 1.5, 3 and 4.5 s; the last ends at 6 s, after the context.
		{name: "slow requests", period: time.Second, max: 10, cost: 1500 * time.Millisecond, run: 6*time.Second - time.Millisecond,
			wantSent: 4, wantEnd: 6 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), tt.run)
				defer cancel()
				start := time.Now()
				var n counts
				inFlight := 0
				every(ctx, tt.period, tt.max, func(context.Context) int {
					inFlight++
					if inFlight > 1 {
						t.Error("two requests overlap")
					}
					time.Sleep(tt.cost)
					inFlight--
					return 200
				}, probeOK, &n)
				if got, want := time.Since(start), tt.wantEnd; got != want {
					t.Errorf("every returned after %v, want %v", got, want)
				}
				if got, want := n.sent.Load(), tt.wantSent; got != want {
					t.Errorf("sent = %d, want %d", got, want)
				}
				if got, want := n.ok.Load(), tt.wantSent; got != want {
					t.Errorf("ok = %d, want %d", got, want)
				}
			})
		})
	}
}
