package limit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// unavailableError is the type of the package's sentinel errors. Its
// Unavailable method is what proxy.StatusFor looks for to answer 503,
// without this package importing proxy.
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return e.msg }

// Unavailable reports true: the request may succeed on another instance.
func (e *unavailableError) Unavailable() bool { return true }

var (
	// ErrQueueFull is returned by Acquire when no slot is free and
	// QueueDepth requests are already waiting. It is returned at once,
	// without waiting. Its Unavailable method reports true.
	ErrQueueFull error = &unavailableError{"limit: queue full"}

	// ErrQueueTimeout is returned by Acquire when MaxWait passes before a
	// slot is free. When the context's deadline passes first, Acquire's
	// error matches both ErrQueueTimeout and context.DeadlineExceeded with
	// errors.Is. Its Unavailable method reports true.
	ErrQueueTimeout error = &unavailableError{"limit: wait for a slot timed out"}
)

// maxCount bounds Capacity and QueueDepth so that each count fits in its
// half of the packed state word.
const maxCount = math.MaxInt32

// Config configures a Limiter. It is read only by New.
type Config struct {
	// Capacity is the most requests in flight at once. It must be > 0 (an
	// unlimited instance has no Limiter at all), unless Adaptive is set:
	// then it is the most the adaptive limit may rise to, and 0 means
	// MaxLimit.
	Capacity int

	// QueueDepth is the most requests that may wait for a slot. 0 means
	// none may wait: when no slot is free, Acquire fails at once with
	// ErrQueueFull. With Adaptive it must be 0: the queue is as deep as
	// the limit is high, whatever the limit is at the moment.
	QueueDepth int

	// MaxWait is the longest a request waits for a slot before Acquire
	// fails with ErrQueueTimeout. 0 means it waits until its context is
	// done. It does not limit the time a slot is held. With Adaptive it
	// bounds the adaptive wait bound (WaitShare of the upstream's no-load
	// round trip) from above, and 0 means no bound but that one.
	MaxWait time.Duration

	// Adaptive makes the capacity follow the upstream's latency instead
	// of staying at Capacity: the limit rises while the round trip of the
	// requests holding a slot stays near the upstream's no-load round
	// trip and falls when it grows (adaptive.go, docs/decisions.md D26).
	// The controller runs on the requests' own Release calls: ReleaseSince
	// gives it each request's round trip. false: the fixed limit.
	Adaptive bool
}

// Limiter is a counting semaphore with a bounded, first-come-first-served
// wait queue. Create it with New; the zero value is not usable. It is safe
// for concurrent use.
type Limiter struct {
	// state packs the number of slots held (low 32 bits) and the number of
	// requests waiting (high 32 bits). Keeping both in one word lets
	// Acquire take a free slot, and Release free one when nobody waits,
	// with one compare-and-swap and no lock: the idea of the semaphore in
	// Knative's pkg/queue/breaker.go.
	//
	// The held count changes without mu only while nobody waits; the
	// waiting count changes only under mu, together with the list, so
	// under mu the list holds exactly "waiting" entries. Invariant: waiting
	// > 0 only while every slot is held, because a request queues only
	// when none is free and Release hands its slot to a waiter rather than
	// freeing it while anyone waits, so a newcomer cannot jump the queue.
	state atomic.Uint64

	mu         sync.Mutex
	head, tail *waiter // FIFO of waiting requests; guarded by mu

	// capacity, depth and maxWait are set by New and, in adaptive mode,
	// by the controller (setLimit, under mu). They are atomics so that
	// the adaptive mode costs the fixed one nothing on the path: an
	// atomic load compiles to a plain load on amd64
	// (BenchmarkLimiter/uncontended, 14 ns before and after).
	capacity atomic.Uint64
	depth    atomic.Uint64
	maxWait  atomic.Int64 // a time.Duration; 0: none

	ctl *controller // nil: the fixed limit
}

