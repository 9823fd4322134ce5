package h1

import (
	"net/http"
)

// Read sessions.
//
// On plain TCP a connection is served in read sessions: one raw read
// (syscall.RawConn.Read) whose callback, step, reads request heads and
// serves the requests that have no body itself, and returns false to wait
// for the socket whenever it needs bytes that have not come. The runtime
// forgets a socket's readiness when a raw read begins; within one, a
// readiness that comes while the callback runs is kept, and the wait after
// it returns at once. So once a read has drained the socket (it returned
// less than it asked for), the session can wait for the next bytes
// without trying a read first: a client that sends its next request only
// after its response costs one read per request, where a read-then-wait
// engine pays a second one that finds nothing (EAGAIN, a system call
// for nothing). nginx and HAProxy read only on readiness too.
//
// What a drained read cannot tell is that the client's FIN or reset came
// with the bytes it returned: the end's readiness was taken with theirs,
// and no more comes. After a whole request that costs nothing (the
// response is written, and a client that closed answers it with a reset,
// which is readiness; a client that only shut its sending side is let go
// by the idle timeout), but a part of a head would be held until the
// header timeout: after one the session reads once more before it waits.
//
// A request whose body is still to come, an Upgrade or CONNECT is served
// outside: its body or tunnel is read from the socket by other code
// (net.Conn.Read, another raw read), which must not run inside the
// session's read. Such a request ends the session, and the next session
// begins with a read, since readiness from before it was forgotten. So
// does TLS, whose records are read by crypto/tls: it is served by readHead
// and serveRequest alone.
//
// A Content-Length body that came whole with its head (body.whole) is read
// from the buffer alone, so its request is served inside, as one without a
// body is: a 16 KiB upload costs one read, not two.

// Session outcomes.
const (
	sessStop  = iota // the connection is done: closed, ended by a request, or gone
	sessServe        // a request was begun (begin) and is to be run outside
	sessError        // sess.err ends the connection: a refused head, or the HTTP/2 preface
)

// session is the state of a read session. It is touched only by the
// connection's goroutine, but for inSession.
type session struct {
	first    bool // no request has come on the connection yet
	needRead bool // the buffer holds no whole head: read before parsing
	drained  bool // the last read emptied the socket
	outcome  int
	err      error
}

// serveSessions serves the connection in read sessions until it is done.
func (c *conn) serveSessions() {
	first := true
	for {
		if c.r == c.w {
			c.idle(first)
			c.sess = session{first: first, needRead: true}
		} else {
			c.state.Store(stateActive)
			c.sess = session{first: first}
		}
		c.headDeadline = false
		c.inSession.Store(true)
		err := c.raw.Read(c.stepFn)
		c.inSession.Store(false)
		first = c.sess.first
		if err != nil {
			return // a deadline, or Shutdown closed it
		}
		switch c.sess.outcome {
		case sessServe:
			if !c.run() {
				return
			}
		case sessError:
			c.headError(c.sess.err)
			return
		default:
			return
		}
	}
}

// step is a read session's callback: see the top of this file. It returns
// false to wait for the socket, true when the session ends (c.sess.outcome).
func (c *conn) step(fd uintptr) bool {
	s := &c.sess
	for {
		if s.needRead {
			c.compact()
			if !c.readRaw(fd) { // nothing there; an idle connection holds no buffer
				s.drained = true
				return false
			}
			if c.state.Load() == stateIdle && !c.state.CompareAndSwap(stateIdle, stateActive) {
				return true // Shutdown closed it
			}
			if c.rerr != nil || c.rn == 0 {
				return true // the client closed or reset the connection
			}
			s.needRead, s.drained = false, c.rn < len(*c.rbuf)-c.w
			c.w += c.rn
		}
		n, err := c.headStep(s.first)
		if err != nil {
			s.outcome, s.err = sessError, err
			return true
		}
		if n == 0 { // part of a head: the rest is still to come
			// Read once more, whether the last read drained the socket or
			// not: a client that sent part of a head and left has its FIN
			// or reset taken with the readiness of those bytes, and only a
			// read sees it; waiting would hold the connection until the
			// header timeout. Heads seldom come in parts, so this read is
			// rare; when it finds nothing, the session waits.
			s.needRead = true
			continue
		}
		s.first = false
		if !c.begin(n) {
			return true
		}
		if h := &c.q.head; (h.Framing != NoBody && !c.body.whole()) || h.Upgrade || c.req.Method == http.MethodConnect {
			s.outcome = sessServe
			return true
		}
		if !c.run() {
			return true
		}
		c.headDeadline = false
		if c.r < c.w {
			continue // a pipelined request
		}
		c.idle(false)
		s.needRead = true
		if s.drained {
			c.releaseRead()
			return false
		}
	}
}
