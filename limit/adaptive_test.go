package limit

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// simUpstream is an upstream whose latency is base (times a jitter of
// +-20%) while at most knee requests run at once, and grows in proportion
// beyond: with n > knee running, a request that starts takes
// base*n/knee. Its throughput is then flat at knee/base, the knee of a
// real server whose workers are all busy. It runs inside a synctest
// bubble, where its time.Sleep is the fake clock's: it stands for the
// upstream's work, not for synchronisation.
type simUpstream struct {
	base    time.Duration
	knee    atomic.Int64
	running atomic.Int64
}

func newSimUpstream(base time.Duration, knee int) *simUpstream {
	u := &simUpstream{base: base}
	u.knee.Store(int64(knee))
	return u
}

// serve runs one request and returns its latency. jitter is in [0.8, 1.2].
func (u *simUpstream) serve(jitter float64) time.Duration {
	n := u.running.Add(1)
	d := time.Duration(float64(u.base) * jitter * max(1, float64(n)/float64(u.knee.Load())))
	time.Sleep(d)
	u.running.Add(-1)
	return d
}

// outcome is one simulated request.
type outcome struct {
	at       time.Duration // arrival, since the start of the run
	client   time.Duration // arrival to the end of the response, the wait included
	upstream time.Duration // the upstream's latency; 0: refused (503)
}

// simRun records a simulation: the requests and the limit over time.
type simRun struct {
	mu       sync.Mutex
	outcomes []outcome
	limits   []limitPoint
}

type limitPoint struct {
	at      time.Duration
	limit   int  // the controller's limit, rounded down
	probing bool // the limit was pinned to measure the no-load round trip
}

