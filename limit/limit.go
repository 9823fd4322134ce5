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

// MaxCapacity bounds Capacity and QueueDepth so that each count fits in
// its half of the packed state word.
const MaxCapacity = math.MaxInt32

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

	// Shedding (Shed, Restore; shed.go). base is the fixed capacity New
	// set. While shed, capacity is lower than base and waiters get their
	// slots newest first but for OldShare's (newest, turn, young, guarded
	// by mu; next). handoffs counts the slots handed to waiters, under mu:
	// the progress a shed limit's owner watches for. drained receives when
	// the queue empties (remove), for the accept gate; nil in adaptive mode.
	base     uint64
	newest   bool
	turn     uint64  // slots handed out while shed, for OldShare
	young    *waiter // every waiter queued before it had waited OldAge when next passed it
	handoffs uint64
	drained  chan struct{}

	// The fixed limit's one timer for MaxWait (expireAt), guarded by mu.
	expiry      *time.Timer
	expiryArmed bool

	// waiters recycles waiters: a waiter is off the queue and its ready
	// channel empty once its wait has returned. The pool is the
	// limiter's own, so that a channel never serves two limiters (nor
	// two of synctest's bubbles).
	waiters sync.Pool
}

// waiter is one request in the queue, taken from the limiter's pool on the
// slow path only.
type waiter struct {
	// ready receives the slot. Release sends under mu and the buffer of 1
	// means it never blocks.
	ready      chan struct{}
	prev, next *waiter
	since      time.Time // when it queued, if the limiter was shed; else zero
	deadline   time.Time // when MaxWait runs out for it (expire); else zero
	expired    bool      // expire took it out of the queue: no slot came with ready
}

// expireAt gives w, about to queue, the deadline at, and arms the expiry
// timer if it is not armed. The fixed limit's MaxWait never changes, so
// the deadlines grow from the head of the queue to its tail, whatever
// the order slots are handed out in, and one timer, for the head's,
// serves them all. l.mu must be held.
func (l *Limiter) expireAt(w *waiter, at time.Time) {
	w.deadline = at
	if l.expiryArmed {
		return
	}
	l.expiryArmed = true
	if l.expiry == nil {
		l.expiry = time.AfterFunc(time.Until(at), l.expire)
	} else {
		l.expiry.Reset(time.Until(at))
	}
}

