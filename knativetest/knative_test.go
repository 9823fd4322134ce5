package knativetest

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	netcfg "knative.dev/networking/pkg/config"
	"knative.dev/pkg/logging"
	"knative.dev/pkg/ptr"
	apicfg "knative.dev/serving/pkg/apis/config"
	v1 "knative.dev/serving/pkg/apis/serving/v1"
	asconfig "knative.dev/serving/pkg/autoscaler/config"
	"knative.dev/serving/pkg/deployment"
	"knative.dev/serving/pkg/observability"
	"knative.dev/serving/pkg/reconciler/revision/config"
	"knative.dev/serving/pkg/reconciler/revision/resources"
)

// failAfter bounds each request the tests make, and the waits for queue to
// start and stop: the failure bound only, never waited out by a passing
// test.
const failAfter = 30 * time.Second

// client is the tests' HTTP client: every request has its deadline.
var client = &http.Client{Timeout: failAfter}

// The revision the test deploys, and the pod Kubernetes would run it in.
const (
	namespace = "default"
	service   = "hello"
	revision  = "hello-00001"
	pod       = "hello-00001-deployment-5d8f7-abcde"
	podIP     = "127.0.0.1"
	hostIP    = "127.0.0.2"
)

// knativeExampleLogging is zap-logger-config from the example block of
// Knative Serving's config/core/configmaps/logging.yaml (v0.50).
const knativeExampleLogging = `{
  "level": "info",
  "development": false,
  "outputPaths": ["stdout"],
  "errorOutputPaths": ["stderr"],
  "encoding": "json",
  "encoderConfig": {
    "timeKey": "timestamp",
    "levelKey": "severity",
    "nameKey": "logger",
    "callerKey": "caller",
    "messageKey": "message",
    "stacktraceKey": "stacktrace",
    "lineEnding": "",
    "levelEncoder": "",
    "timeEncoder": "iso8601",
    "durationEncoder": "",
    "callerEncoder": ""
  }
}`

// requestLogTemplate is the operator's request-log template: every field
// group Knative's template input has.
const requestLogTemplate = `{{.Request.Method}} {{.Request.URL.Path}} {{.Response.Code}} {{.Response.Size}} {{.Revision.Name}} {{.Revision.Namespace}} {{.Revision.PodIP}}`

