package limit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// unavailable is what proxy.StatusFor looks for to answer 503.
type unavailable interface{ Unavailable() bool }

func isUnavailable(err error) bool {
	var u unavailable
	return errors.As(err, &u) && u.Unavailable()
}

func mustNew(t testing.TB, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	return l
}

// queueWaiters starts n waiters, 0 first, each queued before the next
// comes; got receives each one's number once it has a slot.
func queueWaiters(t *testing.T, l *Limiter, n int) chan int {
	got := make(chan int, n)
	queueMore(t, l, got, 0, n)
	return got
}

// queueMore queues waiters from to to-1 as queueWaiters does, onto got.
func queueMore(t *testing.T, l *Limiter, got chan int, from, to int) {
	for i := from; i < to; i++ {
		go func() {
			if err := l.Acquire(t.Context()); err != nil {
				t.Errorf("waiter %d: Acquire = %v", i, err)
				return
			}
			got <- i
		}()
		synctest.Wait()
	}
}

// woken returns the waiter that has got a slot since the last call, or -1.
func woken(got chan int) int {
	synctest.Wait()
	select {
	case i := <-got:
		return i
	default:
		return -1
	}
}

// failAfter bounds the waits of the tests that run on the real clock: the
// failure bound only, never waited out by a passing test.
const failAfter = 30 * time.Second

// waitAll waits for wg within failAfter, and fails the test if it does not
// come: a limiter that loses a wakeup leaves a goroutine waiting for ever.
func waitAll(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(failAfter):
		t.Fatalf("%s not done within %v: a waiter was never woken", what, failAfter)
	}
}

// checkIdle fails unless no slot is held and nobody waits.
func checkIdle(t testing.TB, l *Limiter) {
	t.Helper()
	if got := l.Held(); got != 0 {
		t.Errorf("in flight = %d, want 0", got)
	}
	if got := l.Waiting(); got != 0 {
		t.Errorf("Waiting() = %d, want 0", got)
	}
}

// TestNew: New accepts a capacity from 1 to MaxInt32, a queue depth from 0
// to MaxInt32 and a max wait of 0 or more, and names the field it
// refuses.
func TestNew(t *testing.T) {
	t.Parallel()
	tooBig64 := int64(math.MaxInt32) + 1
	tooBig := int(tooBig64) // negative on 32-bit platforms: still invalid
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // a substring of the error; "" means valid
	}{
		{"capacity only", Config{Capacity: 1}, ""},
		{"all set", Config{Capacity: 10, QueueDepth: 100, MaxWait: time.Second}, ""},
		{"largest", Config{Capacity: math.MaxInt32, QueueDepth: math.MaxInt32}, ""},
		{"zero value", Config{}, "capacity"},
		{"negative capacity", Config{Capacity: -1}, "capacity"},
		{"capacity too big", Config{Capacity: tooBig}, "capacity"},
		{"negative depth", Config{Capacity: 1, QueueDepth: -1}, "queue depth"},
		{"depth too big", Config{Capacity: 1, QueueDepth: tooBig}, "queue depth"},
		{"negative max wait", Config{Capacity: 1, MaxWait: -time.Nanosecond}, "max wait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil || l == nil {
					t.Fatalf("New(%+v) = %v, %v; want a Limiter", tt.cfg, l, err)
				}
				checkIdle(t, l)
				return
			}
			if err == nil || l != nil {
				t.Fatalf("New(%+v) = %v, %v; want an error", tt.cfg, l, err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("New(%+v) error = %q, want it to name %q", tt.cfg, err, tt.wantErr)
			}
		})
	}
}

