package h2

import (
	"crypto/tls"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/queue-dev/queue/internal/netio"
	"github.com/queue-dev/queue/internal/pool"
)

// connReader is what the connection's Framer reads: the connection
// through a read buffer. On plain TCP the buffer is taken only when the
// socket has bytes to read, in the runtime's readiness callback, and given
// back whenever it is empty: an idle HTTP/2 connection holds no read
// buffer, as an idle HTTP/1.1 one holds none (package h1), and the read
// that waits is the read that fills, one system call as with net.Conn.
// Under TLS, whose own buffers may hold what the socket no longer shows,
// the buffer stays and reads go through the TLS connection.
type connReader struct {
	nc   net.Conn
	raw  syscall.RawConn            // the TCP socket; nil under TLS
	pend interface{ Pending() int } // bytes replayed before the socket's, if any
	buf  *[]byte
	r, w int
	err  error
	fill func(fd uintptr) bool // readRaw, made once
}

// The read buffers come from internal/pool, whose pool.Frame class is
// readBufSize: these fail to compile when the two differ.
var (
	_ [pool.Frame - readBufSize]struct{}
	_ [readBufSize - pool.Frame]struct{}
)

// init makes r read nc; tcp is its socket on plain TCP, else nil.
func (r *connReader) init(nc net.Conn, tcp *net.TCPConn) {
	r.nc = nc
	r.pend, _ = nc.(interface{ Pending() int })
	r.fill = r.readRaw
	if tcp != nil {
		r.raw, _ = tcp.SyscallConn()
	}
}

// underlying finds what nc wraps (the h1 engine's replayed and counted
// connections): its TLS connection, or under none its TCP socket.
func underlying(nc net.Conn) (*tls.Conn, *net.TCPConn) {
	for {
		switch c := nc.(type) {
		case *tls.Conn:
			return c, nil
		case *net.TCPConn:
			return nil, c
		case interface{ NetConn() net.Conn }:
			nc = c.NetConn()
		default:
			return nil, nil
		}
	}
}

func (r *connReader) Read(p []byte) (int, error) {
	if r.r == r.w {
		if err := r.more(); err != nil {
			return 0, err
		}
	}
	n := copy(p, (*r.buf)[r.r:r.w])
	r.r += n
	if r.r == r.w {
		r.release()
	}
	return n, nil
}

// payload returns the next n bytes, the payload of a frame whose header
// was just read: in place in the read buffer when the frame is whole there
// (always, in a read session), valid until the next read; else read into
// *scratch, grown to n if need be.
func (r *connReader) payload(n int, scratch *[]byte) ([]byte, error) {
	if r.buf != nil && r.w-r.r >= n {
		p := (*r.buf)[r.r : r.r+n]
		r.r += n
		return p, nil
	}
	if cap(*scratch) < n {
		*scratch = make([]byte, n)
	}
	p := (*scratch)[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, err
	}
	return p, nil
}

// more reads what comes next into an empty buffer.
func (r *connReader) more() error {
	r.r, r.w = 0, 0
	if r.raw == nil || (r.pend != nil && r.pend.Pending() > 0) {
		if r.buf == nil {
			r.buf = pool.Get(readBufSize)
		}
		n, err := r.nc.Read(*r.buf)
		r.w = n
		if n > 0 {
			return nil
		}
		r.release()
		return err
	}
	r.err = nil
	if err := r.raw.Read(r.fill); err != nil {
		r.release()
		return err // a deadline, or the connection closed
	}
	if r.err != nil {
		r.release()
		return r.err
	}
	return nil
}

// readRaw is more's readiness callback: it reads into a buffer taken for
// the read, and gives it back if there was nothing to read.
func (r *connReader) readRaw(fd uintptr) bool {
	if r.buf == nil {
		r.buf = pool.Get(readBufSize)
	}
	n, again, err := netio.ReadFD(fd, *r.buf)
	if again {
		r.release()
		return false
	}
	r.w, r.err = n, err
	return true
}

// canSession reports whether the rest of the connection can be read in
// one session: plain TCP, with no replayed bytes left.
func (r *connReader) canSession() bool {
	return r.raw != nil && (r.pend == nil || r.pend.Pending() == 0)
}

