package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// deadlineRecorder is a ResponseWriter that records the read deadlines set
// on it, and signals the first one in the past.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	mu   sync.Mutex
	last time.Time
	past chan struct{}
}

func (d *deadlineRecorder) SetReadDeadline(t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last = t
	if !t.IsZero() && t.Before(time.Now()) {
		select {
		case d.past <- struct{}{}:
		default:
		}
	}
	return nil
}

// TestBodyWriterLate: the response came while the body writer was between
// its last write and the read that finds the end of the body. stop
// interrupts it, the writer then finishes without error, and the client's
// read deadline must be put back: left in the past, the server would find
// the connection expired when it reads the next request, and close it
// under a client that may already be sending one. The upstream connection,
// whose deadline was set in the past too, must not be reused.
func TestBodyWriterLate(t *testing.T) {
	t.Parallel()
	rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder(), past: make(chan struct{}, 1)}
	bw := &bodyWriter{done: make(chan error, 1), rc: http.NewResponseController(rec)}
	up, other := net.Pipe()
	defer up.Close()
	defer other.Close()
	go func() {
		<-rec.past     // interrupted...
		bw.done <- nil // ...after it had sent the whole body
	}()
	err := bw.stop(&h1Conn{nc: up})
	if err == nil {
		t.Error("stop = nil: the interrupted upstream connection would be reused")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !rec.last.IsZero() {
		t.Errorf("client read deadline left at %v, want none", rec.last)
	}
}