// TestErrors: the limiter's refusals are 503s (Unavailable) and match
// their own sentinel only; a deadline's wraps context.DeadlineExceeded as
// well; a cancellation is not a 503.
func TestErrors(t *testing.T) {
	t.Parallel()
	deadline := fmt.Errorf("%w: %w", ErrQueueTimeout, context.DeadlineExceeded)
	tests := []struct {
		name            string
		err             error
		wantUnavailable bool
		is, isNot       []error
	}{
		{"queue full", ErrQueueFull, true, []error{ErrQueueFull}, []error{ErrQueueTimeout, context.Canceled}},
		{"queue timeout", ErrQueueTimeout, true, []error{ErrQueueTimeout}, []error{ErrQueueFull, context.DeadlineExceeded}},
		{"wrapped full", fmt.Errorf("serve: %w", ErrQueueFull), true, []error{ErrQueueFull}, nil},
		{"deadline", deadline, true, []error{ErrQueueTimeout, context.DeadlineExceeded}, []error{ErrQueueFull}},
		{"canceled", context.Canceled, false, []error{context.Canceled}, []error{ErrQueueTimeout}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := isUnavailable(tt.err); got != tt.wantUnavailable {
				t.Errorf("Unavailable() = %v, want %v", got, tt.wantUnavailable)
			}
			for _, target := range tt.is {
				if !errors.Is(tt.err, target) {
					t.Errorf("errors.Is(%v, %v) = false, want true", tt.err, target)
				}
			}
			for _, target := range tt.isNot {
				if errors.Is(tt.err, target) {
					t.Errorf("errors.Is(%v, %v) = true, want false", tt.err, target)
				}
			}
		})
	}
	if ErrQueueFull.Error() == ErrQueueTimeout.Error() {
		t.Errorf("ErrQueueFull and ErrQueueTimeout have the same text %q", ErrQueueFull)
	}
}

// TestNeverOverCapacity runs a storm of goroutines through the limiter and
// records the most that ever held a slot at once. Run it with -race.
func TestNeverOverCapacity(t *testing.T) {
	t.Parallel()
	const rounds = 200
	tests := []struct {
		name                       string
		capacity, depth, goroutine int
	}{
		{"capacity 1", 1, 1000, 64},
		{"capacity 4", 4, 1000, 64},
		{"capacity 16", 16, 1000, 64},
		{"shallow queue", 4, 4, 64},
		{"no queue", 4, 0, 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := mustNew(t, Config{Capacity: tt.capacity, QueueDepth: tt.depth})
			var cur, peak, ok, full atomic.Int64
			var wg sync.WaitGroup
			for range tt.goroutine {
				wg.Go(func() {
					for range rounds {
						err := l.Acquire(context.Background())
						switch {
						case err == nil:
							n := cur.Add(1)
							for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
							}
							if got := l.Held(); got > tt.capacity {
								t.Errorf("in flight = %d, want <= %d", got, tt.capacity)
							}
							runtime.Gosched() // hold the slot while others try
							cur.Add(-1)
							l.Release()
							ok.Add(1)
						case errors.Is(err, ErrQueueFull):
							full.Add(1)
						default:
							t.Errorf("Acquire = %v", err)
						}
						if got := l.Waiting(); got > tt.depth {
							t.Errorf("Waiting() = %d, want <= %d", got, tt.depth)
						}
					}
				})
			}
			waitAll(t, &wg, "the storm")
			if got := peak.Load(); got > int64(tt.capacity) || got < 1 {
				t.Errorf("most in flight = %d, want 1..%d", got, tt.capacity)
			}
			if got, want := ok.Load()+full.Load(), int64(tt.goroutine*rounds); got != want {
				t.Errorf("acquired + refused = %d, want %d", got, want)
			}
			if tt.depth+tt.capacity >= tt.goroutine && full.Load() != 0 {
				t.Errorf("%d refused with room for all", full.Load())
			}
			checkIdle(t, l)
		})
	}
}

