package h1

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a log destination the engine writes from its
// connection goroutines while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// panickingHandler panics from a function of its own, so that its name
// is on the stack the engine logs.
func panickingHandler(w http.ResponseWriter, r *http.Request) { panic("boom") }

// TestPanicLogsStack: a handler's panic is logged with its value and the
// stack of the goroutine that ran the handler, as net/http logs it.
func TestPanicLogsStack(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	addr := startServer(t, &Server{
		Handler: http.HandlerFunc(panickingHandler),
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
	})
	client := &http.Client{Timeout: failAfter}
	if res, err := client.Get("http://" + addr + "/"); err == nil {
		res.Body.Close()
		t.Fatalf("got a %d response, want the connection closed", res.StatusCode)
	}
	deadline := time.Now().Add(failAfter)
	for !strings.Contains(logs.String(), "panic serving request") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	line := logs.String()
	for _, want := range []string{"panic serving request", "err=boom", "stack=", "h1.panickingHandler", "goroutine "} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q lacks %q", line, want)
		}
	}
}
