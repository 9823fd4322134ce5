package proxy

import (
	"net"
	"syscall"

	"github.com/queue-dev/queue/internal/netio"
)

// h2cReader is what an h2c connection's Framer reads: the upstream's
// socket through the connection's read buffer. On plain TCP the buffer is
// filled by raw reads (internal/netio explains why: the syscall package's
// entry wakes the runtime's monitor thread in a process that idles between
// requests); a read fills as much as has come, so that frames that came
// together are parsed from memory.
type h2cReader struct {
	nc   net.Conn
	raw  syscall.RawConn // the TCP socket; nil: reads go through nc
	buf  []byte
	r, w int
	err  error
	fill func(fd uintptr) bool // readRaw, bound once
}

func (r *h2cReader) init(nc net.Conn, size int) {
	r.nc, r.buf = nc, make([]byte, size)
	if tcp, ok := nc.(*net.TCPConn); ok {
		r.raw, _ = tcp.SyscallConn()
	}
	r.fill = r.readRaw
}

// Buffered is how many bytes have been read from the socket and not from r.
func (r *h2cReader) Buffered() int { return r.w - r.r }

func (r *h2cReader) Read(p []byte) (int, error) {
	if r.r == r.w {
		r.r, r.w = 0, 0
		if r.raw == nil {
			n, err := r.nc.Read(r.buf)
			if n == 0 {
				return 0, err
			}
			r.w = n
		} else {
			r.err = nil
			if err := r.raw.Read(r.fill); err != nil {
				return 0, err // a deadline, or the connection closed
			}
			if r.err != nil {
				return 0, r.err
			}
		}
	}
	n := copy(p, r.buf[r.r:r.w])
	r.r += n
	return n, nil
}

// readRaw is Read's readiness callback.
func (r *h2cReader) readRaw(fd uintptr) bool {
	n, again, err := netio.ReadFD(fd, r.buf)
	if again {
		return false
	}
	r.w, r.err = n, err
	return true
}

// h2cWriter writes an h2c connection's frames: by raw sendto on plain TCP
// (internal/netio), else through the connection. One write at a time (the
// connection's writing flag, or the handshake before the read loop runs).
type h2cWriter struct {
	nc net.Conn
	vw *netio.VecWriter // nil: not plain TCP
}

func (w *h2cWriter) init(nc net.Conn) {
	w.nc = nc
	if tcp, ok := nc.(*net.TCPConn); ok {
		if raw, err := tcp.SyscallConn(); err == nil {
			w.vw = new(netio.VecWriter)
			w.vw.Reset(raw)
		}
	}
}

func (w *h2cWriter) Write(p []byte) (int, error) {
	if w.vw != nil {
		return w.vw.Write(p)
	}
	return w.nc.Write(p)
}
