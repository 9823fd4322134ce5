package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// unavailable is an error of the kind limit's are (Unavailable).
type unavailable struct{}

func (unavailable) Error() string     { return "unavailable" }
func (unavailable) Unavailable() bool { return true }

// TestFailRetryAfter: a 503 of queue's own (a full queue, a wait that ran
// out, an overloaded queue) says when to try again (Retry-After, RFC 9110
// section 10.2.3); other error statuses do not.
func TestFailRetryAfter(t *testing.T) {
	t.Parallel()
	p, err := New(Config{Upstream: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		err  error
		code int
		want string
	}{
		{err: fmt.Errorf("limit: %w", unavailable{}), code: http.StatusServiceUnavailable, want: "1"},
		{err: errBadResponse, code: http.StatusBadGateway},
	} {
		w := httptest.NewRecorder()
		p.Fail(w, httptest.NewRequest(http.MethodGet, "/", nil), tt.err)
		if w.Code != tt.code || w.Header().Get("Retry-After") != tt.want {
			t.Errorf("Fail(%v): %d, Retry-After %q; want %d, %q", tt.err, w.Code, w.Header().Get("Retry-After"), tt.code, tt.want)
		}
	}
}