// drive sends requests through l to u in an open loop: arrivals at rate
// per second, exponentially spaced, from t0 until t0+d on the fake clock,
// and records the limit every 100 ms. It returns once every request has
// ended. It must run inside a synctest bubble.
func (r *simRun) drive(t *testing.T, l *Limiter, u *simUpstream, rng *rand.Rand, t0 time.Time, rate float64, d time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	end := t0.Add(d)
	wg.Go(func() {
		for now := time.Now(); now.Before(end); now = time.Now() {
			r.mu.Lock()
			r.limits = append(r.limits, r.point(l, now.Sub(t0)))
			r.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	})
	for now := time.Now(); now.Before(end); now = time.Now() {
		jitter := 0.8 + 0.4*rng.Float64()
		wg.Go(func() {
			arrived := time.Now()
			o := outcome{at: arrived.Sub(t0)}
			if err := l.Acquire(context.Background()); err != nil {
				if !errors.Is(err, ErrQueueFull) && !errors.Is(err, ErrQueueTimeout) {
					t.Errorf("Acquire = %v, want a 503 error", err)
				}
			} else {
				start := time.Now()
				o.upstream = u.serve(jitter)
				l.ReleaseSince(start)
			}
			o.client = time.Since(arrived)
			r.mu.Lock()
			r.outcomes = append(r.outcomes, o)
			r.mu.Unlock()
		})
		time.Sleep(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
	}
	wg.Wait()
}

func (r *simRun) point(l *Limiter, at time.Duration) limitPoint {
	c := l.ctl
	c.mu.Lock()
	defer c.mu.Unlock()
	return limitPoint{at: at, limit: int(c.limit), probing: c.probing}
}

// served returns the client and upstream latencies of the requests served
// that arrived in [from, to), and how many were refused.
func (r *simRun) served(from, to time.Duration) (client, upstream []time.Duration, refused int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.outcomes {
		if o.at < from || o.at >= to {
			continue
		}
		if o.upstream == 0 {
			refused++
			continue
		}
		client = append(client, o.client)
		upstream = append(upstream, o.upstream)
	}
	return client, upstream, refused
}

// limitRange returns the lowest and highest limit recorded in [from, to)
// outside the measurements of the no-load round trip.
func (r *simRun) limitRange(from, to time.Duration) (lo, hi int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	lo, hi = -1, -1
	for _, p := range r.limits {
		if p.at < from || p.at >= to || p.probing {
			continue
		}
		if lo < 0 || p.limit < lo {
			lo = p.limit
		}
		hi = max(hi, p.limit)
	}
	return lo, hi
}

// settledAt returns the first time from which every limit recorded up to
// to stays in [lo, hi], or -1.
func (r *simRun) settledAt(lo, hi int, to time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := time.Duration(-1)
	for _, p := range r.limits {
		if p.at >= to {
			break
		}
		switch {
		case p.probing:
		case p.limit < lo || p.limit > hi:
			at = -1
		case at < 0:
			at = p.at
		}
	}
	return at
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// p99AtKnee is the simulated upstream's p99 with exactly knee requests in
// flight (knee clients in a closed loop, no limiter): the latency the
// adaptive limit must stay near.
func p99AtKnee(t *testing.T, base time.Duration, knee int) time.Duration {
	var p99 time.Duration
	synctest.Test(t, func(t *testing.T) {
		u := newSimUpstream(base, knee)
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		for i := range knee {
			rng := rand.New(rand.NewPCG(uint64(i), 8))
			wg.Go(func() {
				for range 250 {
					d := u.serve(0.8 + 0.4*rng.Float64())
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		p99 = quantile(lat, 0.99)
	})
	return p99
}

// TestAdaptiveFindsKnee drives the simulated upstream (knee 8) at twice
// its throughput at the knee for a minute of fake time: the limit must
// settle in [6, 16] within 30 s and stay there, and over the second half
// the p99 of the upstream's latency, and of the client's (the wait for a
// slot included), must stay within twice the upstream's p99 at 8 in
// flight. The upstream must still be kept busy: the requests served are
// at least 3/4 of its throughput at the knee.
func TestAdaptiveFindsKnee(t *testing.T) {
	t.Parallel()
	const knee = 8
	tests := []struct {
		name string
		base time.Duration
	}{
		{"10ms", 10 * time.Millisecond},
		{"50ms", 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ref := p99AtKnee(t, tt.base, knee)
			synctest.Test(t, func(t *testing.T) {
				l := mustNew(t, Config{Adaptive: true})
				u := newSimUpstream(tt.base, knee)
				rate := 2 * knee / tt.base.Seconds()
				var run simRun
				run.drive(t, l, u, rand.New(rand.NewPCG(1, 2)), time.Now(), rate, 60*time.Second)

				at := run.settledAt(6, 16, 60*time.Second)
				lo, hi := run.limitRange(30*time.Second, 60*time.Second)
				t.Logf("knee %d, base %v: limit settled in [6,16] at %v; from 30 s on in [%d, %d]", knee, tt.base, at, lo, hi)
				if at < 0 || at > 30*time.Second {
					t.Errorf("limit settled in [6, 16] at %v, want within 30s", at)
				}
				if lo < 6 || hi > 16 {
					t.Errorf("limit from 30 s to 60 s in [%d, %d], want within [6, 16]", lo, hi)
				}
				client, upstream, refused := run.served(30*time.Second, 60*time.Second)
				cp99, up99 := quantile(client, 0.99), quantile(upstream, 0.99)
				thru := float64(len(upstream)) / 30 / (knee / tt.base.Seconds())
				t.Logf("p99 at %d in flight %v; at 2x: upstream p99 %v (%.2fx), client p99 %v (%.2fx), p50 %v; served %d (%.2f of the knee's throughput), refused %d",
					knee, ref, up99, float64(up99)/float64(ref), cp99, float64(cp99)/float64(ref), quantile(client, 0.5), len(upstream), thru, refused)
				if up99 > 2*ref {
					t.Errorf("upstream p99 %v at twice the load, want at most 2x %v", up99, ref)
				}
				if cp99 > 2*ref {
					t.Errorf("client p99 %v at twice the load, want at most 2x %v", cp99, ref)
				}
				if thru < 0.75 {
					t.Errorf("served %.2f of the upstream's throughput at the knee, want at least 0.75", thru)
				}
			})
		})
	}
}

// TestAdaptiveKneeMoves moves the simulated upstream's knee from 8 down to
// 4 and up to 16, a minute each, driven at twice its throughput at the
// knee of the moment: each time the limit must settle within 30 s
// between 3/4 and twice the new knee, and stay there.
func TestAdaptiveKneeMoves(t *testing.T) {
	t.Parallel()
	const base = 50 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Adaptive: true})
		u := newSimUpstream(base, 8)
		rng := rand.New(rand.NewPCG(3, 4))
		for _, knee := range []int{8, 4, 16} {
			u.knee.Store(int64(knee))
			var run simRun
			run.drive(t, l, u, rng, time.Now(), 2*float64(knee)/base.Seconds(), 60*time.Second)
			lo, hi := knee*3/4, 2*knee
			at := run.settledAt(lo, hi, 60*time.Second)
			gotLo, gotHi := run.limitRange(30*time.Second, 60*time.Second)
			t.Logf("knee %d: limit settled in [%d, %d] at %v; from 30 s on in [%d, %d]", knee, lo, hi, at, gotLo, gotHi)
			if at < 0 || at > 30*time.Second {
				t.Errorf("knee %d: limit settled in [%d, %d] at %v, want within 30s", knee, lo, hi, at)
			}
			if gotLo < lo || gotHi > hi {
				t.Errorf("knee %d: limit from 30 s to 60 s in [%d, %d], want within [%d, %d]", knee, gotLo, gotHi, lo, hi)
			}
		}
	})
}

// TestAdaptiveSlowerUpstream doubles the upstream's latency at every
// concurrency (a slower release, a slower dependency): the round trip is
// then twice the no-load one measured, and the limit falls to MinLimit;
// the next measurement, at most probeInterval (and its jitter) later,
// finds the new no-load round trip and the limit climbs back to the knee.
func TestAdaptiveSlowerUpstream(t *testing.T) {
	t.Parallel()
	const knee = 8
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Adaptive: true})
		u := newSimUpstream(20*time.Millisecond, knee)
		rng := rand.New(rand.NewPCG(5, 6))
		var warm simRun
		warm.drive(t, l, u, rng, time.Now(), 2*knee/u.base.Seconds(), 20*time.Second)

		u.base = 40 * time.Millisecond // no request is running: drive has returned
		var run simRun
		jitter := probeJitter // not a constant: 1.1 has no exact float
		d := time.Duration(float64(probeInterval)*(1+jitter)) + 30*time.Second
		run.drive(t, l, u, rng, time.Now(), 2*knee/u.base.Seconds(), d+10*time.Second)
		lo, _ := run.limitRange(0, 5*time.Second)
		at := run.settledAt(6, 16, d+10*time.Second)
		t.Logf("lowest limit in the first 5 s %d; settled in [6, 16] again at %v", lo, at)
		if lo > 4 {
			t.Errorf("lowest limit in the 5 s after the upstream slowed = %d, want it to fall to about %d", lo, MinLimit)
		}
		if at < 0 || at > d {
			t.Errorf("limit settled in [6, 16] again at %v, want within %v (a measurement and 30 s)", at, d)
		}
	})
}

