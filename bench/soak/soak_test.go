package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestMain lets the test binary be the soak's upstream: the soak re-executes
// its own binary with upstreamEnv set.
func TestMain(m *testing.M) {
	if addr := os.Getenv(upstreamEnv); addr != "" {
		os.Exit(serveUpstream(addr))
	}
	os.Exit(m.Run())
}

// TestSoakSmoke builds queue and runs the soak for 14 s at a low rate: two
// phases, one upstream kill (8 s in, 1 s down), a certificate rotation,
// rounds of slow and vanishing clients. It checks that every kind of
// client got through, that the kill was seen, that no failure fell outside
// the fault, and that the table came out. Drift and queue's exit time are
// logged, not asserted: they are findings about queue, which a 14 s run is
// too short to judge, not about the soak.
func TestSoakSmoke(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "queue")
	build := exec.Command("go", "build", "-o", bin, "github.com/queue-dev/queue/cmd/queue")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/queue: %v\n%s", err, out)
	}
	cfg, err := parseFlags([]string{
		"-queue", bin, "-work", dir,
		"-duration", "14s", "-phase", "7s", "-rest", "2s",
		"-http-rate", "10", "-grpc-rate", "10", "-stream-rate", "2", "-workers", "2",
		"-request-timeout", "10s",
		"-kill-every", "16s", "-down", "1s", "-long-every", "0",
		"-slow-every", "3s", "-vanish-every", "2s", "-rotate-every", "4s",
		"-exit-limit", "2s",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out, log bytes.Buffer
	cfg.stdout, cfg.log = &out, &log
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := run(ctx, cfg)
	t.Logf("soak output:\n%s\n%s", out.String(), log.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for p := range nProto {
		if rep.total.counts[p].req == 0 {
			t.Errorf("no %s requests", p)
		}
	}
	if got, want := len(rep.total.kills), 1; got != want {
		t.Errorf("kills = %d, want %d", got, want)
	}
	if n := rep.others(); n != 0 {
		t.Errorf("%d failures outside every fault", n)
	}
	if got, want := len(rep.rows), 4; got != want {
		t.Errorf("rows = %d, want %d (baseline, two phases, total)", got, want)
	}
	for _, s := range []string{"| phase | elapsed |", "| base |", "| total |", "verdict: "} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q", s)
		}
	}
	if len(rep.exits) != 2 {
		t.Errorf("exits = %d, want 2", len(rep.exits))
	}
}

// TestClassify: a failure is put down to a kill when it was in flight at
// the kill, or started between the kill and the window's end; to no fault
// otherwise, nor to a window still open.
func TestClassify(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ws := []*window{
		{kill: at(10), end: at(13)},
		{kill: at(30), end: at(35)},
		{kill: at(50)}, // still open: explains nothing yet
	}
	tests := []struct {
		name        string
		start, stop float64
		want        kind
	}{
		{name: "before the kill", start: 5, stop: 9, want: other},
		{name: "in flight at the kill", start: 9, stop: 10.5, want: atKill},
		{name: "long stream cut by the kill", start: 1, stop: 10, want: atKill},
		{name: "started while down", start: 11, stop: 11.1, want: afterKill},
		{name: "started at the window's end", start: 13, stop: 13.1, want: afterKill},
		{name: "after the window", start: 13.5, stop: 14, want: other},
		{name: "second window", start: 34, stop: 36, want: afterKill},
		{name: "open window", start: 51, stop: 52, want: other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := classify(at(tt.start), at(tt.stop), ws); got != tt.want {
				t.Errorf("classify(%v, %v) = %d, want %d", tt.start, tt.stop, got, tt.want)
			}
		})
	}
}

// TestRecorder drives a recorder through a kill on a fake clock: a request
// in flight at the kill, one that arrives while the upstream is down, one
// that fails after the window closed, and the first success after the
// restart, which closes the window.
func TestRecorder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{slack: time.Second}
		errFail := errors.New("502")
		inFlight := time.Now()
		time.Sleep(100 * time.Millisecond)
		w := r.kill(2 * time.Second)
		time.Sleep(time.Millisecond)
		r.done(pH1, inFlight, errFail) // in flight at the kill
		arrived := time.Now()
		time.Sleep(time.Millisecond)
		r.done(pGRPC, arrived, errFail) // arrived while down
		time.Sleep(2 * time.Second)
		r.up(w)
		r.done(pH2C, arrived, nil) // held through the downtime: a success, but not the first after up
		if !w.firstOK.IsZero() {
			t.Fatal("a request that started before the restart closed the window")
		}
		r.done(pCert, time.Now(), nil) // a handshake with queue alone
		if !w.firstOK.IsZero() {
			t.Fatal("a certificate check closed the window")
		}
		first := time.Now()
		time.Sleep(time.Millisecond)
		r.done(pH2C, first, nil) // the first success after the restart
		time.Sleep(500 * time.Millisecond)
		late := time.Now()
		r.done(pWS, late, errFail) // within the slack
		time.Sleep(time.Second)
		lost := time.Now()
		r.done(pWS, lost, errFail) // past the slack
		r.vanished(pVanish)

		res := r.endPhase()
		want := [nProto]count{
			pH1:     {req: 1, atKill: 1},
			pH2C:    {req: 2},
			pGRPC:   {req: 1, afterKill: 1},
			pWS:     {req: 2, afterKill: 1, other: 1},
			pVanish: {req: 1, own: 1},
			pCert:   {req: 1},
		}
		if res.counts != want {
			t.Errorf("counts = %+v\nwant     %+v", res.counts, want)
		}
		if got, want := res.longest, 2*time.Second+3*time.Millisecond; got != want {
			t.Errorf("recovery = %v, want %v", got, want)
		}
		if !slices.Equal(res.kills, []time.Duration{2 * time.Second}) {
			t.Errorf("kills = %v, want [2s]", res.kills)
		}
		if len(res.others) != 1 || res.others[0].p != pWS {
			t.Errorf("others = %+v, want the one ws failure", res.others)
		}
		if next := r.endPhase(); next.counts != ([nProto]count{}) || len(next.kills) != 0 {
			t.Errorf("the next phase starts with %+v", next)
		}
	})
}

