package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// TestPProf: with --pprof the admin port serves runtime profiles in the
// protobuf form go tool pprof reads (gzip-compressed), a plain-text index
// and clear refusals; without it, nothing under /debug/pprof/.
func TestPProf(t *testing.T) {
	t.Parallel()
	up := h1Upstream(t, http.NotFoundHandler())
	q := startQueue(t, hostPort(up), "--pprof")
	gzipped := func(body string) bool { return strings.HasPrefix(body, "\x1f\x8b") }

	code, body := adminGet(t, q, "/debug/pprof/")
	if code != 200 || !strings.Contains(body, "\theap\n") || !strings.Contains(body, "\tgoroutine\n") {
		t.Errorf("index: %d %q", code, body)
	}
	for _, path := range []string{"/debug/pprof/heap?gc=1", "/debug/pprof/goroutine", "/debug/pprof/allocs", "/debug/pprof/profile?seconds=1"} {
		if code, body := adminGet(t, q, path); code != 200 || !gzipped(body) {
			t.Errorf("%s: %d, %d bytes, gzip %v", path, code, len(body), gzipped(body))
		}
	}
	if code, body := adminGet(t, q, "/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile: total") {
		t.Errorf("goroutine?debug=1: %d %.80q", code, body)
	}
	if code, body := adminGet(t, q, "/debug/pprof/trace?seconds=1"); code != 200 || !bytes.HasPrefix([]byte(body), []byte("go ")) {
		t.Errorf("trace: %d %.20q", code, body)
	}
	if code, body := adminGet(t, q, "/debug/pprof/cmdline"); code != 200 || body == "" {
		t.Errorf("cmdline: %d %q", code, body)
	}
	for path, want := range map[string]int{
		"/debug/pprof/nosuch":             404,
		"/debug/pprof/profile?seconds=0":  400,
		"/debug/pprof/profile?seconds=x":  400,
		"/debug/pprof/trace?seconds=9999": 400,
		"/debug/pprof/heap?seconds=5":     400,
	} {
		if code, _ := adminGet(t, q, path); code != want {
			t.Errorf("%s: %d, want %d", path, code, want)
		}
	}

	off := startQueue(t, hostPort(up))
	if code, _ := adminGet(t, off, "/debug/pprof/heap"); code != 404 {
		t.Errorf("without --pprof: %d, want 404", code)
	}
}
