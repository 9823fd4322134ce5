package panics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// records is a slog.Handler that keeps what it is given.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *records) WithGroup(string) slog.Handler            { return h }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// attrs returns a record's attributes by key.
func attrs(r slog.Record) map[string]slog.Value {
	m := make(map[string]slog.Value)
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value
		return true
	})
	return m
}

var errBoom = errors.New("boom")

// handlerThatPanics stands for a handler: its frame is on the stack when
// the engine's deferred function recovers.
//
//go:noinline
func handlerThatPanics(v any) { panic(v) }

// serve runs a handler as the engines do: a deferred function recovers
// its panic and logs it with Log. (The engines leave out
// http.ErrAbortHandler before they call Log: that is theirs, not Log's.)
func serve(l *slog.Logger, remote string, v any) (aborted bool) {
	defer func() {
		if p := recover(); p != nil {
			aborted = true
			Log(l, remote, p)
		}
	}()
	handlerThatPanics(v)
	return false
}

// TestLog: a panic logged from the deferred function that recovered it
// gives one record at warn with the client's address, the value
// panicked (an error as that error), and the stack of the goroutine
// that panicked, the handler's frame still on it.
func TestLog(t *testing.T) {
	for _, v := range []any{errBoom, "a string", 42} {
		h := &records{}
		if !serve(slog.New(h), "192.0.2.1:1234", v) {
			t.Fatalf("panic(%v) not recovered", v)
		}
		if len(h.recs) != 1 {
			t.Fatalf("panic(%v): %d records, want 1", v, len(h.recs))
		}
		r := h.recs[0]
		if r.Level != slog.LevelWarn {
			t.Errorf("panic(%v): level %v, want %v", v, r.Level, slog.LevelWarn)
		}
		a := attrs(r)
		if got := a["remote_addr"].String(); got != "192.0.2.1:1234" {
			t.Errorf("panic(%v): remote_addr %q, want %q", v, got, "192.0.2.1:1234")
		}
		if got, want := a["err"].String(), fmt.Sprint(v); got != want {
			t.Errorf("panic(%v): err %q, want %q", v, got, want)
		}
		if err, ok := v.(error); ok && a["err"].Any() != err {
			t.Errorf("panic(%v): err %#v, want the error panicked with", v, a["err"].Any())
		}
		stack := a["stack"].String()
		if !strings.HasPrefix(stack, "goroutine ") {
			t.Errorf("panic(%v): stack %q, want a goroutine's stack", v, stack)
		}
		for _, frame := range []string{"panics.handlerThatPanics(", "panics.serve(", "panic("} {
			if !strings.Contains(stack, frame) {
				t.Errorf("panic(%v): stack has no %q frame:\n%s", v, frame, stack)
			}
		}
		if len(stack) > stackSize {
			t.Errorf("panic(%v): stack of %d bytes, want at most %d", v, len(stack), stackSize)
		}
	}
}

// TestLogConcurrent: panics logged from many goroutines at once each give
// their own record, with their own stack.
func TestLogConcurrent(t *testing.T) {
	h := &records{}
	l := slog.New(h)
	const n = 16
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { serve(l, "192.0.2.1:1234", errBoom) })
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("concurrent panics not logged after 10s")
	}
	if len(h.recs) != n {
		t.Fatalf("%d records, want %d", len(h.recs), n)
	}
	for _, r := range h.recs {
		if stack := attrs(r)["stack"].String(); !strings.Contains(stack, "panics.handlerThatPanics(") {
			t.Errorf("stack has no handler frame:\n%s", stack)
		}
	}
}
