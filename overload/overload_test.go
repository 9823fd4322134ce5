package overload

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queue-dev/queue/limit"
)

// stat is a cpu.stat file the test writes.
type stat string

func newStat(t *testing.T) stat {
	s := stat(filepath.Join(t.TempDir(), "cpu.stat"))
	s.set(t, 0)
	return s
}

// set writes a cgroup v2 cpu.stat with nr_throttled n.
func (s stat) set(t *testing.T, n int) {
	t.Helper()
	body := fmt.Sprintf("usage_usec 100\nuser_usec 60\nsystem_usec 40\nnr_periods 50\nnr_throttled %d\nthrottled_usec 900\n", n)
	if err := os.WriteFile(string(s), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// newGuard returns a guard of an unlimited limiter, on a cpu.stat the
// test writes, with no period throttled yet.
func newGuard(t *testing.T) (stat, *limit.Limiter, *Guard) {
	t.Helper()
	s, l := newStat(t), unlimited(t)
	g, err := New(string(s), l)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	return s, l, g
}

func unlimited(t *testing.T) *limit.Limiter {
	t.Helper()
	l, err := limit.New(limit.Config{Capacity: limit.MaxCapacity, QueueDepth: limit.MaxCapacity})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRead: nr_throttled is read from cgroup v1's and v2's cpu.stat; a
// file without it is refused.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	for name, tt := range map[string]struct {
		body string
		want uint64
		ok   bool
	}{
		"v1":                 {"nr_periods 9\nnr_throttled 7\nthrottled_time 12345\n", 7, true},
		"v2":                 {"usage_usec 1\nnr_periods 9\nnr_throttled 42\nthrottled_usec 5\nnr_bursts 0\n", 42, true},
		"no line":            {"usage_usec 1\nnr_periods 9\n", 0, false},
		"a longer name only": {"xnr_throttled 3\n", 0, false},
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tt.body), 0o600); err != nil {
			t.Fatal(err)
		}
		g, err := New(p, unlimited(t))
		if (err == nil) != tt.ok {
			t.Errorf("%s: New error %v, want ok %v", name, err, tt.ok)
			continue
		}
		if err == nil {
			if g.throttled != tt.want {
				t.Errorf("%s: nr_throttled %d, want %d", name, g.throttled, tt.want)
			}
			g.Close()
		}
	}
	if _, err := New(filepath.Join(dir, "missing"), unlimited(t)); err == nil {
		t.Error("New with no file: no error")
	}
}

// TestGuardOnOff: the guard looks at most once per Look; a throttled
// period turns it on and sheds the limiter to Limit; it stays on for
// Hold after the last one and then restores the limiter.
func TestGuardOnOff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, l, g := newGuard(t)
		g.Check()
		if g.On() || l.Limit() != limit.MaxCapacity {
			t.Fatalf("before any throttling: on %v, limit %d", g.On(), l.Limit())
		}
		s.set(t, 1)
		g.Check()
		if g.On() {
			t.Fatal("the guard looked again within Look")
		}
		time.Sleep(Look)
		g.Check()
		if !g.On() || l.Limit() != Limit || !l.Shedding() {
			t.Fatalf("after a throttled period: on %v, limit %d, shedding %v; want true, %d, true", g.On(), l.Limit(), l.Shedding(), Limit)
		}
		start := time.Now()
		time.Sleep(Hold / 2)
		s.set(t, 2) // another throttled period: Hold counts from here
		g.Check()
		for g.On() {
			time.Sleep(Look)
			g.Check()
		}
		if d := time.Since(start); d < Hold/2+Hold || d > Hold/2+Hold+Look {
			t.Errorf("the guard went off %v after it came on, want %v (+%v)", d, Hold/2+Hold, Look)
		}
		if l.Limit() != limit.MaxCapacity || l.Shedding() {
			t.Errorf("after the guard: limit %d, shedding %v; want the configured one, false", l.Limit(), l.Shedding())
		}
	})
}

// TestGuardStall: while requests wait, no slot comes free and the quota
// does not bind, for Stall, the shed limit rises by Limit; slots coming
// free, as a handoff or as fewer held, are progress, and a quota that
// binds means the slots are slow, not stuck.
func TestGuardStall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, l, g := newGuard(t)
		for range Limit + 1 {
			if err := l.Acquire(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		s.set(t, 1)
		g.Check() // on, with one more held than the limit
		waited := make(chan error, 1)
		go func() { waited <- l.Acquire(t.Context()) }()
		synctest.Wait()
		look := func(bound bool) {
			t.Helper()
			if bound {
				s.set(t, int(g.throttled)+1)
			}
			time.Sleep(Look)
			g.Check()
		}
		for range 2 * Stall / Look {
			look(true) // no slot comes free, but the CPU is what is short
		}
		for range Stall/Look - 1 {
			look(false)
		}
		l.Release() // fewer held: progress
		for range Stall/Look - 1 {
			look(false)
		}
		if l.Limit() != Limit || l.Waiting() != 1 {
			t.Fatalf("before a stall: limit %d, waiting %d; want %d, 1", l.Limit(), l.Waiting(), Limit)
		}
		for range 2 {
			look(false)
		}
		if l.Limit() != 2*Limit {
			t.Fatalf("after a stall: limit %d, want %d", l.Limit(), 2*Limit)
		}
		if err := <-waited; err != nil {
			t.Fatalf("the waiter: %v", err)
		}
		for range Limit + 1 {
			l.Release()
		}
	})
}

// TestWait: the gate is open while the guard is off, and while it is on
// but nothing waits; with a request waiting, it stays shut until the
// queue empties, or for GateHold at most.
func TestWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, l, g := newGuard(t)
		if g.Wait() {
			t.Fatal("Wait with the guard off reported overload")
		}
		s.set(t, 1)
		g.Check()
		for range Limit {
			if err := l.Acquire(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		if !g.Wait() || time.Since(start) != 0 {
			t.Fatal("Wait with the guard on and no waiter: want true at once")
		}

		waited := make(chan error, 1)
		go func() { waited <- l.Acquire(t.Context()) }()
		synctest.Wait()
		if !g.Wait() || time.Since(start) != GateHold {
			t.Fatalf("Wait with a waiter that stays: returned after %v, want GateHold", time.Since(start))
		}

		opened := make(chan time.Duration, 1)
		start = time.Now()
		go func() {
			g.Wait()
			opened <- time.Since(start)
		}()
		time.Sleep(GateHold / 4)
		l.Release() // the waiter gets the slot: the queue is empty
		if d := <-opened; d != GateHold/4 {
			t.Errorf("the gate opened %v after the queue emptied at %v", d, GateHold/4)
		}
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
		for range Limit {
			l.Release()
		}
	})
}

// BenchmarkCheck is the guard's cost to a request: between looks, a clock
// reading and an atomic load; one request in each Look also reads cpu.stat.
func BenchmarkCheck(b *testing.B) {
	dir := b.TempDir()
	p := filepath.Join(dir, "cpu.stat")
	if err := os.WriteFile(p, []byte("nr_periods 9\nnr_throttled 0\nthrottled_time 0\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	l, err := limit.New(limit.Config{Capacity: limit.MaxCapacity, QueueDepth: limit.MaxCapacity})
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(p, l)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	b.ReportAllocs()
	for b.Loop() {
		g.Check()
	}
}
