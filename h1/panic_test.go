package h1

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
)

// panickingHandler panics from a function of its own, so that its name
// is on the stack the engine logs.
func panickingHandler(w http.ResponseWriter, r *http.Request) { panic("boom") }

// TestPanicLogsStack: a handler's panic is logged with its value and the
// stack of the goroutine that ran the handler, as net/http logs it.
func TestPanicLogsStack(t *testing.T) {
	t.Parallel()
	var logs testnet.SyncBuffer
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
