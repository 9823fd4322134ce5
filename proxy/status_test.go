package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// unavailableErr stands for the errors of layers that may not import proxy
// (limit.ErrQueueFull, limit.ErrQueueTimeout): the chain package's tests
// run the real ones through Fail.
type unavailableErr struct{}

func (unavailableErr) Error() string     { return "unavailable" }
func (unavailableErr) Unavailable() bool { return true }

// TestFail table-tests the one owner of error responses: the status
// StatusFor gives each cause, that the body is the status text and never the
// error's, and the Connection: close rules. A client that went away gets
// nothing written and the handler aborted.
func TestFail(t *testing.T) {
	t.Parallel()
	p, err := New(Config{Upstream: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name      string
		err       error
		preClose  bool // the proxy decided Connection: close before failing
		wantCode  int
		wantClose bool
	}{
		{name: "client gone", err: fmt.Errorf("%w: write: broken pipe", errClientGone), wantCode: StatusClientClosed},
		{name: "context canceled", err: fmt.Errorf("limit: wait for a slot: %w", context.Canceled), wantCode: StatusClientClosed},
		{name: "canceled beats unavailable", err: fmt.Errorf("%w: %w", unavailableErr{}, context.Canceled), wantCode: StatusClientClosed},
		{name: "unavailable", err: unavailableErr{}, wantCode: http.StatusServiceUnavailable},
		{name: "unavailable wrapped", err: fmt.Errorf("acquire: %w", unavailableErr{}), wantCode: http.StatusServiceUnavailable},
		{name: "unavailable and deadline", err: fmt.Errorf("%w: %w", unavailableErr{}, context.DeadlineExceeded), wantCode: http.StatusServiceUnavailable},
		{name: "unavailable keeps a decided close", err: unavailableErr{}, preClose: true, wantCode: http.StatusServiceUnavailable, wantClose: true},
		{name: "bad request", err: fmt.Errorf("%w: read body: junk", errBadRequest), wantCode: http.StatusBadRequest, wantClose: true},
		{name: "deadline", err: fmt.Errorf("round trip: %w", context.DeadlineExceeded), wantCode: http.StatusGatewayTimeout},
		{name: "net timeout", err: timeout, wantCode: http.StatusGatewayTimeout},
		{name: "body timeout", err: fmt.Errorf("%w: read body", errBodyTimeout), wantCode: http.StatusGatewayTimeout, wantClose: true},
		{name: "refused", err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, wantCode: http.StatusBadGateway},
		{name: "reset", err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, wantCode: http.StatusBadGateway},
		{name: "eof", err: io.EOF, wantCode: http.StatusBadGateway},
		{name: "unexpected eof", err: io.ErrUnexpectedEOF, wantCode: http.StatusBadGateway},
		{name: "malformed response", err: fmt.Errorf("%w: status line %q", errBadResponse, "HTTP/9"), wantCode: http.StatusBadGateway},
		{name: "no response", err: errNothingRead, wantCode: http.StatusBadGateway},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, want := StatusFor(tt.err), tt.wantCode; got != want {
				t.Errorf("StatusFor(%v) = %d, want %d", tt.err, got, want)
			}
			rec := httptest.NewRecorder()
			rec.Header().Set("X-Set-Before", "dropped")
			if tt.preClose {
				rec.Header().Set("Connection", "close")
			}
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			var recovered any
			func() {
				defer func() { recovered = recover() }()
				p.Fail(rec, r, tt.err)
			}()
			if tt.wantCode == StatusClientClosed {
				if recovered != http.ErrAbortHandler {
					t.Errorf("Fail recovered %v, want the http.ErrAbortHandler panic", recovered)
				}
				if rec.Body.Len() != 0 || rec.Flushed || rec.Code != http.StatusOK {
					t.Errorf("Fail wrote %d %q for a client that went away, want nothing", rec.Code, rec.Body)
				}
				return
			}
			if recovered != nil {
				t.Fatalf("Fail panicked: %v", recovered)
			}
			text := http.StatusText(tt.wantCode)
			if got, want := rec.Code, tt.wantCode; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			if got, want := rec.Body.String(), text; got != want {
				t.Errorf("body = %q, want %q (the status text, never the error's)", got, want)
			}
			h := rec.Result().Header
			if got, want := h.Get("Content-Length"), strconv.Itoa(len(text)); got != want {
				t.Errorf("Content-Length = %q, want %q", got, want)
			}
			if got, want := h.Get("Content-Type"), "text/plain; charset=utf-8"; got != want {
				t.Errorf("Content-Type = %q, want %q", got, want)
			}
			if got := h.Get("X-Set-Before"); got != "" {
				t.Errorf("X-Set-Before = %q, want it dropped", got)
			}
			if got, want := h.Get("Connection") == "close", tt.wantClose; got != want {
				t.Errorf("Connection: close = %v, want %v", got, want)
			}
		})
	}
}

// TestStatusForNil: a nil error is a success.
func TestStatusForNil(t *testing.T) {
	t.Parallel()
	if got, want := StatusFor(nil), http.StatusOK; got != want {
		t.Errorf("StatusFor(nil) = %d, want %d", got, want)
	}
}