// TestAdaptiveQuiet: an application that keeps few requests in flight
// does not raise the limit toward MaxLimit, which would let a later burst
// through unchecked: the limit stays within a few times the bursts.
func TestAdaptiveQuiet(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Adaptive: true})
		u := newSimUpstream(20*time.Millisecond, 8)
		var run simRun
		// 2 requests in flight on average, in an upstream that could take 8.
		run.drive(t, l, u, rand.New(rand.NewPCG(7, 8)), time.Now(), 2/u.base.Seconds(), 60*time.Second)
		_, hi := run.limitRange(0, 60*time.Second)
		t.Logf("highest limit %d", hi)
		// The limit follows the bursts (it rises in windows where they
		// reach half of it), but without idleShare it would climb 10% a
		// window, past 1000 within the minute.
		if hi > 32 {
			t.Errorf("highest limit with 2 requests in flight on average = %d, want at most 32", hi)
		}
	})
}

// TestAdaptiveWindows follows the controller window by window with one
// request at a time against an upstream of constant latency: the first
// window measures the no-load round trip with the limit pinned at
// MinLimit, which also sets the wait bound; windows of a quiet
// application leave the limit alone; busy ones raise it by growth; a
// window whose round trip is twice the no-load one cuts it by
// minGradient; and the measurement comes again after probeInterval.
func TestAdaptiveWindows(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const rtt = 20 * time.Millisecond
		l := mustNew(t, Config{Adaptive: true, MaxWait: time.Hour})
		c := l.ctl
		// window runs rounds of n requests at once, each of latency d,
		// until the controller closes its window.
		window := func(n int, d time.Duration) {
			t.Helper()
			before := c.windows
			for range 2 * windowSamples {
				var wg sync.WaitGroup
				for range n {
					if err := l.Acquire(t.Context()); err != nil {
						t.Fatalf("Acquire = %v", err)
					}
					wg.Go(func() {
						start := time.Now()
						time.Sleep(d)
						l.ReleaseSince(start)
					})
				}
				wg.Wait()
				if c.windows > before {
					break
				}
			}
			if c.windows != before+1 {
				t.Fatalf("%d windows closed, want 1", c.windows-before)
			}
		}
		if got := l.Limit(); got != MinLimit {
			t.Fatalf("Limit() at start = %d, want MinLimit %d", got, MinLimit)
		}
		if got := time.Duration(l.maxWait.Load()); got != time.Hour {
			t.Errorf("wait bound before a measurement = %v, want MaxWait", got)
		}

		window(1, rtt)
		if !c.probing && c.minRTT == 0 {
			t.Fatal("the first window measured nothing")
		}
		if got := c.minRTT; got < rtt*97/100 || got > rtt*103/100 {
			t.Errorf("no-load round trip = %v, want %v within the histogram's 3%%", got, rtt)
		}
		if got, want := time.Duration(l.maxWait.Load()), time.Duration(float64(c.minRTT)*WaitShare); got != want {
			t.Errorf("wait bound = %v, want %v", got, want)
		}
		if got := l.Limit(); got != MinLimit {
			t.Errorf("Limit() after the measurement = %d, want %d", got, MinLimit)
		}

		window(1, rtt) // 1 of 3 in flight: quiet
		if got := l.Limit(); got != MinLimit {
			t.Errorf("Limit() after a quiet window = %d, want %d", got, MinLimit)
		}
		for _, want := range []int{4, 5, 6, 7, 8, 9, 10, 11} { // +1 until 10% is more than 1
			window(l.Limit(), rtt)
			if got := l.Limit(); got != want {
				t.Errorf("Limit() after a busy window = %d, want %d", got, want)
			}
		}
		window(l.Limit(), rtt*105/100) // within tolerance: still up
		if got := l.Limit(); got != 12 {
			t.Errorf("Limit() after a window 5%% slower = %d, want 12", got)
		}
		before := c.limit
		window(l.Limit(), 2*rtt)
		want := before * (1 + tolerance) / 2
		want += max(want*growth, 1)
		if got := c.limit; got < want*0.95 || got > want*1.05 {
			t.Errorf("limit after a window at twice the round trip = %.2f, want about %.2f", got, want)
		}
		before = c.limit
		window(l.Limit(), 10*rtt) // the gradient stops at minGradient
		want = max(before*minGradient+1, MinLimit)
		if got := c.limit; got < want*0.95 || got > want*1.05 {
			t.Errorf("limit after a window at ten times the round trip = %.2f, want about %.2f", got, want)
		}

		time.Sleep(probeInterval + probeInterval/5)
		window(2, rtt)
		if !c.probing || l.Limit() != MinLimit {
			t.Errorf("after probeInterval: probing %v, Limit() %d; want a measurement at %d", c.probing, l.Limit(), MinLimit)
		}
		window(1, rtt/2) // a faster upstream
		if got := c.minRTT; got > rtt*52/100 {
			t.Errorf("no-load round trip measured again = %v, want about %v", got, rtt/2)
		}
		if got, want := l.Limit(), int(c.limit); c.probing || got != want {
			t.Errorf("after the measurement: probing %v, Limit() %d; want %d", c.probing, got, want)
		}
	})
}

