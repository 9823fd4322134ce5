// Package netio reads and writes plain TCP sockets with raw system calls,
// for queue's two serving engines (h1, h2) and the proxy's HTTP/1.1
// client: ReadFD, VecWriter, PeerGone, CloseWait, and the h1 engine's
// accept under overload, AcceptGone. It knows nothing of HTTP.
package netio

import (
	"io"
	"syscall"
	"unsafe"
)

// Reads and writes of a plain TCP socket on the request path are raw
// system calls made inside syscall.RawConn callbacks (ReadFD, VecWriter).
//
// A system call made through the syscall package (net.Conn's Read and
// Write) enters the runtime's system-call state, and when every P was idle
// that wakes the runtime's monitor thread, sysmon, from its deep sleep: a
// futex wake-up, after which sysmon polls every 20 µs while anything runs.
// A sidecar at a low or moderate rate idles between requests, so each
// request paid that wake-up and a run of short sleeps on another thread,
// on the same CPU quota. A read or write of a non-blocking socket never
// blocks, so it needs none of what the system-call state is for (handing
// the P to another thread while the call waits), and a raw call skips it.
// RawConn still takes the descriptor's read or write lock (a Close waits)
// and still waits in the netpoller, with the connection's deadlines, when
// the socket is not ready.

// ReadFD reads a non-blocking socket into p, for a syscall.RawConn's Read
// callback: again reports that nothing is there yet (the callback then
// returns false and the runtime waits for readability); end of file is
// io.EOF.
func ReadFD(fd uintptr, p []byte) (n int, again bool, err error) {
	if len(p) == 0 {
		return 0, false, nil
	}
	for {
		// recvfrom rather than read: the kernel looks the descriptor up
		// without read's file-position lock (fdget_pos), as nginx's
		// recv does.
		r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), 0, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return 0, true, nil
		case e != 0:
			return 0, false, e
		case r == 0:
			raceAcquire(fd)
			return 0, false, io.EOF
		}
		raceAcquire(fd)
		return int(r), false, nil
	}
}

// maxIovec is how many buffers one sendmsg call takes; more are written by
// further calls.
const maxIovec = 8

// VecWriter writes buffers to a plain TCP socket with raw sendto and sendmsg calls,
// as many as the socket takes, waiting in the netpoller when it is full.
// One per connection, reused for every write; not for concurrent use.
type VecWriter struct {
	raw  syscall.RawConn
	fn   func(uintptr) bool // v.write, bound once
	bufs [][]byte           // what is left to write
	n    int64
	err  error
	iov  [maxIovec]syscall.Iovec
	msg  syscall.Msghdr
	one  [1][]byte
}

// Reset makes v write to raw's socket.
func (v *VecWriter) Reset(raw syscall.RawConn) {
	v.raw = raw
	if v.fn == nil {
		v.fn = v.write
	}
}

// Writev writes every byte of bufs, in order. It returns the bytes written
// and the first error: the connection's deadline, a closed connection, or
// the socket's (EPIPE, ECONNRESET).
func (v *VecWriter) Writev(bufs [][]byte) (int64, error) {
	v.bufs, v.n, v.err = bufs, 0, nil
	err := v.raw.Write(v.fn)
	v.bufs = nil
	v.iov = [maxIovec]syscall.Iovec{} // no buffer stays reachable from here
	v.msg.Iov = nil
	if err == nil {
		err = v.err
	}
	return v.n, err
}

// Write writes every byte of p.
func (v *VecWriter) Write(p []byte) (int, error) {
	v.one[0] = p
	n, err := v.Writev(v.one[:])
	v.one[0] = nil
	return int(n), err
}