// TestKnativeReconciler runs queue under exactly the environment Knative
// Serving's reconciler (resources.MakeDeployment) gives the queue-proxy
// container of a revision, and checks that each of its variables is
// consumed as docs/contract.md section 9 says. Knative's ports are
// fixed numbers (8012, 8112, 8022, 9090, 9091, and the app's 8080), so the
// test runs itself again inside a private network namespace that has only
// loopback.
func TestKnativeReconciler(t *testing.T) {
	if !inNamespace(t, "TestKnativeReconciler") {
		return
	}

	// The app: a readiness endpoint and an answer.
	var mu sync.Mutex
	probed := 0
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			mu.Lock()
			probed++
			mu.Unlock()
			return
		}
		io.WriteString(w, "hello")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	go app.Serve(ln)
	defer app.Close()

	// An OTLP/HTTP collector that counts trace exports.
	var exports sync.WaitGroup
	exports.Add(1)
	var once sync.Once
	var controlPlane atomic.Int32 // requests to the control plane's metrics endpoint
	collector := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && r.URL.Path == "/v1/traces" {
			once.Do(exports.Done)
		}
		if strings.HasPrefix(r.URL.Path, "/control-plane/") {
			controlPlane.Add(1)
		}
	})}
	cln, err := net.Listen("tcp", "127.0.0.1:4318")
	if err != nil {
		t.Fatal(err)
	}
	go collector.Serve(cln)
	defer collector.Close()

	certDir, caPEM, pool := writeCert(t)
	container := queueContainer(t, operator{rootCA: string(caPEM), logging: map[string]string{
		"zap-logger-config":   knativeExampleLogging,
		"loglevel.queueproxy": "debug",
	}, observability: exampleObservability})
	env := resolve(t, container.Env)

	// Every variable of the reconciler is set: none hides behind an empty value.
	var names []string
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		names = append(names, name)
		if value == "" {
			t.Errorf("the reconciler left %s empty: the test must give it a value", name)
		}
	}
	if len(names) != 27 {
		t.Errorf("the reconciler gives %d variables, want the 27 the contract lists: %v", len(names), names)
	}

	// Queue, with that environment and nothing else but the certificate
	// directory.
	q := startQueue(t, env, certDir)

	// config-logging's zap configuration sends the log to stdout, beside
	// the request log.
	lines := logLines(t, q.stdout.String())
	start, kn := lines["queue starting"], lines["knative environment"]
	if start == nil || kn == nil {
		t.Fatalf("no startup lines:\n%s", q.stdout.String())
	}
	// Every setting is one queue honours or one Knative's queue-proxy
	// ignores too: no warning.
	for msg := range lines {
		if strings.HasPrefix(msg, "OBSERVABILITY_CONFIG") {
			t.Errorf("warning %q", msg)
		}
	}
	// Each variable is named on the startup line with what queue did with it.
	for _, name := range names {
		if use, _ := kn[name].(string); use == "" {
			t.Errorf("the knative environment line does not account for %s", name)
		}
	}
	cfg, _ := start["config"].(map[string]any)
	for k, want := range map[string]any{
		"listen": ":8012", "tls_listen": ":8112", "upstream": "127.0.0.1:8080", "concurrency": 10.0,
		"timeout": "5m0s", "response_start_timeout": "30s", "idle_timeout": "1m0s", "probe": "knative",
		"access_log": true, "pprof": false, "pprof_listen": ":8008", "trace_sample_rate": 1.0,
	} {
		if cfg[k] != want {
			t.Errorf("startup config %s = %v, want %v", k, cfg[k], want)
		}
	}
	// Knative's schema: the example zap configuration's keys, and the
	// fields Knative's queue-proxy adds.
	for k, want := range map[string]string{"logger": "queueproxy", "severity": "info", "knative.dev/key": namespace + "/" + revision,
		"knative.dev/pod": pod} {
		if start[k] != want {
			t.Errorf("log field %s = %v, want %s", k, start[k], want)
		}
	}
	if ts, _ := start["timestamp"].(string); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d{4})$`).MatchString(ts) {
		t.Errorf("timestamp %q, want ISO 8601 (zap's iso8601)", ts)
	}
	mu.Lock()
	if probed == 0 {
		t.Error("SERVING_READINESS_PROBE's httpGet /healthz never reached the app")
	}
	mu.Unlock()

	// The kubelet's readiness probe: in the request log, as
	// logging.enable-probe-request-log asks.
	probe, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:8012/", nil)
	if err != nil {
		t.Fatal(err)
	}
	probe.Header.Set("User-Agent", "kube-probe/1.31")
	probe.Header.Set("K-Network-Probe", "queue")
	if res, err := client.Do(probe); err != nil {
		t.Fatal(err)
	} else {
		res.Body.Close()
	}

	// A request: proxied, counted, logged with the template, traced.
	res, err := client.Get("http://127.0.0.1:8012/greet")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != "hello" {
		t.Errorf("through queue: %d %q", res.StatusCode, body)
	}

	// The TLS policy: 1.2 only, the given suites and curve.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}, ForceAttemptHTTP2: true}
	res, err = (&http.Client{Transport: tr, Timeout: failAfter}).Get("https://127.0.0.1:8112/tls")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	tr.CloseIdleConnections()
	if st := res.TLS; st.Version != tls.VersionTLS12 || st.CipherSuite != tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 && st.CipherSuite != tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 ||
		st.CurveID != tls.CurveP384 || res.Proto != "HTTP/2.0" {
		t.Errorf("TLS %x %s %v %s, want 1.2, a listed suite, P-384, HTTP/2", st.Version, tls.CipherSuiteName(st.CipherSuite), st.CurveID, res.Proto)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: failAfter}, "tcp", "127.0.0.1:8112", &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS13})
	if err == nil {
		c.Close()
		t.Error("a TLS 1.3-only client got in past QUEUE_PROXY_TLS_MAX_VERSION=1.2")
	}

	// Runtime profiling on: pprof on the port the reconciler declares for
	// it, and not on the admin port.
	declared := false
	for _, p := range container.Ports {
		declared = declared || p.ContainerPort == 8008
	}
	if !declared {
		t.Errorf("the reconciler declares no port 8008 with runtime profiling on: %v", container.Ports)
	}
	for url, want := range map[string]int{"http://127.0.0.1:8008/debug/pprof/cmdline": 200, "http://127.0.0.1:8022/debug/pprof/cmdline": 404} {
		res, err := client.Get(url)
		if err != nil {
			t.Errorf("%s: %v, want %d", url, err, want)
			continue
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("%s: %d, want %d", url, res.StatusCode, want)
		}
	}

	// Prometheus: Knative's families, with the revision's identity.
	res, err = client.Get("http://127.0.0.1:9091/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	identity := fmt.Sprintf(`k8s_namespace_name="%s",kn_service_name="%s",kn_configuration_name="%s",kn_revision_name="%s",k8s_pod_name="%s"`,
		namespace, service, service, revision, pod)
	for _, want := range []string{
		`kn_serving_invocation_duration_seconds_count{` + identity + `,http_response_status_code="200"} 2`, // /greet and /tls
		`kn_serving_invocation_duration_seconds_bucket{` + identity + `,http_response_status_code="200",le="7.5"} 2`,
		`kn_serving_queue_depth{` + identity + `} `,
		`target_info{k8s_container_name="queue-proxy",`,
		`http_server_request_duration_seconds_count{namespace="default",service="hello",configuration="hello",revision="hello-00001",pod="` + pod +
			`",http_request_method="GET",http_response_status_code="200",network_protocol_name="http",network_protocol_version="1.1",url_scheme="http"} 1`, // /greet
		"go_goroutines ", "process_resident_memory_bytes ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the Prometheus port lacks %s", want)
		}
	}
	// The autoscaler's Stat names the pod.
	if res, err := client.Get("http://127.0.0.1:9090/metrics"); err != nil {
		t.Error(err)
	} else {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !bytes.Contains(b, []byte(pod)) {
			t.Errorf("the Stat does not name the pod: %q", b)
		}
	}

	// SIGINT: drain at once, flush the traces, exit 0. Queue has exited
	// when interrupt returns: the flush is over, and its export has
	// reached the collector (the wait is only a bound).
	q.interrupt(t)
	flushed := make(chan struct{})
	go func() { exports.Wait(); close(flushed) }()
	select {
	case <-flushed:
	case <-time.After(failAfter):
		t.Error("no trace reached the collector that OBSERVABILITY_CONFIG names")
	}
	if n := controlPlane.Load(); n != 0 {
		t.Errorf("%d requests to the control plane's metrics endpoint, want none: queue-proxy does not export there", n)
	}

	// The request log: the operator's template, a line per request, the
	// probe included; the log's own lines are zap's, beside it.
	var requests []string
	for _, l := range strings.SplitAfter(q.stdout.String(), "\n") {
		if l != "" && !strings.HasPrefix(l, `{"severity":`) {
			requests = append(requests, l)
		}
	}
	if got, want := strings.Join(requests, ""), "GET / 200 5 "+revision+" "+namespace+" "+podIP+"\nGET /greet 200 5 "+revision+" "+namespace+" "+podIP+"\nGET /tls 200 5 "+revision+" "+namespace+" "+podIP+"\n"; got != want {
		t.Errorf("request log %q, want %q", got, want)
	}
	if q.stderr.String() != "" {
		t.Errorf("stderr %q, want nothing: the zap configuration's output is stdout", q.stderr.String())
	}
	// SERVING_LOGGING_LEVEL=debug: the refused TLS 1.3 handshake is logged at debug.
	if !strings.Contains(q.stdout.String(), `{"severity":"debug"`) {
		t.Error("no debug line: SERVING_LOGGING_LEVEL=debug not honoured")
	}
}