// TestAdaptiveNew: the adaptive mode takes a ceiling of 0 (MaxLimit) or
// at least MinLimit, no queue depth (its queue follows its limit), and
// starts at MinLimit.
func TestAdaptiveNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"defaults", Config{Adaptive: true}, ""},
		{"ceiling", Config{Adaptive: true, Capacity: 64, MaxWait: time.Second}, ""},
		{"ceiling at the floor", Config{Adaptive: true, Capacity: MinLimit}, ""},
		{"ceiling under the floor", Config{Adaptive: true, Capacity: MinLimit - 1}, "capacity"},
		{"negative ceiling", Config{Adaptive: true, Capacity: -1}, "capacity"},
		{"queue depth", Config{Adaptive: true, QueueDepth: 10}, "queue depth"},
		{"negative max wait", Config{Adaptive: true, MaxWait: -1}, "max wait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := New(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New(%+v) = %v, want an error naming %q", tt.cfg, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%+v) = %v", tt.cfg, err)
			}
			if !l.Adaptive() || l.Limit() != MinLimit || l.depth.Load() != MinLimit {
				t.Errorf("Adaptive() %v, Limit() %d, depth %d; want true, %d, %d", l.Adaptive(), l.Limit(), l.depth.Load(), MinLimit, MinLimit)
			}
			checkIdle(t, l)
		})
	}
}