// waiter is one request in the queue. It is allocated only on the slow path.
type waiter struct {
	// ready receives the slot. Release sends under mu and the buffer of 1
	// means it never blocks.
	ready      chan struct{}
	prev, next *waiter
}

const (
	heldMask = 1<<32 - 1
	waitOne  = 1 << 32
)

func unpack(s uint64) (held, waiting uint64) { return s & heldMask, s >> 32 }

// New returns a Limiter for cfg, or an error naming the first field that is
// out of range.
func New(cfg Config) (*Limiter, error) {
	if cfg.Adaptive {
		return newAdaptive(cfg)
	}
	switch {
	case cfg.Capacity <= 0:
		return nil, fmt.Errorf("limit: capacity %d: must be > 0", cfg.Capacity)
	case cfg.Capacity > maxCount:
		return nil, fmt.Errorf("limit: capacity %d: must be at most %d", cfg.Capacity, maxCount)
	case cfg.QueueDepth < 0:
		return nil, fmt.Errorf("limit: queue depth %d: must be >= 0", cfg.QueueDepth)
	case cfg.QueueDepth > maxCount:
		return nil, fmt.Errorf("limit: queue depth %d: must be at most %d", cfg.QueueDepth, maxCount)
	case cfg.MaxWait < 0:
		return nil, fmt.Errorf("limit: max wait %v: must be >= 0", cfg.MaxWait)
	}
	l := &Limiter{}
	l.capacity.Store(uint64(cfg.Capacity))
	l.depth.Store(uint64(cfg.QueueDepth))
	l.maxWait.Store(int64(cfg.MaxWait))
	return l, nil
}

// Acquire takes a slot, waiting for one if none is free. On success the
// caller holds the slot and must call Release exactly once.
//
// When a slot is free Acquire takes it at once, without looking at ctx,
// taking a lock, allocating or starting a timer. When none is free and
// QueueDepth requests already wait, it returns ErrQueueFull at once.
// Otherwise it waits until a slot is handed to it, MaxWait passes
// (ErrQueueTimeout), or ctx is done: it then returns ctx's error wrapped, so
// that errors.Is matches context.Canceled or context.DeadlineExceeded, and
// for a deadline also ErrQueueTimeout. A request that gives up leaves no
// slot and no place in the queue behind.
func (l *Limiter) Acquire(ctx context.Context) error {
	_, err := l.AcquireWaited(ctx)
	return err
}

// AcquireWaited is Acquire that also reports whether the request waited in
// the queue, whatever the outcome (false: a slot was free, or the queue was
// full). A caller that has waited may find that its client left meanwhile.
func (l *Limiter) AcquireWaited(ctx context.Context) (waited bool, err error) {
	for {
		s := l.state.Load()
		held, waiting := unpack(s)
		// waiting > 0 with a slot free happens only for the moment an
		// adaptive limit takes to hand its new slots to the waiters
		// (setLimit): a newcomer queues behind them.
		if held >= l.capacity.Load() || waiting > 0 {
			if waiting >= l.depth.Load() {
				return false, ErrQueueFull
			}
			return l.wait(ctx)
		}
		if l.state.CompareAndSwap(s, s+1) {
			return false, nil
		}
	}
}

// wait is Acquire's slow path: it queues the request under mu and blocks
// until Release hands it a slot, or it gives up. It reports whether the
// request was queued.
func (l *Limiter) wait(ctx context.Context) (waited bool, err error) {
	l.mu.Lock()
	for {
		// A slot may have come free, or the queue filled, since Acquire
		// looked.
		s := l.state.Load()
		held, waiting := unpack(s)
		if held < l.capacity.Load() {
			if waiting > 0 {
				// An adaptive limit rose: the oldest waiter first.
				l.handFree(s)
				continue
			}
			if l.state.CompareAndSwap(s, s+1) {
				l.mu.Unlock()
				return false, nil
			}
			continue
		}
		if waiting >= l.depth.Load() {
			l.mu.Unlock()
			return false, ErrQueueFull
		}
		if l.state.CompareAndSwap(s, s+waitOne) {
			break
		}
	}
	w := &waiter{ready: make(chan struct{}, 1)}
	l.push(w)
	l.mu.Unlock()

	var expired <-chan time.Time
	if d := time.Duration(l.maxWait.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-w.ready:
		return true, nil
	case <-ctx.Done():
		err = ctx.Err()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", ErrQueueTimeout, err)
		} else {
			err = fmt.Errorf("limit: wait for a slot: %w", err)
		}
	case <-expired:
		err = ErrQueueTimeout
	}

	// Give up. Under mu the waiter is either still queued, or Release has
	// already sent it a slot, which it must pass on.
	l.mu.Lock()
	select {
	case <-w.ready:
		l.mu.Unlock()
		l.Release()
	default:
		l.remove(w)
		l.state.Add(^uint64(waitOne - 1)) // minus waitOne, as sync/atomic documents
		l.mu.Unlock()
	}
	return true, err
}

