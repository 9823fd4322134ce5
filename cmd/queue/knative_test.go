package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/queue-dev/queue/ingress"
	"github.com/queue-dev/queue/internal/testnet"
	"github.com/queue-dev/queue/otlp"
	"github.com/queue-dev/queue/probe"
)

// TestKnativeEnv: Knative's variables configure queue as its reconciler
// means them; flags and QUEUE_* variables still win.
func TestKnativeEnv(t *testing.T) {
	t.Parallel()
	certDir := t.TempDir()
	writeCert(t, certDir, "knative")
	tests := []configCase{{
		name: "the revision's settings",
		env: map[string]string{"USER_PORT": "8080", "QUEUE_SERVING_PORT": "8012", "QUEUE_SERVING_TLS_PORT": "8112",
			"CONTAINER_CONCURRENCY": "10", "REVISION_TIMEOUT_SECONDS": "600", "REVISION_RESPONSE_START_TIMEOUT_SECONDS": "30",
			"REVISION_IDLE_TIMEOUT_SECONDS": "45", "SERVING_LOGGING_LEVEL": "debug", "QUEUE_PROXY_TLS_MIN_VERSION": "1.3",
			"SERVING_NAMESPACE": "ns", "SERVING_SERVICE": "svc", "SERVING_CONFIGURATION": "cfg", "SERVING_REVISION": "svc-00001",
			"SERVING_POD": "svc-00001-deployment-abc", "SERVING_POD_IP": "10.0.0.7", "QUEUE_KNATIVE_CERT_DIR": certDir},
		check: func(t *testing.T, c Config) {
			if c.Upstream != "127.0.0.1:8080" || c.Listen != ":8012" || c.TLSListen != ":8112" || c.UpstreamProtocol != "http1" {
				t.Errorf("addresses: %s %s %s %s", c.Upstream, c.Listen, c.TLSListen, c.UpstreamProtocol)
			}
			if c.Concurrency != 10 || c.QueueDepth != 100 {
				t.Errorf("concurrency %d depth %d, want 10 and 100", c.Concurrency, c.QueueDepth)
			}
			if c.Timeout != 600*time.Second || c.ResponseStartTimeout != 30*time.Second || c.IdleTimeout != 45*time.Second || c.DrainTimeout != 600*time.Second {
				t.Errorf("timeouts %v %v %v drain %v", c.Timeout, c.ResponseStartTimeout, c.IdleTimeout, c.DrainTimeout)
			}
			if c.LogLevel != "debug" || c.TLSMinVersion != tls.VersionTLS13 {
				t.Errorf("log level %s, TLS min %x", c.LogLevel, c.TLSMinVersion)
			}
			want := Labels{Namespace: "ns", Service: "svc", Configuration: "cfg", Revision: "svc-00001", Pod: "svc-00001-deployment-abc"}
			if c.Labels != want || c.PodIP != "10.0.0.7" {
				t.Errorf("labels %+v pod ip %s", c.Labels, c.PodIP)
			}
			if c.TLSCert != filepath.Join(certDir, "tls.crt") || c.TLSKey != filepath.Join(certDir, "tls.key") {
				t.Errorf("certificate pair %s %s, want the Knative directory's", c.TLSCert, c.TLSKey)
			}
		},
	}, {
		name: "REVISION_TIMEOUT_SECONDS=0 means no timeout",
		env:  map[string]string{"USER_PORT": "8080", "REVISION_TIMEOUT_SECONDS": "0"},
		check: func(t *testing.T, c Config) {
			if c.Timeout != 0 {
				t.Errorf("timeout %v, want none", c.Timeout)
			}
		},
	}, {
		name: "port 8013 means an h2c upstream",
		env:  map[string]string{"USER_PORT": "8080", "QUEUE_SERVING_PORT": "8013"},
		check: func(t *testing.T, c Config) {
			if c.UpstreamProtocol != "h2c" || c.Listen != ":8013" {
				t.Errorf("protocol %s listen %s, want h2c on :8013", c.UpstreamProtocol, c.Listen)
			}
		},
	}, {
		name: "an explicit protocol wins over 8013",
		args: []string{"--upstream-protocol", "http1"},
		env:  map[string]string{"USER_PORT": "8080", "QUEUE_SERVING_PORT": "8013"},
		check: func(t *testing.T, c Config) {
			if c.UpstreamProtocol != "http1" {
				t.Errorf("protocol %s, want http1", c.UpstreamProtocol)
			}
		},
	}, {
		name: "flags and QUEUE_* variables win",
		args: []string{"--upstream", ":9000", "--timeout", "5s"},
		env:  map[string]string{"USER_PORT": "8080", "REVISION_TIMEOUT_SECONDS": "600", "QUEUE_CONCURRENCY": "3", "CONTAINER_CONCURRENCY": "10"},
		check: func(t *testing.T, c Config) {
			if c.Upstream != "127.0.0.1:9000" || c.Timeout != 5*time.Second || c.Concurrency != 3 {
				t.Errorf("got %s %v %d", c.Upstream, c.Timeout, c.Concurrency)
			}
		},
	}, {
		name: "no certificate directory, no TLS",
		env:  map[string]string{"USER_PORT": "8080", "QUEUE_KNATIVE_CERT_DIR": filepath.Join(certDir, "absent")},
		check: func(t *testing.T, c Config) {
			if c.TLSCert != "" {
				t.Errorf("TLS from a missing directory: %s", c.TLSCert)
			}
		},
	}, {
		name: "httpGet readiness probe",
		env: map[string]string{"USER_PORT": "8080", "SERVING_READINESS_PROBE": `{"httpGet":{"path":"healthz","port":8080,"host":"127.0.0.1",` +
			`"httpHeaders":[{"name":"Host","value":"app.example"},{"name":"X-Probe","value":"yes"}]},"periodSeconds":5,"failureThreshold":4,"successThreshold":2,"timeoutSeconds":3}`},
		check: func(t *testing.T, c Config) {
			h, ok := c.Prober.(*probe.HTTP)
			if !ok {
				t.Fatalf("prober %T, want *probe.HTTP", c.Prober)
			}
			if h.URL != "http://127.0.0.1:8080/healthz" || h.Host != "app.example" || h.Header.Get("X-Probe") != "yes" || h.Timeout != 3*time.Second {
				t.Errorf("http probe %+v", h)
			}
			if c.ProbePeriod != 5*time.Second || c.FailureThreshold != 4 || c.SuccessThreshold != 2 {
				t.Errorf("period %v thresholds %d/%d", c.ProbePeriod, c.FailureThreshold, c.SuccessThreshold)
			}
		},
	}, {
		name: "tcpSocket probe with a string port, periodSeconds 0 is aggressive",
		env:  map[string]string{"USER_PORT": "8080", "SERVING_READINESS_PROBE": `{"tcpSocket":{"port":"8081"},"periodSeconds":0}`},
		check: func(t *testing.T, c Config) {
			if p, ok := c.Prober.(probe.TCP); !ok || p.Addr != "127.0.0.1:8081" {
				t.Errorf("prober %#v, want TCP to 127.0.0.1:8081", c.Prober)
			}
			if c.ProbePeriod != 0 {
				t.Errorf("period %v, want aggressive", c.ProbePeriod)
			}
		},
	}, {
		name: "grpc probe",
		env:  map[string]string{"USER_PORT": "8080", "SERVING_READINESS_PROBE": `{"grpc":{"port":8080,"service":"ready"}}`},
		check: func(t *testing.T, c Config) {
			if p, ok := c.Prober.(*probe.GRPC); !ok || p.Addr != "127.0.0.1:8080" || p.Service != "ready" {
				t.Errorf("prober %#v", c.Prober)
			}
		},
	}, {
		name: "several probes with ENABLE_MULTI_CONTAINER_PROBES",
		env: map[string]string{"USER_PORT": "8080", "ENABLE_MULTI_CONTAINER_PROBES": "true",
			"SERVING_READINESS_PROBE": `[{"tcpSocket":{"port":8080}},{"httpGet":{"path":"/","port":8090}}]`},
		check: func(t *testing.T, c Config) {
			if all, ok := c.Prober.(probe.All); !ok || len(all) != 2 {
				t.Errorf("prober %#v, want All of 2", c.Prober)
			}
		},
	}, {
		name: "--probe wins over SERVING_READINESS_PROBE",
		args: []string{"--probe", "none"},
		env:  map[string]string{"USER_PORT": "8080", "SERVING_READINESS_PROBE": `{"exec":{"command":["true"]}}`},
		check: func(t *testing.T, c Config) {
			if c.Prober != nil || c.Probe != "none" {
				t.Errorf("prober %#v probe %s", c.Prober, c.Probe)
			}
		},
	}}
	runConfigCases(t, tests)
}