// TestFixedUnchanged: a fixed limiter reports its Capacity as its limit
// for ever, and ReleaseSince is its Release.
func TestFixedUnchanged(t *testing.T) {
	t.Parallel()
	l := mustNew(t, Config{Capacity: 2, QueueDepth: 1})
	if l.Adaptive() || l.Limit() != 2 {
		t.Fatalf("Adaptive() %v, Limit() %d; want false, 2", l.Adaptive(), l.Limit())
	}
	for range 1000 {
		if err := l.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		l.ReleaseSince(time.Now().Add(-time.Hour))
	}
	if l.Limit() != 2 {
		t.Errorf("Limit() = %d after 1000 requests, want 2", l.Limit())
	}
	checkIdle(t, l)
}

// TestSetLimit: slots a higher limit frees go to the waiters at once, the
// oldest first; under a lower one, released slots become free instead of
// going to a waiter until fewer are held than the limit.
func TestSetLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Adaptive: true})
		for range MinLimit {
			if err := l.Acquire(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		got := queueWaiters(t, l, MinLimit)
		if n := l.Waiting(); n != MinLimit {
			t.Fatalf("Waiting() = %d, want %d", n, MinLimit)
		}
		for want := range 2 {
			l.setLimit(uint64(MinLimit+want+1), 0)
			synctest.Wait()
			select {
			case i := <-got:
				if i != want {
					t.Errorf("a new slot went to waiter %d, want %d", i, want)
				}
			default:
				t.Fatalf("waiter %d not handed a new slot", want)
			}
		}
		if n, w := l.Held(), l.Waiting(); n != MinLimit+2 || w != 1 {
			t.Fatalf("in flight %d, waiting %d; want %d, 1", n, w, MinLimit+2)
		}
		// Under a lower limit, the slots released past it are freed, not
		// handed to the waiter, until fewer than the limit are held.
		l.setLimit(2, 0)
		for range MinLimit + 2 - 2 {
			l.Release()
			synctest.Wait()
			select {
			case i := <-got:
				t.Fatalf("waiter %d handed a slot while over the limit", i)
			default:
			}
		}
		if n, w := l.Held(), l.Waiting(); n != 2 || w != 1 {
			t.Fatalf("in flight %d, waiting %d; want 2, 1", n, w)
		}
		l.Release() // at the limit: the slot goes to the waiter
		synctest.Wait()
		select {
		case i := <-got:
			if i != 2 {
				t.Errorf("slot went to waiter %d, want 2", i)
			}
		default:
			t.Fatal("the waiter was not handed the released slot")
		}
		l.Release()
		l.Release()
		checkIdle(t, l)
	})
}