// exampleObservability is config-observability as TestKnativeReconciler's
// operator has it: every key that reaches queue-proxy, given a value.
var exampleObservability = map[string]string{
	"logging.enable-request-log":       "true",
	"logging.request-log-template":     requestLogTemplate,
	"logging.enable-probe-request-log": "true",
	"tracing-protocol":                 "http/protobuf",
	"tracing-endpoint":                 "http://127.0.0.1:4318/v1/traces",
	"tracing-sampling-rate":            "1",
	"request-metrics-protocol":         "prometheus",
	"runtime-profiling":                "enabled",
	// What reaches queue-proxy but no queue-proxy reads: the control
	// plane's metrics, the runtime metrics' interval, the reconciler's
	// own logging settings.
	"metrics-protocol":                  "http/protobuf",
	"metrics-endpoint":                  "http://127.0.0.1:4318/control-plane/v1/metrics",
	"metrics-export-interval":           "30s",
	"runtime-export-interval":           "20s",
	"logging.enable-var-log-collection": "true",
	"logging.revision-url-template":     "http://logs.example/?revisionUID=${REVISION_UID}",
}

// operator is what the ConfigMaps of a test's cluster say: config-logging
// and config-observability as Knative reads them, the queue sidecar's
// root CA, and the name of the app's port (h2c for a gRPC app).
type operator struct {
	rootCA        string
	logging       map[string]string
	observability map[string]string
	portName      string
}

