// Package overload keeps a proxy held to a CPU quota serving what the
// quota can serve when it is offered more, instead of collapsing.
//
// A process held to its quota runs for the quota's share of each period
// and then not at all until the next (the cgroup is throttled). When the
// offered load is more than the quota serves, a goroutine-per-connection
// server left to itself reads every request that arrives before it
// finishes the ones it has started: the requests in flight, the upstream
// connections they need and the client connections the clients open for
// want of a free one all grow, each new connection costs more CPU than a
// request on an old one, the latency passes the clients' timeouts, and the
// work done for clients that have gone feeds the growth (docs/decisions.md
// has the measurements).
//
// A [Guard] watches the cgroup's count of throttled periods. While the
// quota binds (a period throttled within the last [Hold]), it
//
//   - sheds the request limiter to [Limit] slots, newest waiter first but
//     for one slot in four, which goes to the oldest waiter under three
//     seconds (limit.Limiter.Shed): requests beyond wait, and the ones
//     served are the ones whose clients are still there;
//   - shuts the accept gate while requests wait (Wait): new connections
//     stay in the kernel's backlog, which costs the process nothing, until
//     the waiters are served or [GateHold] passes;
//   - has the server close, unserved, the connections that arrive already
//     closed by their clients (requests that timed out in the backlog),
//     all of them on one turn of the gate.
//
// Slots held by requests that do not end soon (a long poll, a stream)
// would leave the rest waiting behind a shed limit: when requests wait,
// no slot has come free for [Stall] and yet the quota has not bound for
// as long (the CPU has room: the slots are stuck, not slow), the limit
// rises by [Limit]. Once no period has been throttled for Hold, the
// limiter is restored.
//
// The guard has no goroutine and no timer: the requests look, at most once
// per [Look], with one read of cpu.stat.
package overload

import (
	"bytes"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/queue-dev/queue/limit"
)

const (
	// Limit is the shed limit, and the step it rises by on a stall.
	Limit = 16

	// Look is how often the requests read cpu.stat, at most.
	Look = 10 * time.Millisecond

	// Hold is how long the guard stays on after the last throttled
	// period.
	Hold = time.Second

	// Stall is how long requests may wait with no slot coming free (a
	// handoff, or fewer held), and no period throttled, before the shed
	// limit rises.
	Stall = 250 * time.Millisecond

	// GateHold is the longest the accept gate stays shut for one accept.
	GateHold = 100 * time.Millisecond
)

// Guard is the overload guard of one limiter. It is safe for concurrent
// use.
type Guard struct {
	stat *os.File
	rc   syscall.RawConn // stat's
	l    *limit.Limiter
	now  func() time.Time

	on   atomic.Bool
	next atomic.Int64 // when the next look may be, in UnixNano
	busy atomic.Bool  // a look is running; guards the fields below

	throttled uint64 // nr_throttled at the last look
	since     int64  // when nr_throttled last rose; 0: never seen to
	handoffs  uint64 // l.Handoffs() at the last look
	held      int    // l.Held() at the last look
	progress  int64  // when slots last came free (a handoff, fewer held), or none waited
	buf       [1024]byte
}

// New returns a guard for l that reads the cgroup v1 or v2 cpu.stat file
// at stat. The counts it finds there now are the baseline.
func New(stat string, l *limit.Limiter) (*Guard, error) {
	f, err := os.Open(stat)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	g := &Guard{stat: f, rc: rc, l: l, now: time.Now}
	n, err := g.read()
	if err != nil {
		f.Close()
		return nil, err
	}
	g.throttled = n
	return g, nil
}

// Close closes the cpu.stat file.
func (g *Guard) Close() error { return g.stat.Close() }

// On reports whether the guard is on: the quota bound within Hold.
func (g *Guard) On() bool { return g.on.Load() }

// Check looks at the quota, if Look has passed since the last look, and
// turns the guard on or off. The request path calls it once a request:
// between looks it is a clock reading and an atomic load.
func (g *Guard) Check() {
	now := g.now().UnixNano()
	if now < g.next.Load() || !g.busy.CompareAndSwap(false, true) {
		return
	}
	g.look(now)
	g.busy.Store(false)
}

func (g *Guard) look(now int64) {
	g.next.Store(now + int64(Look))
	n, err := g.read()
	if err != nil {
		return // a cgroup that went away: stay as we are
	}
	if n != g.throttled {
		g.throttled, g.since = n, now
	}
	bound := g.since != 0 && now-g.since < int64(Hold)
	switch on := g.on.Load(); {
	case bound && !on:
		if g.l.Shed(Limit) {
			g.handoffs, g.held, g.progress = g.l.Handoffs(), g.l.Held(), now
			g.on.Store(true)
		}
	case bound && on:
		h, held := g.l.Handoffs(), g.l.Held()
		if g.l.Waiting() == 0 || h != g.handoffs || held < g.held {
			g.progress = now
		} else if now-g.progress >= int64(Stall) && now-g.since >= int64(Stall) {
			g.l.Raise(Limit)
			g.progress = now
		}
		g.handoffs, g.held = h, held
	case !bound && on:
		g.l.Restore()
		g.on.Store(false)
	}
}

var nrThrottled = []byte("nr_throttled ")

// read returns cpu.stat's nr_throttled.
func (g *Guard) read() (uint64, error) {
	n, err := g.pread()
	if err != nil {
		return 0, err
	}
	b := g.buf[:n]
	i := bytes.Index(b, nrThrottled)
	if i < 0 || (i > 0 && b[i-1] != '\n') {
		return 0, errNoCount
	}
	var v uint64
	for _, c := range b[i+len(nrThrottled):] {
		if c < '0' || c > '9' {
			break
		}
		v = v*10 + uint64(c-'0')
	}
	return v, nil
}

// pread reads cpu.stat from its start into g.buf. It is a raw system call,
// as netio's reads of a socket are, for the same reason: one made through
// the runtime's system-call state (os.File.ReadAt) wakes the runtime's
// monitor thread when the process was idle, which then polls every 20 µs
// for a millisecond or more, on the same CPU quota. Reading a cgroup file
// never blocks.
func (g *Guard) pread() (int, error) {
	var n uintptr
	var e syscall.Errno
	if err := g.rc.Control(func(fd uintptr) {
		for {
			n, _, e = syscall.RawSyscall6(syscall.SYS_PREAD64, fd, uintptr(unsafe.Pointer(&g.buf[0])), uintptr(len(g.buf)), 0, 0, 0)
			if e != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return 0, err
	}
	switch {
	case e != 0:
		return 0, &os.PathError{Op: "read", Path: g.stat.Name(), Err: e}
	case n == 0:
		return 0, errNoCount
	}
	return int(n), nil
}

var errNoCount = &os.PathError{Op: "read", Path: "cpu.stat", Err: os.ErrInvalid}

// Wait is the accept gate, which a server calls before each accept. While
// the guard is on and requests wait for a slot, it blocks until the queue
// empties or GateHold passes. It reports whether the guard is on: the
// server then closes unserved the connections their clients have already
// closed.
func (g *Guard) Wait() bool {
	if !g.on.Load() {
		return false
	}
	if g.l.Waiting() == 0 {
		return true
	}
	t := time.NewTimer(GateHold)
	defer t.Stop()
	for g.on.Load() && g.l.Waiting() > 0 {
		select {
		case <-g.l.Drained():
		case <-t.C:
			return true
		}
	}
	return true
}