// expire runs when the head's MaxWait may have run out: it takes every
// waiter whose deadline has passed out of the queue, telling it through
// its ready channel, and arms the timer again for the new head.
func (l *Limiter) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for l.head != nil && !l.head.deadline.IsZero() && !l.head.deadline.After(now) {
		w := l.head
		l.remove(w)
		l.state.Add(^uint64(waitOne - 1)) // minus waitOne, as sync/atomic documents
		w.expired = true
		w.ready <- struct{}{}
	}
	if l.head != nil && !l.head.deadline.IsZero() {
		l.expiry.Reset(l.head.deadline.Sub(now))
	} else {
		l.expiryArmed = false
	}
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
	case cfg.Capacity > MaxCapacity:
		return nil, fmt.Errorf("limit: capacity %d: must be at most %d", cfg.Capacity, MaxCapacity)
	case cfg.QueueDepth < 0:
		return nil, fmt.Errorf("limit: queue depth %d: must be >= 0", cfg.QueueDepth)
	case cfg.QueueDepth > MaxCapacity:
		return nil, fmt.Errorf("limit: queue depth %d: must be at most %d", cfg.QueueDepth, MaxCapacity)
	case cfg.MaxWait < 0:
		return nil, fmt.Errorf("limit: max wait %v: must be >= 0", cfg.MaxWait)
	}
	l := &Limiter{base: uint64(cfg.Capacity), drained: make(chan struct{}, 1)}
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
// One exception: a request that got its slot after less than FreshWait
// while the limiter was shed (Shed) reports no wait. Newest first, the
// slots go to requests that have just come; under a CPU quota that binds,
// a look at each one's client (a system call) cost more than the
// departures it found, which the engines see a moment later anyway.
func (l *Limiter) AcquireWaited(ctx context.Context) (waited bool, err error) {
	for {
		s := l.state.Load()
		held, waiting := unpack(s)
		// waiting > 0 with a slot free happens only for the moment a
		// limit that rose takes to hand its new slots to the waiters
		// (setLimit, setCapacity): a newcomer queues behind them.
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
				// The limit rose (adaptive, Restore, Raise): the
				// waiters first.
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
	w, _ := l.waiters.Get().(*waiter)
	if w == nil {
		w = &waiter{ready: make(chan struct{}, 1)}
	}
	defer func() {
		w.since, w.deadline, w.expired = time.Time{}, time.Time{}, false
		l.waiters.Put(w)
	}()
	var expired <-chan time.Time
	if d := time.Duration(l.maxWait.Load()); d > 0 || l.newest {
		now := time.Now()
		if l.newest {
			w.since = now
		}
		if d > 0 && l.ctl == nil {
			l.expireAt(w, now.Add(d))
		} else if d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			expired = t.C
		}
	}
	l.push(w)
	l.mu.Unlock()

	select {
	case <-w.ready:
		if w.expired {
			return true, ErrQueueTimeout
		}
		// A short wait while shed is not worth a look (AcquireWaited).
		return w.since.IsZero() || time.Since(w.since) >= FreshWait, nil
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
	// already sent it a slot, which it must pass on, or the expiry has
	// taken it out.
	l.mu.Lock()
	select {
	case <-w.ready:
		l.mu.Unlock()
		if !w.expired {
			l.Release()
		}
	default:
		l.remove(w)
		l.state.Add(^uint64(waitOne - 1)) // minus waitOne, as sync/atomic documents
		l.mu.Unlock()
	}
	return true, err
}

// Release gives back a slot taken by a successful Acquire. If requests are
// waiting, the slot goes straight to the one that has waited longest (the
// newest while shed: Shed); otherwise it becomes free. Release never
// blocks on a channel; it takes a lock only when requests are waiting.
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

// handOff gives the caller's slot to the next waiter (next); the held
// count does not change. It reports false when the queue emptied, or the
// limit fell under the held count (adaptive, Shed), before it took mu.
func (l *Limiter) handOff() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head == nil {
		return false
	}
	if held, _ := unpack(l.state.Load()); held > l.capacity.Load() {
		return false
	}
	w := l.next()
	l.remove(w)
	l.state.Add(^uint64(waitOne - 1)) // minus waitOne, as sync/atomic documents
	l.handoffs++
	w.ready <- struct{}{}
	return true
}

// handFree gives a free slot to the next waiter (next), which s (the state
// word) shows to be there: held goes up by one and waiting down by one in
// one compare-and-swap. It does nothing when the state has changed since
// s was loaded; the caller looks again. l.mu must be held.
func (l *Limiter) handFree(s uint64) {
	if l.state.CompareAndSwap(s, s+1-waitOne) {
		w := l.next()
		l.remove(w)
		l.handoffs++
		w.ready <- struct{}{}
	}
}

// next is the waiter the next slot goes to: the oldest, or while shed the
// newest, but for one slot in OldShare, which goes to the oldest waiter
// that has waited under OldAge (young), if one does. l.mu must be held,
// and the slot given to the waiter returned.
func (l *Limiter) next() *waiter {
	if !l.newest {
		return l.head
	}
	l.turn++
	if l.turn%OldShare == 0 {
		now := time.Now()
		for l.young != nil && !l.young.since.IsZero() && now.Sub(l.young.since) >= OldAge {
			l.young = l.young.next
		}
		if l.young != nil {
			return l.young
		}
	}
	return l.tail
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
	if l.young == nil {
		l.young = w
	}
}

// remove takes w out of the queue. l.mu must be held.
func (l *Limiter) remove(w *waiter) {
	if l.young == w {
		l.young = w.next
	}
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
	if l.head == nil && l.drained != nil {
		select {
		case l.drained <- struct{}{}:
		default:
		}
	}
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
