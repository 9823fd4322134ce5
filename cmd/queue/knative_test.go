package main

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestLogLabels: the revision labels are on every log line.
func TestLogLabels(t *testing.T) {
	t.Parallel()
	c, err := parseConfig(nil, env(map[string]string{"USER_PORT": "8080", "SERVING_NAMESPACE": "ns",
		"SERVING_REVISION": "r1", "SERVING_POD": "p1", "SERVING_SERVICE": "s", "SERVING_CONFIGURATION": "c"}))
	if err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	newLogger(c, &buf).Info("hello")
	for _, want := range []string{`"component":"queue"`, `"namespace":"ns"`, `"service":"s"`, `"configuration":"c"`, `"revision":"r1"`, `"pod":"p1"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log line %s lacks %s", buf.String(), want)
		}
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
	out, err := cmd.CombinedOutput()
	var ee interface{ ExitCode() int }
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "SERVING_READINESS_PROBE") || strings.Count(string(out), "\n") != 1 {
		t.Errorf("malformed SERVING_READINESS_PROBE: %v %q, want exit 2 and one line naming it", err, out)
	}
}