// Release gives back a slot taken by a successful Acquire. If requests are
// waiting, the slot goes straight to the one that has waited longest;
// otherwise it becomes free. Release never blocks on a channel; it takes a
// lock only when requests are waiting.
//
// Calling Release without a matching Acquire is a bug in the caller: it lets
// more than Capacity requests in, or, when no slot is held, does nothing.
//
// In adaptive mode a slot given back while more are held than the limit
// (it has just fallen) becomes free, not a waiter's, until the held count
// is under the limit again. ReleaseSince is Release that also tells the
// controller how long the slot was held.
func (l *Limiter) Release() {
	for {
		s := l.state.Load()
		held, waiting := unpack(s)
		switch {
		case waiting > 0 && held <= l.capacity.Load():
			if l.handOff() {
				return
			}
		case held == 0:
			return
		default:
			if l.state.CompareAndSwap(s, s-1) {
				return
			}
		}
	}
}

// handOff gives the caller's slot to the oldest waiter; the held count does
// not change. It reports false when the queue emptied, or an adaptive
// limit fell under the held count, before it took mu.
func (l *Limiter) handOff() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.head
	if w == nil {
		return false
	}
	if l.ctl != nil {
		if held, _ := unpack(l.state.Load()); held > l.capacity.Load() {
			return false
		}
	}
	l.remove(w)
	l.state.Add(^uint64(waitOne - 1)) // minus waitOne, as sync/atomic documents
	w.ready <- struct{}{}
	return true
}

// handFree gives a free slot to the oldest waiter, which s (the state
// word) shows to be there: held goes up by one and waiting down by one in
// one compare-and-swap. It does nothing when the state has changed since
// s was loaded; the caller looks again. l.mu must be held.
func (l *Limiter) handFree(s uint64) {
	if l.state.CompareAndSwap(s, s+1-waitOne) {
		w := l.head
		l.remove(w)
		w.ready <- struct{}{}
	}
}

// push appends w to the queue. l.mu must be held.
func (l *Limiter) push(w *waiter) {
	w.prev = l.tail
	if l.tail == nil {
		l.head = w
	} else {
		l.tail.next = w
	}
	l.tail = w
}

// remove takes w out of the queue. l.mu must be held.
func (l *Limiter) remove(w *waiter) {
	if w.prev == nil {
		l.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		l.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
}

// Waiting returns the number of requests waiting for a slot now, at most
// QueueDepth: the queue_depth metric. It is one atomic load.
func (l *Limiter) Waiting() int {
	_, waiting := unpack(l.state.Load())
	return int(waiting)
}

// Limit returns the most requests that may be in flight now: Capacity, or
// in adaptive mode the controller's limit (while it measures the no-load
// round trip, the low limit it pins for that, MinLimit). It is the
// queue_concurrency_limit metric, and one atomic load.
func (l *Limiter) Limit() int { return int(l.capacity.Load()) }

// Adaptive reports whether the limit is adaptive (Config.Adaptive). The
// chain package uses it to decide, once, whether to give the controller
// the round trips.
func (l *Limiter) Adaptive() bool { return l.ctl != nil }
