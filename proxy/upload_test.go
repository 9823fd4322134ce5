package proxy

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// deadlineRecorder is a ResponseWriter that records the read deadlines set
// on it.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	mu  sync.Mutex
	set []time.Time
}

func (d *deadlineRecorder) SetReadDeadline(t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.set = append(d.set, t)
	return nil
}

// interruptConn is an upstream connection that signals when a deadline in
// the past interrupts it.
type interruptConn struct {
	net.Conn
	interrupted chan struct{}
	once        sync.Once
}

func (c *interruptConn) SetDeadline(t time.Time) error {
	if !t.IsZero() && t.Before(time.Now()) {
		c.once.Do(func() { close(c.interrupted) })
	}
	return nil
}

// TestBodyWriterLate: the response came while the body writer was still
// running, and stop interrupts it; the writer then finishes without error,
// having sent the whole body. The upstream connection, interrupted, must
// not be reused (stop returns an error). The client's connection is
// intact:
//   - when the writer had read the body to its end, stop must not touch the
//     client's read deadline at all: net/http's server is reading the
//     connection for the next request by then, and a deadline in the past
//     fails that read and cancels the connection's context, so every later
//     request on the connection fails;
//   - when it had not, stop interrupts the client's read and must put the
//     deadline back once the writer turns out to have finished.
func TestBodyWriterLate(t *testing.T) {
	t.Parallel()
	for _, read := range []bool{true, false} {
		name := map[bool]string{true: "body read", false: "body not read"}[read]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
			bw := &bodyWriter{done: make(chan error, 1), rc: http.NewResponseController(rec)}
			bw.read.Store(read)
			up, other := net.Pipe()
			defer up.Close()
			defer other.Close()
			uc := &interruptConn{Conn: up, interrupted: make(chan struct{})}
			go func() {
				<-uc.interrupted // the writer is interrupted...
				bw.done <- nil   // ...having sent the whole body
			}()
			stopped := make(chan error, 1)
			go func() { stopped <- bw.stop(&h1Conn{nc: uc}) }()
			select {
			case err := <-stopped:
				if err == nil {
					t.Error("stop = nil: the interrupted upstream connection would be reused")
				}
			case <-time.After(10 * time.Second):
				bw.done <- errors.New("never interrupted") // lets stop return
				t.Fatal("stop did not interrupt the writer within 10 s")
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			switch {
			case read && len(rec.set) != 0:
				t.Errorf("client read deadlines set %v, want none once the body was read", rec.set)
			case !read && (len(rec.set) == 0 || !rec.set[len(rec.set)-1].IsZero()):
				t.Errorf("client read deadlines set %v, want the last one cleared", rec.set)
			}
		})
	}
}
