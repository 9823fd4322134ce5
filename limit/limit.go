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
	// unlimited instance has no Limiter at all).
	Capacity int

	// QueueDepth is the most requests that may wait for a slot. 0 means
	// none may wait: when no slot is free, Acquire fails at once with
	// ErrQueueFull.
	QueueDepth int

	// MaxWait is the longest a request waits for a slot before Acquire
	// fails with ErrQueueTimeout. 0 means it waits until its context is
	// done. It does not limit the time a slot is held.
	MaxWait time.Duration
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

	capacity uint64
	depth    uint64
	maxWait  time.Duration
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
	return &Limiter{
		capacity: uint64(cfg.Capacity),
		depth:    uint64(cfg.QueueDepth),
		maxWait:  cfg.MaxWait,
	}, nil
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
	for {
		s := l.state.Load()
		held, waiting := unpack(s)
		if held >= l.capacity {
			if waiting >= l.depth {
				return ErrQueueFull
			}
			return l.wait(ctx)
		}
		if l.state.CompareAndSwap(s, s+1) {
			return nil
		}
	}
}

// wait is Acquire's slow path: it queues the request under mu and blocks
// until Release hands it a slot, or it gives up.
func (l *Limiter) wait(ctx context.Context) error {
	l.mu.Lock()
	for {
		// A slot may have come free, or the queue filled, since Acquire
		// looked.
		s := l.state.Load()
		held, waiting := unpack(s)
		if held < l.capacity {
			if l.state.CompareAndSwap(s, s+1) {
				l.mu.Unlock()
				return nil
			}
			continue
		}
		if waiting >= l.depth {
			l.mu.Unlock()
			return ErrQueueFull
		}
		if l.state.CompareAndSwap(s, s+waitOne) {
			break
		}
	}
	w := &waiter{ready: make(chan struct{}, 1)}
	l.push(w)
	l.mu.Unlock()

	var expired <-chan time.Time
	if l.maxWait > 0 {
		t := time.NewTimer(l.maxWait)
		defer t.Stop()
		expired = t.C
	}
	var err error
	select {
	case <-w.ready:
		return nil
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
	return err
}

// Release gives back a slot taken by a successful Acquire. If requests are
// waiting, the slot goes straight to the one that has waited longest;
// otherwise it becomes free. Release never blocks on a channel; it takes a
// lock only when requests are waiting.
//
// Calling Release without a matching Acquire is a bug in the caller: it lets
// more than Capacity requests in, or, when no slot is held, does nothing.
func (l *Limiter) Release() {
	for {
		s := l.state.Load()
		held, waiting := unpack(s)
		switch {
		case waiting > 0:
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
// not change. It reports false when the queue emptied before it took mu.
func (l *Limiter) handOff() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.head
	if w == nil {
		return false
	}
	l.remove(w)
	l.state.Add(^uint64(waitOne - 1)) // minus waitOne, as sync/atomic documents
	w.ready <- struct{}{}
	return true
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
