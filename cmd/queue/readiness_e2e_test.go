package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queue-dev/queue/probe"
)

// TestHTTP2AutoDetection: with ENABLE_HTTP2_AUTO_DETECTION=true, an httpGet
// readiness probe in SERVING_READINESS_PROBE makes an app that speaks only
// h2c ready; without it (false or unset) such an app is never ready, and an
// HTTP/1.1 app is ready either way.
func TestHTTP2AutoDetection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		h2c    bool   // the app speaks only h2c, else only HTTP/1.1
		detect string // ENABLE_HTTP2_AUTO_DETECTION
		ready  bool
	}{
		{name: "h2c app, detection on", h2c: true, detect: "true", ready: true},
		{name: "h2c app, detection off", h2c: true, detect: "false"},
		{name: "h2c app, variable unset", h2c: true},
		{name: "HTTP/1.1 app, detection on", detect: "true", ready: true},
		{name: "HTTP/1.1 app, detection off", detect: "false", ready: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var probed atomic.Int32 // GETs of /healthz that reached the app's handler
			var conns atomic.Int32
			enough := make(chan struct{}) // closed at the app's third connection
			app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/healthz" {
					probed.Add(1)
				}
			}))
			app.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew && conns.Add(1) == 3 {
					close(enough)
				}
			}
			if tt.h2c {
				var p http.Protocols
				p.SetUnencryptedHTTP2(true)
				app.Config.Protocols = &p
			}
			app.Start()
			t.Cleanup(app.Close)
			_, port, _ := net.SplitHostPort(hostPort(app))
			env := map[string]string{"SERVING_READINESS_PROBE": `{"httpGet":{"path":"/healthz","port":` + port + `}}`}
			if tt.detect != "" {
				env["ENABLE_HTTP2_AUTO_DETECTION"] = tt.detect
			}
			q := startQueueEnv(t, env, hostPort(app))
			if tt.ready {
				q.waitReady(t, true)
				if code, _ := adminGet(t, q, "/ready"); code != 200 {
					t.Errorf("/ready = %d, want 200", code)
				}
				if probed.Load() == 0 {
					t.Error("ready, but no probe reached the app's handler")
				}
				return
			}
			// Three connections made and answered nothing: the probe has
			// tried, and failed, three times.
			select {
			case <-enough:
			case <-time.After(h2Wait):
				t.Fatalf("the probe made %d connections in %v, want 3", conns.Load(), h2Wait)
			}
			if code, _ := adminGet(t, q, "/ready"); code != 503 || q.app.watcher.Ready() {
				t.Errorf("/ready = %d, ready %v, want 503 and not ready", code, q.app.watcher.Ready())
			}
			if n := probed.Load(); n != 0 {
				t.Errorf("%d probes reached the app's handler, want none", n)
			}
		})
	}
}

// TestHTTP2AutoDetectionConfig: ENABLE_HTTP2_AUTO_DETECTION reaches every
// HTTP probe of an http:// URL, SERVING_READINESS_PROBE's and --probe's,
// and no HTTPS one.
func TestHTTP2AutoDetectionConfig(t *testing.T) {
	t.Parallel()
	detects := func(want bool) func(t *testing.T, c Config) {
		return func(t *testing.T, c Config) {
			h, ok := newProber(c).(*probe.HTTP)
			if !ok {
				t.Fatalf("prober %T, want *probe.HTTP", newProber(c))
			}
			if h.DetectHTTP2 != want {
				t.Errorf("DetectHTTP2 = %v, want %v", h.DetectHTTP2, want)
			}
		}
	}
	httpGet := func(scheme string) string {
		return `{"httpGet":{"path":"/healthz","port":8080,"scheme":"` + scheme + `"}}`
	}
	runConfigCases(t, []configCase{
		{name: "httpGet", env: map[string]string{"USER_PORT": "8080", "ENABLE_HTTP2_AUTO_DETECTION": "true",
			"SERVING_READINESS_PROBE": httpGet("HTTP")}, check: detects(true)},
		{name: "httpGet, detection off", env: map[string]string{"USER_PORT": "8080", "ENABLE_HTTP2_AUTO_DETECTION": "false",
			"SERVING_READINESS_PROBE": httpGet("HTTP")}, check: detects(false)},
		{name: "httpGet over HTTPS: ALPN's business", env: map[string]string{"USER_PORT": "8080", "ENABLE_HTTP2_AUTO_DETECTION": "true",
			"SERVING_READINESS_PROBE": httpGet("HTTPS")}, check: detects(false)},
		{name: "--probe http:/path", args: []string{"--probe", "http:/healthz"},
			env: map[string]string{"USER_PORT": "8080", "ENABLE_HTTP2_AUTO_DETECTION": "1"}, check: detects(true)},
	})
}