// TestQueueFull: with every slot held and QueueDepth waiters queued, one
// more Acquire is refused with ErrQueueFull at once.
func TestQueueFull(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		capacity, depth int
	}{
		{"no queue", 1, 0},
		{"queue of 1", 1, 1},
		{"queue of 3", 2, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				l := mustNew(t, Config{Capacity: tt.capacity, QueueDepth: tt.depth})
				for range tt.capacity {
					if err := l.Acquire(t.Context()); err != nil {
						t.Fatalf("Acquire with a free slot = %v", err)
					}
				}
				ctx, cancel := context.WithCancel(t.Context())
				var wg sync.WaitGroup
				for range tt.depth {
					wg.Go(func() {
						if err := l.Acquire(ctx); !errors.Is(err, context.Canceled) {
							t.Errorf("waiter: Acquire = %v, want context.Canceled", err)
						}
					})
				}
				synctest.Wait() // all waiters are blocked in the queue
				if got := l.Waiting(); got != tt.depth {
					t.Fatalf("Waiting() = %d, want %d", got, tt.depth)
				}
				start := time.Now()
				err := l.Acquire(t.Context())
				if err != ErrQueueFull {
					t.Errorf("Acquire with a full queue = %v, want ErrQueueFull", err)
				}
				if d := time.Since(start); d != 0 {
					t.Errorf("refused after %v, want at once", d)
				}
				cancel()
				wg.Wait()
				for range tt.capacity {
					l.Release()
				}
				checkIdle(t, l)
			})
		})
	}
}

// TestWaitGivesUp checks when and how a waiter gives up, on synctest's
// virtual clock. The only slot is held throughout.
func TestWaitGivesUp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		maxWait  time.Duration
		deadline time.Duration // 0: none
		cancelAt time.Duration // 0: never
		wantWait time.Duration
		wantIs   []error
		wantNot  []error
	}{
		{
			name:     "cancel",
			cancelAt: 3 * time.Second,
			wantWait: 3 * time.Second,
			wantIs:   []error{context.Canceled},
			wantNot:  []error{ErrQueueTimeout, ErrQueueFull, context.DeadlineExceeded},
		},
		{
			name:     "cancel before max wait",
			maxWait:  time.Minute,
			cancelAt: time.Second,
			wantWait: time.Second,
			wantIs:   []error{context.Canceled},
			wantNot:  []error{ErrQueueTimeout},
		},
		{
			name:     "deadline",
			deadline: 2 * time.Second,
			wantWait: 2 * time.Second,
			wantIs:   []error{ErrQueueTimeout, context.DeadlineExceeded},
			wantNot:  []error{ErrQueueFull, context.Canceled},
		},
		{
			name:     "deadline before max wait",
			maxWait:  5 * time.Second,
			deadline: 2 * time.Second,
			wantWait: 2 * time.Second,
			wantIs:   []error{ErrQueueTimeout, context.DeadlineExceeded},
		},
		{
			name:     "max wait",
			maxWait:  5 * time.Second,
			wantWait: 5 * time.Second,
			wantIs:   []error{ErrQueueTimeout},
			wantNot:  []error{context.DeadlineExceeded, context.Canceled},
		},
		{
			name:     "max wait before deadline",
			maxWait:  time.Second,
			deadline: 10 * time.Second,
			wantWait: time.Second,
			wantIs:   []error{ErrQueueTimeout},
			wantNot:  []error{context.DeadlineExceeded},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				l := mustNew(t, Config{Capacity: 1, QueueDepth: 1, MaxWait: tt.maxWait})
				if err := l.Acquire(t.Context()); err != nil {
					t.Fatal(err)
				}
				ctx := t.Context()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				if tt.cancelAt > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(tt.cancelAt, cancel)
				}
				start := time.Now()
				err := l.Acquire(ctx)
				if d := time.Since(start); d != tt.wantWait {
					t.Errorf("gave up after %v, want %v", d, tt.wantWait)
				}
				if err == nil {
					t.Fatal("Acquire = nil, want an error")
				}
				for _, target := range tt.wantIs {
					if !errors.Is(err, target) {
						t.Errorf("errors.Is(%v, %v) = false, want true", err, target)
					}
				}
				for _, target := range tt.wantNot {
					if errors.Is(err, target) {
						t.Errorf("errors.Is(%v, %v) = true, want false", err, target)
					}
				}
				if got, want := isUnavailable(err), errors.Is(err, ErrQueueTimeout); got != want {
					t.Errorf("Unavailable(%v) = %v, want %v", err, got, want)
				}
				if got := l.Waiting(); got != 0 {
					t.Errorf("Waiting() = %d after giving up, want 0", got)
				}
				l.Release()
				checkIdle(t, l)
			})
		})
	}
}