// TestLogLabels: queue's own formats put the revision labels on every log
// line; Knative mode's zap format puts Knative's fields there instead.
func TestLogLabels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "--log-format json", args: []string{"--log-format", "json"},
			want: []string{`"component":"queue"`, `"namespace":"ns"`, `"service":"s"`, `"configuration":"c"`, `"revision":"r1"`, `"pod":"p1"`}},
		{name: "Knative mode: zap", want: []string{`"logger":"queueproxy"`, `"knative.dev/key":"ns/r1","knative.dev/pod":"p1"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseConfig(tt.args, env(map[string]string{"USER_PORT": "8080", "SERVING_NAMESPACE": "ns",
				"SERVING_REVISION": "r1", "SERVING_POD": "p1", "SERVING_SERVICE": "s", "SERVING_CONFIGURATION": "c"}))
			if err != nil {
				t.Fatal(err)
			}
			var buf testnet.SyncBuffer
			newLogger(c, &buf).Info("hello")
			for _, want := range tt.want {
				if !strings.Contains(buf.String(), want) {
					t.Errorf("log line %s lacks %s", buf.String(), want)
				}
			}
		})
	}
}

// TestKnativeEnvErrors: every malformed variable is a configuration error
// that names it.
func TestKnativeEnvErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"USER_PORT not a number", map[string]string{"USER_PORT": "http"}, "USER_PORT"},
		{"USER_PORT out of range", map[string]string{"USER_PORT": "70000"}, "USER_PORT"},
		{"QUEUE_SERVING_PORT", map[string]string{"USER_PORT": "8080", "QUEUE_SERVING_PORT": "-1"}, "QUEUE_SERVING_PORT"},
		{"QUEUE_SERVING_TLS_PORT", map[string]string{"USER_PORT": "8080", "QUEUE_SERVING_TLS_PORT": "x"}, "QUEUE_SERVING_TLS_PORT"},
		{"CONTAINER_CONCURRENCY", map[string]string{"USER_PORT": "8080", "CONTAINER_CONCURRENCY": "many"}, "CONTAINER_CONCURRENCY"},
		{"REVISION_TIMEOUT_SECONDS", map[string]string{"USER_PORT": "8080", "REVISION_TIMEOUT_SECONDS": "5m"}, "REVISION_TIMEOUT_SECONDS"},
		{"REVISION_RESPONSE_START_TIMEOUT_SECONDS", map[string]string{"USER_PORT": "8080", "REVISION_RESPONSE_START_TIMEOUT_SECONDS": "-3"}, "REVISION_RESPONSE_START_TIMEOUT_SECONDS"},
		{"REVISION_IDLE_TIMEOUT_SECONDS", map[string]string{"USER_PORT": "8080", "REVISION_IDLE_TIMEOUT_SECONDS": "soon"}, "REVISION_IDLE_TIMEOUT_SECONDS"},
		{"SERVING_LOGGING_LEVEL", map[string]string{"USER_PORT": "8080", "SERVING_LOGGING_LEVEL": "verbose"}, "SERVING_LOGGING_LEVEL"},
		{"QUEUE_PROXY_TLS_MIN_VERSION", map[string]string{"USER_PORT": "8080", "QUEUE_PROXY_TLS_MIN_VERSION": "1.1"}, "QUEUE_PROXY_TLS_MIN_VERSION"},
		{"probe not JSON", map[string]string{"USER_PORT": "8080", "SERVING_READINESS_PROBE": `{tcpSocket:`}, "SERVING_READINESS_PROBE"},
		{"probe with exec", map[string]string{"USER_PORT": "8080", "SERVING_READINESS_PROBE": `{"exec":{"command":["cat","/ready"]}}`}, "exec"},
		{"probe with a bad port", map[string]string{"USER_PORT": "8080", "SERVING_READINESS_PROBE": `{"tcpSocket":{"port":"http"}}`}, "SERVING_READINESS_PROBE"},
		{"probe with a bad scheme", map[string]string{"USER_PORT": "8080", "SERVING_READINESS_PROBE": `{"httpGet":{"port":8080,"scheme":"FTP"}}`}, "SERVING_READINESS_PROBE"},
		{"several probes without the switch", map[string]string{"USER_PORT": "8080", "SERVING_READINESS_PROBE": `[{},{}]`}, "ENABLE_MULTI_CONTAINER_PROBES"},
		{"HTTP/2 detection not a boolean", map[string]string{"USER_PORT": "8080", "ENABLE_HTTP2_AUTO_DETECTION": "enabled"}, "ENABLE_HTTP2_AUTO_DETECTION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseConfig(nil, env(tt.env))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a ConfigError", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name %s", err, tt.want)
			}
		})
	}
	// And as a process: exit 2, one line.
	cmd := queueCmd(t)
	cmd.Env = append(os.Environ(), "QUEUE_TEST_MAIN=1", "USER_PORT=8080", "SERVING_READINESS_PROBE={")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := runCmd(t, cmd, childTimeout) // a probe taken by mistake would serve forever
	out := buf.String()
	var ee interface{ ExitCode() int }
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(out, "SERVING_READINESS_PROBE") || strings.Count(out, "\n") != 1 {
		t.Errorf("malformed SERVING_READINESS_PROBE: %v %q, want exit 2 and one line naming it", err, out)
	}
}

// TestKnativeObservability: OBSERVABILITY_CONFIG, SERVING_LOGGING_CONFIG and
// the TLS policy map onto queue's configuration as docs/contract.md section 9 says.
func TestKnativeObservability(t *testing.T) {
	t.Parallel()
	tests := []configCase{{
		name: "request log on, Knative's default template",
		env:  map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": `{"enableRequestLog":true}`},
		check: func(t *testing.T, c Config) {
			if !c.AccessLog || c.Knative.RequestLog == nil {
				t.Fatalf("access log %v template %v, want both", c.AccessLog, c.Knative.RequestLog)
			}
			var b strings.Builder
			if err := c.Knative.RequestLog.Execute(&b, &requestLogInput{Request: &http.Request{Method: "GET", Header: http.Header{}},
				Response: &requestLogResponse{Code: 200}, Revision: &requestLogRevision{}}); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(b.String(), `{"httpRequest": {"requestMethod": "GET"`) {
				t.Errorf("default template gives %s", b.String())
			}
		},
	}, {
		name: "a template without the switch shapes --access-log lines only",
		env:  map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": `{"requestLogTemplate":"{{.Request.Method}}"}`},
		check: func(t *testing.T, c Config) {
			if c.AccessLog || c.Knative.RequestLog == nil {
				t.Errorf("access log %v template %v, want off with a template", c.AccessLog, c.Knative.RequestLog)
			}
		},
	}, {
		name: "--access-log=false wins over the switch",
		args: []string{"--access-log=false"},
		env:  map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": `{"enableRequestLog":true}`},
		check: func(t *testing.T, c Config) {
			if c.AccessLog {
				t.Error("access log on")
			}
		},
	}, {
		name: "tracing over OTLP/HTTP, metrics endpoint, profiling",
		env: map[string]string{"USER_PORT": "8080", "SERVING_SERVICE": "svc", "SERVING_NAMESPACE": "ns", "OBSERVABILITY_CONFIG": `{"tracing":{"protocol":"http/protobuf",` +
			`"endpoint":"http://collector.obs:4318","samplingRate":0.25},"requestMetrics":{"protocol":"prometheus","endpoint":":9095"},"runtime":{"profiling":"enabled"}}`},
		check: func(t *testing.T, c Config) {
			for k, want := range map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector.obs:4318/v1/traces",
				"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"} {
				if got := c.Getenv(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if c.TraceSampleRate != 0.25 || c.MetricsListen != ":9095" || c.PProfListen != ":8008" || c.PProf {
				t.Errorf("sample rate %v metrics %s pprof %q, on the admin port %v", c.TraceSampleRate, c.MetricsListen, c.PProfListen, c.PProf)
			}
			if len(c.Knative.Notes) != 0 {
				t.Errorf("notes %q, want none", c.Knative.Notes)
			}
		},
	}, {
		name: "OTEL_* variables and flags win; a bare host:port is https",
		args: []string{"--trace-sample-rate", "1"},
		env: map[string]string{"USER_PORT": "8080", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://mine:4318/v1/traces",
			"OBSERVABILITY_CONFIG": `{"tracing":{"protocol":"http/protobuf","endpoint":"collector:4318","samplingRate":0.5}}`},
		check: func(t *testing.T, c Config) {
			if got := c.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); got != "http://mine:4318/v1/traces" || c.TraceSampleRate != 1 {
				t.Errorf("endpoint %s rate %v", got, c.TraceSampleRate)
			}
			if u, _ := knativeOTLPURL("collector:4318", otlp.Traces, otlp.HTTPProtobuf); u != "https://collector:4318/v1/traces" {
				t.Errorf("bare endpoint gives %s", u)
			}
		},
	}, {
		name: "tracing and request metrics over OTLP/gRPC",
		env: map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": `{"tracing":{"protocol":"grpc","endpoint":"collector:4317","samplingRate":0.5},` +
			`"requestMetrics":{"protocol":"grpc","endpoint":"http://collector:4317","exportInterval":10000000000}}`},
		check: func(t *testing.T, c Config) {
			for k, want := range map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector:4317", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc",
				"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://collector:4317"} {
				if got := c.Getenv(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if got, want := c.Knative.MetricsPush, (MetricsPush{Protocol: otlp.GRPC, Interval: 10 * time.Second}); got != want {
				t.Errorf("metrics push %+v, want %+v", got, want)
			}
			if c.MetricsListen != ":9091" || c.TraceSampleRate != 0.5 {
				t.Errorf("metrics port %q, sample rate %v; want :9091 and 0.5", c.MetricsListen, c.TraceSampleRate)
			}
			for _, n := range c.Knative.Notes {
				if strings.Contains(n, "tracing") || strings.Contains(n, "requestMetrics") || strings.Contains(n, "request metrics") {
					t.Errorf("note %q: tracing and request metrics over gRPC are supported", n)
				}
			}
		},
	}, {
		name: "request metrics over OTLP/HTTP: Knative's interval string, the default path",
		env: map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": `{"requestMetrics":{"protocol":"http/protobuf",` +
			`"endpoint":"collector:4318","exportInterval":"15s"}}`},
		check: func(t *testing.T, c Config) {
			if got := c.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"); got != "https://collector:4318/v1/metrics" {
				t.Errorf("metrics endpoint %q", got)
			}
			if got, want := c.Knative.MetricsPush, (MetricsPush{Protocol: otlp.HTTPProtobuf, Interval: 15 * time.Second}); got != want {
				t.Errorf("metrics push %+v, want %+v", got, want)
			}
		},
	}, {
		name: "request metrics push: the OTLP variables win, as in Knative",
		env: map[string]string{"USER_PORT": "8080", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://mine:4318", "OTEL_METRIC_EXPORT_INTERVAL": "2500",
			"OBSERVABILITY_CONFIG": `{"requestMetrics":{"protocol":"http/protobuf","endpoint":"http://collector:4318"}}`},
		check: func(t *testing.T, c Config) {
			if got := c.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"); got != "" {
				t.Errorf("metrics endpoint %q, want none over OTEL_EXPORTER_OTLP_ENDPOINT", got)
			}
			if got, want := c.Knative.MetricsPush.Interval, 2500*time.Millisecond; got != want {
				t.Errorf("interval %v, want OTEL_METRIC_EXPORT_INTERVAL's %v", got, want)
			}
		},
	}, {
		name: "request metrics push: OpenTelemetry's default interval",
		env:  map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": `{"requestMetrics":{"protocol":"grpc","endpoint":"http://c:4317"}}`},
		check: func(t *testing.T, c Config) {
			if got, want := c.Knative.MetricsPush.Interval, 60*time.Second; got != want {
				t.Errorf("interval %v, want %v", got, want)
			}
		},
	}, {
		name: "request metrics none: no metrics port",
		env:  map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": `{"requestMetrics":{"protocol":"none"}}`},
		check: func(t *testing.T, c Config) {
			if c.MetricsListen != "" || c.Knative.MetricsPush.Protocol != "" {
				t.Errorf("metrics port %q push %+v, want neither", c.MetricsListen, c.Knative.MetricsPush)
			}
		},
	}, {
		name: "request metrics none: --metrics-listen wins",
		args: []string{"--metrics-listen", ":9099"},
		env:  map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": `{"requestMetrics":{"protocol":"none"}}`},
		check: func(t *testing.T, c Config) {
			if c.MetricsListen != ":9099" {
				t.Errorf("metrics port %q, want :9099", c.MetricsListen)
			}
		},
	}, {
		name: "tracing to stdout samples every new trace",
		env:  map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": `{"tracing":{"protocol":"stdout","samplingRate":0.1}}`},
		check: func(t *testing.T, c Config) {
			if got := c.Getenv("OTEL_TRACES_EXPORTER"); got != "console" || c.TraceSampleRate != 1 {
				t.Errorf("exporter %q rate %v, want console and 1", got, c.TraceSampleRate)
			}
		},
	}, {
		name: "probes in the request log",
		env:  map[string]string{"USER_PORT": "8080", "OBSERVABILITY_CONFIG": `{"enableRequestLog":true,"enableProbeRequestLog":true}`},
		check: func(t *testing.T, c Config) {
			if !c.AccessLog || !c.Knative.ProbeRequestLog || len(c.Knative.Notes) != 0 {
				t.Errorf("access log %v probes %v notes %q, want both and no note", c.AccessLog, c.Knative.ProbeRequestLog, c.Knative.Notes)
			}
		},
	}, {
		name: "zap configuration: level and encoding",
		env:  map[string]string{"USER_PORT": "8080", "SERVING_LOGGING_CONFIG": `{"level":"warn","encoding":"console","outputPaths":["stdout"]}`},
		check: func(t *testing.T, c Config) {
			if c.LogLevel != "warn" || c.LogFormat != "text" {
				t.Errorf("level %s format %s, want warn text", c.LogLevel, c.LogFormat)
			}
		},
	}, {
		name: "SERVING_LOGGING_LEVEL wins over the zap configuration's level",
		env:  map[string]string{"USER_PORT": "8080", "SERVING_LOGGING_LEVEL": "debug", "SERVING_LOGGING_CONFIG": `{"level":"error"}`},
		check: func(t *testing.T, c Config) {
			if c.LogLevel != "debug" {
				t.Errorf("level %s, want debug", c.LogLevel)
			}
		},
	}, {
		name: "TLS policy",
		env: map[string]string{"USER_PORT": "8080", "QUEUE_PROXY_TLS_MIN_VERSION": "1.2", "QUEUE_PROXY_TLS_MAX_VERSION": "1.2",
			"QUEUE_PROXY_TLS_CIPHER_SUITES":     "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
			"QUEUE_PROXY_TLS_CURVE_PREFERENCES": "X25519,P-256", "ENABLE_HTTP_FULL_DUPLEX": "true"},
		check: func(t *testing.T, c Config) {
			o := c.tlsOptions()
			if o.MinVersion != tls.VersionTLS12 || o.MaxVersion != tls.VersionTLS12 {
				t.Errorf("versions %x..%x", o.MinVersion, o.MaxVersion)
			}
			if !slices.Equal(o.CipherSuites, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}) {
				t.Errorf("cipher suites %x", o.CipherSuites)
			}
			if !slices.Equal(o.CurvePreferences, []tls.CurveID{tls.X25519, tls.CurveP256}) {
				t.Errorf("curves %v", o.CurvePreferences)
			}
		},
	}}
	runConfigCases(t, tests)
}

// TestKnativeObservabilityErrors: a malformed value is a configuration
// error that names the variable.
func TestKnativeObservabilityErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"OBSERVABILITY_CONFIG not JSON", map[string]string{"OBSERVABILITY_CONFIG": `{`}, "OBSERVABILITY_CONFIG"},
		{"bad template", map[string]string{"OBSERVABILITY_CONFIG": `{"requestLogTemplate":"{{.Request"}`}, "requestLogTemplate"},
		{"tracing protocol", map[string]string{"OBSERVABILITY_CONFIG": `{"tracing":{"protocol":"zipkin"}}`}, "tracing protocol"},
		{"tracing endpoint", map[string]string{"OBSERVABILITY_CONFIG": `{"tracing":{"protocol":"http/protobuf","endpoint":"ftp://x"}}`}, "tracing endpoint"},
		{"sampling rate", map[string]string{"OBSERVABILITY_CONFIG": `{"tracing":{"protocol":"http/protobuf","endpoint":"http://x","samplingRate":2}}`}, "samplingRate"},
		{"metrics protocol", map[string]string{"OBSERVABILITY_CONFIG": `{"requestMetrics":{"protocol":"statsd"}}`}, "requestMetrics protocol"},
		{"metrics endpoint", map[string]string{"OBSERVABILITY_CONFIG": `{"requestMetrics":{"protocol":"prometheus","endpoint":"9091"}}`}, "requestMetrics endpoint"},
		{"metrics push without endpoint", map[string]string{"OBSERVABILITY_CONFIG": `{"requestMetrics":{"protocol":"grpc"}}`}, "requestMetrics endpoint"},
		{"metrics push endpoint", map[string]string{"OBSERVABILITY_CONFIG": `{"requestMetrics":{"protocol":"http/protobuf","endpoint":"ftp://c"}}`}, "requestMetrics endpoint"},
		{"metrics interval", map[string]string{"OBSERVABILITY_CONFIG": `{"requestMetrics":{"protocol":"grpc","endpoint":"http://c:4317","exportInterval":"soon"}}`}, "OBSERVABILITY_CONFIG"},
		{"metrics interval variable", map[string]string{"OTEL_METRIC_EXPORT_INTERVAL": "1m",
			"OBSERVABILITY_CONFIG": `{"requestMetrics":{"protocol":"grpc","endpoint":"http://c:4317"}}`}, "OTEL_METRIC_EXPORT_INTERVAL"},
		{"tracing grpc without endpoint", map[string]string{"OBSERVABILITY_CONFIG": `{"tracing":{"protocol":"grpc"}}`}, "tracing endpoint"},
		{"zap configuration not JSON", map[string]string{"SERVING_LOGGING_CONFIG": `level: info`}, "SERVING_LOGGING_CONFIG"},
		{"zap level", map[string]string{"SERVING_LOGGING_CONFIG": `{"level":"loud"}`}, "SERVING_LOGGING_CONFIG"},
		{"full duplex", map[string]string{"ENABLE_HTTP_FULL_DUPLEX": "yes please"}, "ENABLE_HTTP_FULL_DUPLEX"},
		{"TLS max", map[string]string{"QUEUE_PROXY_TLS_MAX_VERSION": "1.4"}, "QUEUE_PROXY_TLS_MAX_VERSION"},
		{"TLS max below min", map[string]string{"QUEUE_PROXY_TLS_MIN_VERSION": "1.3", "QUEUE_PROXY_TLS_MAX_VERSION": "1.2"}, "QUEUE_PROXY_TLS_MAX_VERSION"},
		{"insecure cipher", map[string]string{"QUEUE_PROXY_TLS_CIPHER_SUITES": "TLS_RSA_WITH_RC4_128_SHA"}, "QUEUE_PROXY_TLS_CIPHER_SUITES"},
		{"curve", map[string]string{"QUEUE_PROXY_TLS_CURVE_PREFERENCES": "secp256k1"}, "QUEUE_PROXY_TLS_CURVE_PREFERENCES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.env["USER_PORT"] = "8080"
			_, err := parseConfig(nil, env(tt.env))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a ConfigError", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name %s", err, tt.want)
			}
		})
	}
}

// TestKnativeTLSPolicy: the QUEUE_PROXY_TLS_* policy reaches the handshake.
func TestKnativeTLSPolicy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pool := writeCert(t, dir, "knative")
	certs, err := ingress.NewCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig(nil, env(map[string]string{"USER_PORT": "8080", "QUEUE_PROXY_TLS_MAX_VERSION": "1.2",
		"QUEUE_PROXY_TLS_CIPHER_SUITES":     "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
		"QUEUE_PROXY_TLS_CURVE_PREFERENCES": "CurveP384"}))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		client *tls.Config
		ok     bool
	}{
		{"the policy's version, suite and curve", &tls.Config{RootCAs: pool, ServerName: "localhost"}, true},
		{"TLS 1.3 only is refused", &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS13}, false},
		{"another suite is refused", &tls.Config{RootCAs: pool, ServerName: "localhost", CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}, false},
		{"another curve is refused", &tls.Config{RootCAs: pool, ServerName: "localhost", CurvePreferences: []tls.CurveID{tls.X25519}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cc, sc := net.Pipe()
			// Bounds both ends' handshakes: a deadlock fails the test.
			cc.SetDeadline(time.Now().Add(10 * time.Second))
			sc.SetDeadline(time.Now().Add(10 * time.Second))
			srv := tls.Server(sc, certs.ServerTLSConfig(c.tlsOptions()))
			done := make(chan error, 1)
			go func() { done <- srv.Handshake(); sc.Close() }()
			cli := tls.Client(cc, tt.client)
			err := cli.Handshake()
			cc.Close()
			<-done
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("handshake: %v, want it to end either way within 10 s", err)
			}
			if got := err == nil; got != tt.ok {
				t.Fatalf("handshake error %v, want success %v", err, tt.ok)
			}
			if !tt.ok {
				return
			}
			st := cli.ConnectionState()
			if st.Version != tls.VersionTLS12 || (st.CipherSuite != tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 && st.CipherSuite != tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384) || st.CurveID != tls.CurveP384 {
				t.Errorf("version %x suite %s curve %v", st.Version, tls.CipherSuiteName(st.CipherSuite), st.CurveID)
			}
		})
	}
}

// TestKnativeVarsDocumented: the contract's Knative table (docs/contract.md
// section 9, the one home of that table) gives a row to each of the 27
// variables, and the startup line names each one that is set.
func TestKnativeVarsDocumented(t *testing.T) {
	t.Parallel()
	if got, want := len(knativeEnv), 27; got != want {
		t.Errorf("%d Knative variables, want %d", got, want)
	}
	const doc = "../../docs/contract.md"
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range knativeEnv {
		if !strings.Contains(string(b), "| `"+v.name+"` |") {
			t.Errorf("%s has no table row for %s", doc, v.name)
		}
	}
	all := map[string]string{}
	for _, v := range knativeEnv {
		all[v.name] = "1"
	}
	all["USER_PORT"], all["QUEUE_SERVING_PORT"], all["QUEUE_SERVING_TLS_PORT"] = "8080", "8012", "8112"
	c := Config{Getenv: env(all), Knative: Knative{Notes: []string{"a note"}}}
	var buf testnet.SyncBuffer
	logKnative(slog.New(slog.NewJSONHandler(&buf, nil)), c)
	for _, v := range knativeEnv {
		if !strings.Contains(buf.String(), `"`+v.name+`":`) {
			t.Errorf("the knative environment line lacks %s: %s", v.name, buf.String())
		}
	}
	if !strings.Contains(buf.String(), `"level":"WARN","msg":"a note"`) {
		t.Errorf("no warning for the note: %s", buf.String())
	}
}
