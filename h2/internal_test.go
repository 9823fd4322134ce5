package h2

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// TestStreamCtxNotify: a stream context's notify channel gets a value at
// cancel, at once when given after it, none once taken back (nil) or after
// the reset for the stream's next use; a full channel is not waited on.
func TestStreamCtxNotify(t *testing.T) {
	var x streamCtx
	x.parent = context.Background()
	got := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	ch := make(chan struct{}, 1)
	x.notify(ch)
	if got(ch) {
		t.Fatal("a value before cancel")
	}
	ch <- struct{}{} // full: cancel must not wait on it
	x.cancel()
	if !got(ch) || got(ch) {
		t.Fatal("want exactly the one value after cancel on a full channel")
	}
	late := make(chan struct{}, 1)
	x.notify(late)
	if !got(late) {
		t.Error("a channel given after cancel got nothing")
	}

	x.reset() // the stream's next use
	x.cancel()
	if got(late) {
		t.Error("a value after the reset for the next stream")
	}

	x.reset()
	taken := make(chan struct{}, 1)
	x.notify(taken)
	x.notify(nil)
	x.cancel()
	if got(taken) {
		t.Error("a value after notify(nil)")
	}
}

// TestPayload: a frame's payload is handed out in place when it is whole
// in the read buffer, and read into the scratch buffer when it comes in
// pieces (as under TLS), whole either way.
func TestPayload(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	// A read that waits for bytes that never come (or a write for a
	// reader) fails at the deadline rather than hanging the test.
	a.SetDeadline(time.Now().Add(10 * time.Second))
	b.SetDeadline(time.Now().Add(10 * time.Second))
	var r connReader
	r.init(a, nil)
	go func() {
		b.Write([]byte("0123456789"))
		b.Write([]byte("abcde"))
		b.Write([]byte("fghij"))
	}()
	var scratch []byte
	first := make([]byte, 4)
	if _, err := io.ReadFull(&r, first); err != nil || string(first) != "0123" {
		t.Fatalf("first read: %q, %v", first, err)
	}
	p, err := r.payload(6, &scratch)
	if err != nil || string(p) != "456789" || scratch != nil {
		t.Fatalf("payload whole in the buffer: %q, %v (scratch %d bytes); want 456789 in place", p, err, len(scratch))
	}
	p, err = r.payload(10, &scratch)
	if err != nil || string(p) != "abcdefghij" || len(scratch) != 10 {
		t.Fatalf("payload in pieces: %q, %v (scratch %d bytes); want abcdefghij in scratch", p, err, len(scratch))
	}
}