// TestWaitersServedInOrder checks that a released slot goes to a waiter,
// the oldest first, without a timer.
func TestWaitersServedInOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		capacity int
		waiters  int
		maxWait  time.Duration
	}{
		{"one waiter", 1, 1, 0},
		{"three waiters", 1, 3, 0},
		{"with max wait", 1, 3, time.Hour},
		{"capacity 2", 2, 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				l := mustNew(t, Config{Capacity: tt.capacity, QueueDepth: tt.waiters, MaxWait: tt.maxWait})
				for range tt.capacity {
					if err := l.Acquire(t.Context()); err != nil {
						t.Fatal(err)
					}
				}
				start := time.Now()
				got := queueWaiters(t, l, tt.waiters)
				if n := l.Waiting(); n != tt.waiters {
					t.Fatalf("Waiting() = %d, want %d", n, tt.waiters)
				}
				for want := range tt.waiters {
					l.Release()
					synctest.Wait()
					select {
					case i := <-got:
						if i != want {
							t.Errorf("slot went to waiter %d, want %d", i, want)
						}
					default:
						t.Fatalf("Release did not wake waiter %d", want)
					}
					if n, want := l.Held(), tt.capacity; n != want {
						t.Errorf("in flight = %d, want %d", n, want)
					}
					if n, want := l.Waiting(), tt.waiters-want-1; n != want {
						t.Errorf("Waiting() = %d, want %d", n, want)
					}
				}
				if d := time.Since(start); d != 0 {
					t.Errorf("waiters took %v of virtual time, want 0", d)
				}
				for range tt.capacity {
					l.Release()
				}
				checkIdle(t, l)
			})
		})
	}
}

// TestGiveUpWhileHandedSlot hands the slot to a waiter in the same instant
// as it gives up. A blocked select commits to whichever channel is ready
// first, so "cancel, then release" makes the waiter give up while Release
// still finds it queued and hands it the slot, which it must pass on.
func TestGiveUpWhileHandedSlot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		cancelFirst  bool
		wantCanceled bool
	}{
		{"cancel then release", true, true},
		{"release then cancel", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				l := mustNew(t, Config{Capacity: 1, QueueDepth: 1})
				if err := l.Acquire(t.Context()); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				errc := make(chan error, 1)
				go func() { errc <- l.Acquire(ctx) }()
				synctest.Wait() // the waiter is blocked in its select
				if tt.cancelFirst {
					cancel()
					l.Release() // before the waiter runs: it is still queued
				} else {
					l.Release()
					cancel()
				}
				err := <-errc
				if got := errors.Is(err, context.Canceled); got != tt.wantCanceled {
					t.Fatalf("Acquire = %v, want canceled = %v", err, tt.wantCanceled)
				}
				if err == nil {
					l.Release()
				}
				checkIdle(t, l)
				if err := l.Acquire(t.Context()); err != nil {
					t.Errorf("Acquire after = %v, want the free slot", err)
				}
			})
		})
	}
}

// TestNoLeakAfterCancellations races many cancellations against slots
// being released and handed over.
func TestNoLeakAfterCancellations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		capacity, depth int
	}{
		{"capacity 1", 1, 64},
		{"capacity 3", 3, 16},
		{"shallow queue", 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := mustNew(t, Config{Capacity: tt.capacity, QueueDepth: tt.depth})
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Go(func() {
					for i := range 300 {
						ctx, cancel := context.WithCancel(context.Background())
						switch (g + i) % 3 {
						case 0:
							go cancel() // races with the wait
						case 1:
							cancel() // done before Acquire
						}
						err := l.Acquire(ctx)
						switch {
						case err == nil:
							runtime.Gosched()
							l.Release()
						case errors.Is(err, context.Canceled), errors.Is(err, ErrQueueFull):
						default:
							t.Errorf("Acquire = %v", err)
						}
						cancel()
					}
				})
			}
			waitAll(t, &wg, "the storm")
			checkIdle(t, l)
			// Every slot is usable again.
			for range tt.capacity {
				if err := l.Acquire(context.Background()); err != nil {
					t.Fatalf("Acquire after the storm = %v", err)
				}
			}
			for range tt.capacity {
				l.Release()
			}
			checkIdle(t, l)
		})
	}
}