// write is the RawConn callback: send until bufs are written (true), the
// socket is full (false: the runtime waits for writability and calls
// again), or an error (true, with v.err set).
func (v *VecWriter) write(fd uintptr) bool {
	for {
		k := 0
		for _, b := range v.bufs {
			if k == maxIovec {
				break
			}
			if len(b) > 0 {
				v.iov[k].Base = &b[0]
				v.iov[k].SetLen(len(b))
				k++
			}
		}
		if k == 0 {
			v.bufs = nil
			return true
		}
		raceRelease(fd)
		// sendto or sendmsg rather than write or writev: the kernel goes
		// straight to the socket, without the file-position lock
		// (fdget_pos) and the VFS layer, as nginx's and HAProxy's send
		// calls do; MSG_NOSIGNAL turns a write to a closed peer into EPIPE
		// alone.
		var r uintptr
		var e syscall.Errno
		if k == 1 {
			// One buffer: sendto, which has no message header to copy in.
			r, _, e = syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(v.iov[0].Base)), uintptr(v.iov[0].Len), syscall.MSG_NOSIGNAL, 0, 0)
		} else {
			v.msg.Iov = &v.iov[0]
			setLen(&v.msg.Iovlen, k)
			r, _, e = syscall.RawSyscall(syscall.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&v.msg)), syscall.MSG_NOSIGNAL)
		}
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return false
		case e != 0:
			v.err = e
			return true
		}
		v.n += int64(r)
		v.consume(int(r))
	}
}

// consume drops the first n written bytes from v.bufs.
func (v *VecWriter) consume(n int) {
	for len(v.bufs) > 0 {
		b := v.bufs[0]
		if n < len(b) {
			v.bufs[0] = b[n:]
			return
		}
		n -= len(b)
		v.bufs = v.bufs[1:]
	}
}

// setLen sets a Msghdr's Iovlen, whose type differs between platforms.
func setLen[T ~uint32 | ~uint64](p *T, n int) { *p = T(n) }

// PeerGone reports whether the peer of a TCP socket closed or reset its
// connection: a non-blocking peek (into buf, which it leaves unread) that
// finds end of file. Bytes waiting mean the peer is still there. It is
// called from a syscall.RawConn's Control, which holds the descriptor, and
// is safe while another goroutine reads or writes the socket. Like ReadFD
// it is a raw call: a peek never blocks.
func PeerGone(fd uintptr, buf *[1]byte) bool {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), 1, syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return n == 0 && e == 0 || e == syscall.ECONNRESET
}

// CloseWait reports whether a TCP socket is in CLOSE-WAIT: its peer has
// closed its side, whatever bytes it sent before are still unread. One raw
// getsockopt of TCP_INFO, of which the kernel copies as much as asked:
// four bytes, tcpi_state first. It is called from a syscall.RawConn's
// Control; false when the state cannot be read.
func CloseWait(fd uintptr) bool {
	var info [4]byte
	size := uint32(len(info))
	_, _, e := syscall.RawSyscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO, uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&size)), 0)
	return e == 0 && size >= 1 && info[0] == tcpCloseWait
}

// tcpCloseWait is TCP_CLOSE_WAIT of the kernel's tcp_states.h.
const tcpCloseWait = 8

// AcceptGone accepts from the listening socket fd, with raw calls, each
// connection at the head of its backlog whose client has already closed
// its side (CloseWait), and closes it with a reset, until it accepts one
// whose client is still there or the backlog is empty. It returns that
// live socket (blocking and close-on-exec; the caller owns it), or -1 when
// the backlog ran empty or accept failed (the caller's own accept then
// waits, or reports why).
//
// It is called from the listener's syscall.RawConn Control. A connection
// costs it four system calls (accept4, getsockopt, setsockopt, close)
// against the eight and the allocations of net's Accept, SetLinger and
// Close. The loop ends: it is bounded by the backlog, which it empties
// far faster than clients can fill it.
func AcceptGone(fd uintptr) (live int) {
	linger := syscall.Linger{Onoff: 1}
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, fd, 0, 0, syscall.SOCK_CLOEXEC, 0, 0)
		switch e {
		case 0:
		case syscall.EINTR, syscall.ECONNABORTED:
			continue
		default: // EAGAIN: the backlog is empty
			return -1
		}
		if !CloseWait(r) {
			return int(r)
		}
		syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, r, syscall.SOL_SOCKET, syscall.SO_LINGER, uintptr(unsafe.Pointer(&linger)), unsafe.Sizeof(linger), 0)
		syscall.RawSyscall(syscall.SYS_CLOSE, r, 0, 0)
	}
}