// inNamespace reports whether the test runs inside a private network
// namespace that has only loopback. Outside one it runs the test named
// name again inside one (as root, with unshare) and reports false: Knative's
// ports are fixed numbers, which a shared machine must not see bound.
func inNamespace(t *testing.T, name string) bool {
	t.Helper()
	if os.Getenv("QUEUE_TEST_BINARY") != "" {
		if c, err := net.Dial("tcp", "1.1.1.1:53"); err == nil {
			c.Close()
			t.Fatal("the namespace reaches outside: refusing to bind fixed ports here")
		}
		return true
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to make a private network namespace: Knative's ports are fixed numbers")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux) for a private network namespace")
	}
	bin := filepath.Join(t.TempDir(), "queue")
	build := exec.Command("go", "build", "-o", bin, "./cmd/queue")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/queue: %v\n%s", err, out)
	}
	// The run inside has its own bound: a binary run directly has none.
	cmd := exec.Command(unshare, "--net", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`,
		os.Args[0], "-test.run", "^"+name+"$", "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), "QUEUE_TEST_BINARY="+bin)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("inside the network namespace: %v\n%s", err, out)
	}
	t.Logf("inside the network namespace:\n%s", out)
	return false
}

// queueContainer returns the queue-proxy container that Knative's
// reconciler makes for a revision of service hello, with the ConfigMaps an
// operator might have written: every setting that reaches queue's
// environment is given a value.
func queueContainer(t *testing.T, op operator) corev1.Container {
	t.Helper()
	t.Setenv("SYSTEM_NAMESPACE", "knative-serving") // system.Namespace() panics without it
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	dep, err := deployment.NewConfigFromMap(map[string]string{
		"queue-sidecar-image":                 "ghcr.io/queue-dev/queue:test",
		"queue-sidecar-rootca":                op.rootCA,
		"queue-sidecar-tls-min-version":       "1.2",
		"queue-sidecar-tls-max-version":       "1.2",
		"queue-sidecar-tls-cipher-suites":     "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
		"queue-sidecar-tls-curve-preferences": "CurveP384",
	})
	must(err)
	logCfg, err := logging.NewConfigFromMap(op.logging)
	must(err)
	obs, err := observability.NewFromMap(op.observability)
	must(err)
	features, err := apicfg.NewFeaturesConfigFromMap(map[string]string{"multi-container-probing": "enabled", "autodetect-http2": "enabled"})
	must(err)
	defaults, err := apicfg.NewDefaultsConfigFromMap(nil)
	must(err)
	as, err := asconfig.NewConfigFromMap(nil)
	must(err)
	network, err := netcfg.NewConfigFromMap(nil)
	must(err)
	cfg := &config.Config{
		Config:        &apicfg.Config{Defaults: defaults, Features: features, Autoscaler: as},
		Deployment:    dep,
		Logging:       logCfg,
		Network:       network,
		Observability: obs,
	}
	rev := &v1.Revision{
		ObjectMeta: metav1.ObjectMeta{
			Name: revision, Namespace: namespace, UID: "1234",
			Labels:      map[string]string{"serving.knative.dev/service": service, "serving.knative.dev/configuration": service},
			Annotations: map[string]string{apicfg.AllowHTTPFullDuplexFeatureKey: "Enabled"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1.SchemeGroupVersion.String(), Kind: "Configuration",
				Name: service, Controller: ptr.Bool(true)}},
		},
		Spec: v1.RevisionSpec{
			ContainerConcurrency:        ptr.Int64(10),
			TimeoutSeconds:              ptr.Int64(300),
			ResponseStartTimeoutSeconds: ptr.Int64(30),
			IdleTimeoutSeconds:          ptr.Int64(60),
			PodSpec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "user-container", Image: "example.com/hello",
				Ports: []corev1.ContainerPort{{Name: op.portName, ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)},
				}},
			}}},
		},
	}
	d, err := resources.MakeDeployment(rev, cfg)
	must(err)
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "queue-proxy" {
			return c
		}
	}
	t.Fatalf("no queue-proxy container in %v", d.Spec.Template.Spec.Containers)
	return corev1.Container{}
}

// resolve turns the container's env into KEY=value pairs, as the kubelet
// would: fieldRefs become the pod's name and addresses.
func resolve(t *testing.T, env []corev1.EnvVar) []string {
	t.Helper()
	fields := map[string]string{"metadata.name": pod, "status.podIP": podIP, "status.hostIP": hostIP}
	var out []string
	for _, e := range env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				t.Fatalf("%s comes from %v: the test knows fieldRefs only", e.Name, e.ValueFrom)
			}
			var ok bool
			if v, ok = fields[e.ValueFrom.FieldRef.FieldPath]; !ok {
				t.Fatalf("%s comes from field %s: unknown to the test", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		}
		out = append(out, e.Name+"="+v)
	}
	return out
}

// queueProcess is the queue under test, running under a revision's
// environment.
type queueProcess struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	exited         chan error
	stopped        bool
}

// startQueue runs the queue under test with env and the certificate
// directory (Knative mounts it at a path a test cannot write), and waits
// until it says ready. Unless interrupt stopped it, it is killed when the
// test ends, and its output is logged if the test failed.
func startQueue(t *testing.T, env []string, certDir string) *queueProcess {
	t.Helper()
	q := &queueProcess{cmd: exec.Command(os.Getenv("QUEUE_TEST_BINARY")), exited: make(chan error, 1)}
	q.cmd.Env = append(slices.Clone(env), "QUEUE_KNATIVE_CERT_DIR="+certDir)
	q.cmd.Stdout, q.cmd.Stderr = &q.stdout, &q.stderr
	if err := q.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { q.exited <- q.cmd.Wait() }()
	t.Cleanup(func() {
		if !q.stopped {
			q.cmd.Process.Kill()
			<-q.exited
		}
		if t.Failed() {
			t.Logf("queue's stderr:\n%s\nstdout:\n%s", q.stderr.String(), q.stdout.String())
		}
	})
	waitReady(t, q.exited)
	return q
}

// interrupt sends queue SIGINT, which drains at once and flushes what it
// exports, and wants it to exit 0 (within failAfter, a failure bound).
func (q *queueProcess) interrupt(t *testing.T) {
	t.Helper()
	q.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-q.exited:
		q.stopped = true
		if err != nil {
			t.Errorf("queue exited with %v after SIGINT", err)
		}
	case <-time.After(failAfter):
		t.Fatalf("queue did not stop within %v of SIGINT", failAfter)
	}
}

// waitReady polls the admin port until queue says ready (no event tells
// it), for failAfter at most.
func waitReady(t *testing.T, exited <-chan error) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(failAfter)
	poll := &http.Client{Timeout: time.Second}
	for {
		if res, err := poll.Get("http://127.0.0.1:8022/ready"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("queue exited: %v", err)
		case <-deadline:
			t.Fatalf("queue not ready within %v", failAfter)
		case <-tick.C:
		}
	}
}

// logLines decodes queue's zap log lines by message, skipping the request
// log's lines among them.
func logLines(t *testing.T, s string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if !bytes.HasPrefix(sc.Bytes(), []byte("{")) {
			continue // the request log's
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Errorf("log line not JSON: %s", sc.Text())
			continue
		}
		if msg, _ := m["message"].(string); msg != "" && out[msg] == nil {
			out[msg] = m
		}
	}
	return out
}

// writeCert writes a self-signed ECDSA pair for localhost as Knative
// mounts it (tls.crt, tls.key) and returns the directory, the certificate
// and a pool that trusts it.
func writeCert(t *testing.T) (string, []byte, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return dir, certPEM, pool
}

// syncBuffer is a bytes.Buffer that a child's output goroutines and the
// test can share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