// TestReleaseWithoutAcquire: a Release with no slot held frees nothing:
// the capacity stays what it was.
func TestReleaseWithoutAcquire(t *testing.T) {
	t.Parallel()
	l := mustNew(t, Config{Capacity: 1})
	l.Release()
	checkIdle(t, l)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Acquire(context.Background()); err != ErrQueueFull {
		t.Errorf("second Acquire = %v, want ErrQueueFull", err)
	}
}

// TestAcquireReleaseAllocs: an Acquire with a free slot and its Release
// allocate nothing.
func TestAcquireReleaseAllocs(t *testing.T) {
	l := mustNew(t, Config{Capacity: 4, QueueDepth: 4, MaxWait: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	allocs := testing.AllocsPerRun(1000, func() {
		if err := l.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		l.Release()
	})
	if allocs != 0 {
		t.Errorf("Acquire+Release = %v allocs, want 0", allocs)
	}
}

func BenchmarkLimiter(b *testing.B) {
	b.Run("uncontended", func(b *testing.B) {
		b.ReportAllocs()
		l := mustNew(b, Config{Capacity: 1})
		ctx := context.Background()
		for b.Loop() {
			if err := l.Acquire(ctx); err != nil {
				b.Fatal(err)
			}
			l.Release()
		}
	})
	// contended has one slot, more goroutines than CPUs, and a holder that
	// yields its CPU, so most acquisitions queue and are handed a slot by
	// Release (their place in the queue is the allocs/op). waiting/op is
	// the share of holds with a queue behind them.
	b.Run("contended", func(b *testing.B) {
		b.ReportAllocs()
		l := mustNew(b, Config{Capacity: 1, QueueDepth: 1 << 20})
		ctx := context.Background()
		var waits atomic.Int64
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := l.Acquire(ctx); err != nil {
					b.Error(err)
					return
				}
				if l.Waiting() > 0 {
					waits.Add(1)
				}
				runtime.Gosched()
				l.Release()
			}
		})
		b.ReportMetric(float64(waits.Load())/float64(b.N), "waiting/op")
	})
	// parallel-free has a slot for everyone: the fast path under
	// contention for the state word.
	b.Run("parallel-free", func(b *testing.B) {
		b.ReportAllocs()
		l := mustNew(b, Config{Capacity: 1 << 20, QueueDepth: 1 << 20})
		ctx := context.Background()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := l.Acquire(ctx); err != nil {
					b.Error(err)
					return
				}
				l.Release()
			}
		})
	})
}

// TestAcquireWaited: AcquireWaited reports a wait exactly when the request
// was queued: not for a free slot or a full queue, but for a slot handed
// over and for a wait given up.
func TestAcquireWaited(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Capacity: 1, QueueDepth: 1})
		if waited, err := l.AcquireWaited(t.Context()); waited || err != nil {
			t.Fatalf("free slot: waited %v, err %v; want false, nil", waited, err)
		}
		type result struct {
			waited bool
			err    error
		}
		got := make(chan result, 1)
		go func() {
			waited, err := l.AcquireWaited(t.Context())
			got <- result{waited, err}
		}()
		synctest.Wait() // the second is queued
		if waited, err := l.AcquireWaited(t.Context()); waited || !errors.Is(err, ErrQueueFull) {
			t.Errorf("full queue: waited %v, err %v; want false, ErrQueueFull", waited, err)
		}
		l.Release()
		if r := <-got; !r.waited || r.err != nil {
			t.Errorf("slot handed over: waited %v, err %v; want true, nil", r.waited, r.err)
		}

		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			waited, err := l.AcquireWaited(ctx)
			got <- result{waited, err}
		}()
		synctest.Wait()
		cancel()
		if r := <-got; !r.waited || !errors.Is(r.err, context.Canceled) {
			t.Errorf("wait given up: waited %v, err %v; want true, context.Canceled", r.waited, r.err)
		}
		l.Release()
		checkIdle(t, l)
	})
}