// TestAdaptiveStorm runs a storm of goroutines through an adaptive limiter
// on the real clock, whose controller moves the limit as its windows
// close: no more than the ceiling ever hold a slot, every waiter is woken
// or gives up, and nothing is left held. Run it with -race.
func TestAdaptiveStorm(t *testing.T) {
	t.Parallel()
	const ceiling, goroutines, rounds = 8, 32, 300
	l := mustNew(t, Config{Adaptive: true, Capacity: ceiling, MaxWait: time.Second})
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				err := l.Acquire(context.Background())
				switch {
				case err == nil:
					start := time.Now()
					if got := l.Held(); got > ceiling {
						t.Errorf("in flight = %d, want <= %d", got, ceiling)
					}
					for range (g + i) % 4 {
						runtime.Gosched() // hold the slot while others try
					}
					l.ReleaseSince(start)
					ok.Add(1)
				case errors.Is(err, ErrQueueFull), errors.Is(err, ErrQueueTimeout):
					refused.Add(1)
				default:
					t.Errorf("Acquire = %v", err)
				}
			}
		})
	}
	waitAll(t, &wg, "the storm")
	l.ctl.mu.Lock()
	windows := l.ctl.windows
	l.ctl.mu.Unlock()
	t.Logf("%d served, %d refused, %d windows, limit now %d", ok.Load(), refused.Load(), windows, l.Limit())
	if got, want := ok.Load()+refused.Load(), int64(goroutines*rounds); got != want {
		t.Errorf("served + refused = %d, want %d", got, want)
	}
	checkIdle(t, l)
}

// TestAdaptiveAllocs: in adaptive mode too, an Acquire with a free slot
// and its ReleaseSince allocate nothing, the releases that close a window
// included.
func TestAdaptiveAllocs(t *testing.T) {
	l := mustNew(t, Config{Adaptive: true, MaxWait: time.Second})
	ctx := context.Background()
	allocs := testing.AllocsPerRun(10*windowSamples, func() {
		if err := l.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		l.ReleaseSince(time.Now())
	})
	if allocs != 0 {
		t.Errorf("Acquire+ReleaseSince = %v allocs, want 0", allocs)
	}
}

// TestHistogram: a duration's bucket middle is within 1/32 of it, buckets
// grow with durations, and the quantile is the middle of the bucket that
// holds it.
func TestHistogram(t *testing.T) {
	t.Parallel()
	last := -1
	for d := int64(0); d < 1<<maxOctave; d += 1 + d/50 {
		i := bucketOf(d)
		if i < last || i >= nBuckets {
			t.Fatalf("bucketOf(%d) = %d after %d, want a growing index under %d", d, i, last, nBuckets)
		}
		last = i
		if v := bucketValue(i); d >= subCount && (v-d > d/32+1 || d-v > d/32+1) {
			t.Fatalf("bucketValue(bucketOf(%d)) = %d, more than 1/32 off", d, v)
		}
	}
	if got := bucketOf(1 << 50); got != nBuckets-1 {
		t.Errorf("bucketOf(2^50) = %d, want the last bucket %d", got, nBuckets-1)
	}
	var h histogram
	if got := h.quantile(0.5); got != 0 {
		t.Errorf("quantile of nothing = %v, want 0", got)
	}
	for _, d := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, time.Hour} {
		h.add(d)
	}
	if got := h.quantile(0.5); got < 1940*time.Microsecond || got > 2060*time.Microsecond {
		t.Errorf("median of 1, 2, 3 ms and an hour = %v, want about 2ms", got)
	}
	h.reset()
	if got := h.quantile(0.5); got != 0 || h.n.Load() != 0 {
		t.Errorf("after reset: quantile %v, n %d; want 0, 0", got, h.n.Load())
	}
}

// BenchmarkAdaptive is BenchmarkLimiter's uncontended and parallel-free
// cases for the adaptive mode: Acquire, a clock reading, and ReleaseSince,
// which adds the round trip to the window and, once a window, closes it.
func BenchmarkAdaptive(b *testing.B) {
	b.Run("uncontended", func(b *testing.B) {
		b.ReportAllocs()
		l := mustNew(b, Config{Adaptive: true})
		ctx := context.Background()
		for b.Loop() {
			if err := l.Acquire(ctx); err != nil {
				b.Fatal(err)
			}
			l.ReleaseSince(time.Now())
		}
	})
	b.Run("parallel-free", func(b *testing.B) {
		b.ReportAllocs()
		l := mustNew(b, Config{Adaptive: true, Capacity: 1 << 20})
		ctx := context.Background()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := l.Acquire(ctx); err != nil {
					if errors.Is(err, ErrQueueFull) || errors.Is(err, ErrQueueTimeout) {
						continue // the limit is what the controller found
					}
					b.Error(err)
					return
				}
				l.ReleaseSince(time.Now())
			}
		})
	})
}
