package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
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

// TestPProfListen: --pprof-listen serves the same endpoints on a port of its
// own, and the admin port serves them only with --pprof; with neither there
// is no profiling listener at all.
func TestPProfListen(t *testing.T) {
	t.Parallel()
	up := h1Upstream(t, http.NotFoundHandler())
	tests := []struct {
		name             string
		args             []string
		wantPort, wantAd bool // served on the profiling port, on the admin port
	}{
		{name: "neither"},
		{name: "--pprof-listen", args: []string{"--pprof-listen", "127.0.0.1:0"}, wantPort: true},
		{name: "--pprof", args: []string{"--pprof"}, wantAd: true},
		{name: "both", args: []string{"--pprof", "--pprof-listen", "127.0.0.1:0"}, wantPort: true, wantAd: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := startQueue(t, hostPort(up), tt.args...)
			if got := q.addr.PProf != ""; got != tt.wantPort {
				t.Fatalf("profiling listener %q, want one %v", q.addr.PProf, tt.wantPort)
			}
			if tt.wantPort {
				for path, want := range map[string]string{"/debug/pprof/": "\theap\n", "/debug/pprof/goroutine?debug=1": "goroutine profile: total",
					"/debug/pprof/heap": "\x1f\x8b", "/debug/pprof/cmdline": os.Args[0]} {
					res, err := boundedClient.Get("http://" + q.addr.PProf + path)
					if err != nil {
						t.Fatal(err)
					}
					b, err := io.ReadAll(res.Body)
					res.Body.Close()
					if err != nil {
						t.Fatalf("profiling port %s: reading the body: %v", path, err)
					}
					if res.StatusCode != 200 || !strings.Contains(string(b), want) {
						t.Errorf("profiling port %s: %d %.80q, want 200 with %q", path, res.StatusCode, b, want)
					}
				}
			}
			want := 404
			if tt.wantAd {
				want = 200
			}
			if code, _ := adminGet(t, q, "/debug/pprof/heap"); code != want {
				t.Errorf("admin port /debug/pprof/heap: %d, want %d", code, want)
			}
		})
	}
}

// TestKnativeProfilingConfig: OBSERVABILITY_CONFIG's runtime.profiling
// "enabled" opens Knative's profiling port, 8008, and only that; the
// flag and its variable win.
func TestKnativeProfilingConfig(t *testing.T) {
	t.Parallel()
	on := `{"runtime":{"profiling":"enabled","exportInterval":15000000000}}`
	profiling := func(listen string, admin bool) func(t *testing.T, c Config) {
		return func(t *testing.T, c Config) {
			if c.PProfListen != listen || c.PProf != admin {
				t.Errorf("profiling port %q, admin port %v; want %q, %v", c.PProfListen, c.PProf, listen, admin)
			}
		}
	}
	runConfigCases(t, []configCase{
		{name: "enabled", env: map[string]string{"USER_PORT": "8080", "SERVING_REVISION": "r", "OBSERVABILITY_CONFIG": on},
			check: profiling(":8008", false)},
		{name: "disabled", env: map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": `{"runtime":{"profiling":"disabled"}}`},
			check: profiling("", false)},
		{name: "absent", env: map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": `{}`}, check: profiling("", false)},
		{name: "QUEUE_PPROF_LISTEN wins", env: map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": on, "QUEUE_PPROF_LISTEN": "127.0.0.1:6060"},
			check: profiling("127.0.0.1:6060", false)},
		{name: "--pprof adds the admin port", args: []string{"--pprof"}, env: map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": on},
			check: profiling(":8008", true)},
	})
}