// TestParseProc: the RSS, CPU time and goroutine count are read from
// /proc status, /proc stat (a command name with spaces and parentheses
// included) and the metrics page; a text without the figure is an error.
func TestParseProc(t *testing.T) {
	t.Parallel()
	t.Run("rss", func(t *testing.T) {
		t.Parallel()
		got, err := parseRSS("Name:\tqueue\nVmPeak:\t  99999 kB\nVmRSS:\t   12345 kB\nThreads:\t7\n")
		if err != nil || got != 12345 {
			t.Errorf("parseRSS = %d, %v; want 12345", got, err)
		}
		if _, err := parseRSS("Name:\tqueue\n"); err == nil {
			t.Error("parseRSS without VmRSS: no error")
		}
	})
	t.Run("cpu", func(t *testing.T) {
		t.Parallel()
		// A command name with a space and a ')' must not shift the fields.
		stat := "4242 (we ird) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 150 50 0 0 20 0 7 0 100 0 0"
		got, err := parseCPU(stat)
		if err != nil || got != 2 {
			t.Errorf("parseCPU = %v, %v; want 2 (200 ticks)", got, err)
		}
		if _, err := parseCPU("4242 (short) S 1"); err == nil {
			t.Error("parseCPU of a short line: no error")
		}
	})
	t.Run("goroutines", func(t *testing.T) {
		t.Parallel()
		text := "# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines_x 3\ngo_goroutines 17\n"
		got, err := parseGoroutines(strings.NewReader(text))
		if err != nil || got != 17 {
			t.Errorf("parseGoroutines = %d, %v; want 17", got, err)
		}
		if _, err := parseGoroutines(strings.NewReader("go_threads 4\n")); err == nil {
			t.Error("parseGoroutines without the gauge: no error")
		}
	})
}

// TestDrift: a child's descriptors, goroutines and RSS past the
// baseline's slack are named, and a child within it is settled.
func TestDrift(t *testing.T) {
	t.Parallel()
	s := slack{fds: 4, goroutines: 10, rssMiB: 8}
	base := [2]sample{{fds: 14, goroutines: 10, rssKiB: 10 << 10}, {fds: 13, goroutines: 9, rssKiB: 10 << 10}}
	tests := []struct {
		name    string
		now     [2]sample
		want    []string
		settled bool
	}{
		{name: "at baseline", now: base, settled: true},
		{name: "within slack", now: [2]sample{{fds: 18, goroutines: 20, rssKiB: 18 << 10}, {fds: 17, goroutines: 19}}, settled: true},
		{name: "descriptors", now: [2]sample{{fds: 19, goroutines: 10}, base[1]}, want: []string{"up-h1 fds +5"}},
		{name: "goroutines", now: [2]sample{base[0], {fds: 13, goroutines: 20}}, want: []string{"up-h2c goroutines +11"}},
		{
			name: "RSS past the baseline's slack",
			now:  [2]sample{{fds: 14, goroutines: 10, rssKiB: 19 << 10}, {fds: 13, goroutines: 9, rssKiB: 12 << 10}},
			want: []string{"up-h1 RSS +9.0 MiB"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := drift(base, tt.now, s); !slices.Equal(got, tt.want) {
				t.Errorf("drift = %q, want %q", got, tt.want)
			}
			if got := settled(base, tt.now, s); got != tt.settled {
				t.Errorf("settled = %v, want %v", got, tt.settled)
			}
		})
	}
}

// TestKillsCell: the kills cell gives their number, then how many lasted
// each downtime.
func TestKillsCell(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		kills []time.Duration
		want  string
	}{
		{name: "none", want: "0"},
		{name: "one", kills: []time.Duration{2 * time.Second}, want: "1 (1×2s)"},
		{name: "mixed", kills: []time.Duration{2 * time.Second, 10 * time.Second, 2 * time.Second}, want: "3 (2×2s, 1×10s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := killsCell(tt.kills); got != tt.want {
				t.Errorf("killsCell = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestParseFlags: the defaults and consistent flags parse; a rest not
// shorter than a phase, no workers, a zero downtime with kills, and a stray
// argument are refused.
func TestParseFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{name: "defaults"},
		{name: "a minute", args: []string{"-duration", "1m"}},
		{name: "rest as long as a phase", args: []string{"-phase", "5s", "-rest", "5s"}, wantErr: true},
		{name: "no workers", args: []string{"-workers", "0"}, wantErr: true},
		{name: "zero downtime", args: []string{"-down", "0s"}, wantErr: true},
		{name: "zero downtime without kills", args: []string{"-down", "0s", "-kill-every", "0"}},
		{name: "stray argument", args: []string{"now"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseFlags(tt.args, io.Discard)
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Errorf("parseFlags(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			}
		})
	}
}
