package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestKnativeDropIn starts queue with only the environment Knative's
// reconciler gives its queue-proxy: no flags, so on Knative's fixed ports
// (8012, 8112, 8022, 9090, 9091). To keep those from colliding with
// anything else on the machine, the test runs itself again inside a private
// network namespace that has only loopback.
func TestKnativeDropIn(t *testing.T) {
	if os.Getenv("QUEUE_TEST_IN_NETNS") != "1" {
		if os.Getuid() != 0 {
			t.Skip("needs root to make a private network namespace: Knative's ports are fixed numbers")
		}
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Skip("needs unshare (util-linux) for a private network namespace")
		}
		cmd := exec.Command(unshare, "--net", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`,
			os.Args[0], "-test.run", "^TestKnativeDropIn$", "-test.v", "-test.count=1", "-test.timeout=2m")
		cmd.Env = append(os.Environ(), "QUEUE_TEST_IN_NETNS=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err = runCmd(t, cmd, 3*time.Minute)
		if err != nil || !strings.Contains(out.String(), "--- PASS: TestKnativeDropIn") {
			t.Fatalf("inside the network namespace: %v\n%s", err, out.String())
		}
		t.Logf("inside the network namespace:\n%s", out.String())
		return
	}
	if c, err := net.DialTimeout("tcp", "1.1.1.1:53", 2*time.Second); err == nil {
		c.Close()
		t.Fatal("the namespace reaches outside: refusing to bind fixed ports here")
	}

	t.Run("http1", func(t *testing.T) {
		var mu sync.Mutex
		var probeHeaders http.Header
		up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				mu.Lock()
				probeHeaders = r.Header.Clone()
				mu.Unlock()
				return
			}
			echo(w, r)
		})}
		ln, err := net.Listen("tcp", "127.0.0.1:8080")
		if err != nil {
			t.Fatal(err)
		}
		go up.Serve(ln)
		defer up.Close()
		certDir := t.TempDir()
		pool := writeCert(t, certDir, "knative")
		env := map[string]string{
			"USER_PORT": "8080", "QUEUE_SERVING_PORT": "8012", "QUEUE_SERVING_TLS_PORT": "8112",
			"CONTAINER_CONCURRENCY": "0", "REVISION_TIMEOUT_SECONDS": "0",
			"SERVING_READINESS_PROBE": `{"httpGet":{"path":"/healthz","port":8080,"host":"127.0.0.1",` +
				`"httpHeaders":[{"name":"K-Kubelet-Probe","value":"queue"},{"name":"X-Probe","value":"yes"}]},"successThreshold":1}`,
			"SERVING_NAMESPACE": "ns", "SERVING_SERVICE": "svc", "SERVING_CONFIGURATION": "cfg",
			"SERVING_REVISION": "svc-00001", "SERVING_POD": "svc-00001-pod", "SERVING_POD_IP": "127.0.0.1",
			"SERVING_LOGGING_LEVEL": "info", "QUEUE_KNATIVE_CERT_DIR": certDir,
			"OBSERVABILITY_CONFIG": `{"runtime":{"profiling":"enabled"}}`,
		}
		stop := serveEnv(t, env)
		defer stop()
		waitHTTP(t, "http://127.0.0.1:8022/ready", 200)

		// Proxying, with Knative's headers handled.
		res, body := get(t, http.DefaultClient, "http://127.0.0.1:8012/hello", map[string]string{
			"K-Original-Host": "svc.ns.example.com", "Knative-Serving-Revision": "x"})
		if res.StatusCode != 200 || !strings.Contains(body, `"host": "svc.ns.example.com"`) || strings.Contains(body, "Knative-Serving-Revision") {
			t.Errorf("proxied: %d %s", res.StatusCode, body)
		}
		// Both probe kinds, answered by queue.
		for _, h := range []map[string]string{{"K-Network-Probe": "queue"}, {"User-Agent": "kube-probe/1.31"}} {
			if res, body := get(t, http.DefaultClient, "http://127.0.0.1:8012/", h); res.StatusCode != 200 || body != "queue" {
				t.Errorf("probe %v: %d %q", h, res.StatusCode, body)
			}
		}
		// The HTTP readiness probe reached the given path with the given headers.
		mu.Lock()
		ph := probeHeaders
		mu.Unlock()
		if ph.Get("X-Probe") != "yes" || ph.Get("K-Kubelet-Probe") != "queue" || !strings.HasPrefix(ph.Get("User-Agent"), "kube-probe/") {
			t.Errorf("readiness probe headers %v", ph)
		}
		// TLS from the certificate directory.
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		if res, _ := get(t, &http.Client{Transport: tr, Timeout: clientTimeout}, "https://127.0.0.1:8112/", nil); res.StatusCode != 200 || res.Proto != "HTTP/2.0" {
			t.Errorf("TLS: %d %s", res.StatusCode, res.Proto)
		}
		// Knative's TLS floor, 1.3, with QUEUE_PROXY_TLS_MIN_VERSION unset:
		// a TLS 1.2 client is refused, the same client allowed 1.3 gets in.
		for _, tt := range []struct {
			max uint16
			ok  bool
		}{{tls.VersionTLS12, false}, {tls.VersionTLS13, true}} {
			c, err := dialTLS("127.0.0.1:8112", &tls.Config{RootCAs: pool, ServerName: "localhost", MaxVersion: tt.max})
			if err == nil {
				c.Close()
			}
			if got := err == nil; got != tt.ok {
				t.Errorf("a client of TLS up to %s: handshake error %v, want success %v (Knative's floor, 1.3)", tls.VersionName(tt.max), err, tt.ok)
			}
		}
		// The autoscaler's endpoint and the labels.
		res, body = get(t, http.DefaultClient, "http://127.0.0.1:9090/metrics", nil)
		if res.Header.Get("Content-Type") != "application/protobuf" || !strings.Contains(body, "svc-00001-pod") {
			t.Errorf("stats: %s %q", res.Header.Get("Content-Type"), body)
		}
		var pod string
		b := []byte(body)
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				t.Fatalf("stats body is not protobuf: %v", protowire.ParseError(n))
			}
			b = b[n:]
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				t.Fatalf("stats body is not protobuf: field %d: %v", num, protowire.ParseError(n))
			}
			if num == 1 {
				v, m := protowire.ConsumeString(b)
				if m < 0 {
					t.Fatalf("stats body: pod_name is not a string: %v", protowire.ParseError(m))
				}
				pod = v
			}
			b = b[n:]
		}
		if pod != "svc-00001-pod" {
			t.Errorf("pod_name = %q", pod)
		}
		// Runtime profiling on Knative's port, 8008, not on the admin port.
		if res, body := get(t, http.DefaultClient, "http://127.0.0.1:8008/debug/pprof/", nil); res.StatusCode != 200 || !strings.Contains(body, "\theap\n") {
			t.Errorf("profiling port: %d %.80q", res.StatusCode, body)
		}
		if res, _ := get(t, http.DefaultClient, "http://127.0.0.1:8022/debug/pprof/", nil); res.StatusCode != 404 {
			t.Errorf("admin port /debug/pprof/: %d, want 404", res.StatusCode)
		}
		_, body = get(t, http.DefaultClient, "http://127.0.0.1:9091/metrics", nil)
		if !strings.Contains(body, `queue_active_requests{namespace="ns",service="svc",configuration="cfg",revision="svc-00001",pod="svc-00001-pod"}`) {
			t.Errorf("metrics lack the revision labels:\n%s", body)
		}
	})

	t.Run("8013 means h2c", func(t *testing.T) {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true) // this upstream speaks nothing else
		up := &http.Server{Handler: http.HandlerFunc(echo), Protocols: &p}
		ln, err := net.Listen("tcp", "127.0.0.1:8080")
		if err != nil {
			t.Fatal(err)
		}
		go up.Serve(ln)
		defer up.Close()
		stop := serveEnv(t, map[string]string{"USER_PORT": "8080", "QUEUE_SERVING_PORT": "8013"})
		defer stop()
		waitHTTP(t, "http://127.0.0.1:8022/ready", 200)
		res, body := get(t, http.DefaultClient, "http://127.0.0.1:8013/", nil)
		if res.StatusCode != 200 || !strings.Contains(body, `"proto": "HTTP/2.0"`) {
			t.Errorf("through 8013: %d %s", res.StatusCode, body)
		}
	})
}

// serveEnv runs queue in this process with only env, no flags; the
// returned func drains it and waits.
func serveEnv(t *testing.T, env map[string]string) func() {
	t.Helper()
	cfg, err := parseConfig(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	a, err := newApp(cfg, newLogger(cfg, io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.serve(ctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("queue did not stop within 30 s")
		}
	}
}

// TestKnativeReconcilerModule runs the knativetest module's tests, which
// make the queue-proxy container with Knative Serving's own reconciler and
// run queue under exactly its environment (and the operator's telemetry
// settings, against a real OTLP receiver). It lives in a nested module so
// that Knative's and Kubernetes' modules stay out of queue's; this test
// makes the README's one test command cover it. The first run downloads
// about 50 MB of modules.
func TestKnativeReconcilerModule(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "test", "-count=1", "-v", "-timeout=3m", "./...")
	cmd.Dir = "../../knativetest"
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := runCmd(t, cmd, 5*time.Minute)
	out := buf.String()
	if err != nil {
		t.Fatalf("knativetest module tests: %v\n%s", err, out)
	}
	if strings.Contains(out, "--- SKIP") {
		t.Skipf("knativetest module tests skipped:\n%s", out) // not counted as a pass
	}
	for _, name := range []string{"TestKnativeReconciler", "TestKnativeOperatorTelemetry"} {
		if !strings.Contains(out, "--- PASS: "+name+" ") {
			t.Fatalf("knativetest module: %s did not pass:\n%s", name, out)
		}
	}
}