// session reads the rest of the connection inside one readiness callback
// of the runtime, as package h1's read sessions do: step is called for
// each frame that is whole in the buffer (the Framer then never waits
// mid-frame), and for a frame whose 9-byte header alone ends the
// connection (refused reports it), without waiting for a payload that may
// never come. When the buffer holds neither, the callback reads more, and
// waits for readability once a read finds nothing. Between two waits the
// runtime keeps the socket's readiness, which a new RawConn.Read would
// forget. idle is called before every wait. It returns when step reports
// false, or the socket fails, ends or passes its read deadline.
//
// It waits only after a read that found nothing, not after one that found
// less than there was room for (as h1's sessions do after a whole request):
// the client's FIN or reset that came with the last bytes gives no
// readiness of its own once their readiness was taken, and a connection
// whose streams wait on the client (for a window, for a body) writes
// nothing that would meet the end: it would be held until its liveness
// check (idleFired). The read that finds nothing costs a system call a
// wake-up, which carries many frames under load.
func (r *connReader) session(step func() bool, idle func(), refused func(hdr []byte) bool) {
	r.raw.Read(func(fd uintptr) bool {
		for {
			for r.ready(refused) {
				if !step() {
					return true
				}
			}
			if r.buf == nil {
				r.buf = pool.Get(readBufSize)
			} else if r.r > 0 {
				r.w = copy(*r.buf, (*r.buf)[r.r:r.w])
				r.r = 0
			}
			n, again, err := netio.ReadFD(fd, (*r.buf)[r.w:])
			if again {
				r.wait(idle)
				return false
			}
			if err != nil {
				r.err = err
				return true
			}
			r.w += n
		}
	})
}

// wait gets ready to wait for readability: the buffer back if it is
// empty, and idle.
func (r *connReader) wait(idle func()) {
	if r.r == r.w {
		r.r, r.w = 0, 0
		r.release()
	}
	idle()
}

// ready reports whether the buffer holds a whole frame, or a frame header
// that refused says ends the connection (a frame over MaxFrameSize among
// them), whose payload is not waited for.
func (r *connReader) ready(refused func(hdr []byte) bool) bool {
	n := r.w - r.r
	if n < 9 {
		return false
	}
	b := (*r.buf)[r.r:]
	size := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
	return n >= 9+size || refused(b[:9])
}

// shutdown ends the connection from any goroutine, the mutex held or not.
// On plain TCP the socket is shut down, which fails its reads and writes,
// and its read deadline is put in the past, which wakes a session waiting
// for readability; the read loop, which may be in its session (holding the
// descriptor) and waiting for that mutex, then closes it: a Close here
// would wait for the session to let go of the descriptor. Under TLS it is
// closed.
//
// The deadline is what ends a connection whose peer is gone: a socket the
// peer reset (or closed) before its last bytes were read gives no more
// readiness once they are read, and shutting down a socket already reset
// changes nothing the runtime is told of, so a session that read those
// bytes (a short read, session) would wait for ever.
func (r *connReader) shutdown(nc net.Conn) {
	if r.raw == nil {
		nc.Close()
		return
	}
	r.raw.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
	nc.SetReadDeadline(aLongTimeAgo)
}

// aLongTimeAgo is a deadline that fails a wait at once.
var aLongTimeAgo = time.Unix(1, 0)

// closeWrite ends the writing side of the connection, after a GOAWAY that
// closes it in error: the TCP FIN, under TLS after its close_notify. The
// reading side stays open for the read loop to linger on (linger). On plain
// TCP the socket is shut down as in shutdown; a connection that is neither
// TCP nor TLS (a test's pipe) is shut down whole.
func (r *connReader) closeWrite(nc net.Conn) {
	if r.raw != nil {
		r.raw.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_WR) })
		return
	}
	tc, _ := underlying(nc)
	if tc == nil {
		r.shutdown(nc)
		return
	}
	tc.CloseWrite()
	if _, tcp := underlying(tc.NetConn()); tcp != nil {
		tcp.CloseWrite()
	}
}

// linger reads and drops what the client still sends, until it closes its
// side or until: after a GOAWAY that ends the connection in error, the
// socket is closed only then, so that the client reads the GOAWAY rather
// than a reset (a close with unread bytes resets the connection, and the
// client's kernel may drop what it had not delivered yet). Under TLS the
// bytes are read from the TCP socket beneath, not decrypted.
func (r *connReader) linger(nc net.Conn, until time.Time) {
	if tc, _ := underlying(nc); tc != nil {
		nc = tc.NetConn()
	}
	nc.SetReadDeadline(until)
	if r.buf == nil {
		r.buf = pool.Get(readBufSize)
	}
	for {
		if _, err := nc.Read(*r.buf); err != nil {
			break
		}
	}
	r.r, r.w = 0, 0
}

// buffered reports the bytes read from the socket and not yet taken.
func (r *connReader) buffered() int { return r.w - r.r }

// release gives the buffer back when it holds nothing, on plain TCP.
func (r *connReader) release() {
	if r.buf != nil && r.r == r.w && r.raw != nil {
		pool.Put(r.buf)
		r.buf = nil
	}
}

// drop gives the buffer back when the connection has ended.
func (r *connReader) drop() {
	if r.buf != nil {
		pool.Put(r.buf)
		r.buf = nil
	}
}
