package main

import (
	"bytes"
	"errors"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// configCase is a configuration to parse and what must hold of the result.
type configCase struct {
	name  string
	args  []string
	env   map[string]string
	check func(t *testing.T, c Config)
}

func runConfigCases(t *testing.T, tests []configCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseConfig(tt.args, env(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

// TestParseConfig: flags, QUEUE_* variables and Knative mode's defaults
// give the Config each case's check describes.
func TestParseConfig(t *testing.T) {
	t.Parallel()
	tests := []configCase{{
		name: "defaults",
		args: []string{"--upstream", ":8080"},
		check: func(t *testing.T, c Config) {
			if got, want := c.Upstream, "127.0.0.1:8080"; got != want {
				t.Errorf("Upstream = %q, want %q", got, want)
			}
			// Standalone: the Stat off Prometheus' 9090, on loopback.
			if c.Listen != ":8012" || c.TLSListen != ":8112" || c.AdminListen != ":8022" ||
				c.StatsListen != "127.0.0.1:8023" || c.MetricsListen != ":9091" {
				t.Errorf("ports = %s %s %s %s %s", c.Listen, c.TLSListen, c.AdminListen, c.StatsListen, c.MetricsListen)
			}
			if c.UpstreamProtocol != "http1" || c.Timeout != 300*time.Second || c.DrainTimeout != 300*time.Second ||
				c.DrainQuietPeriod != 0 || c.MaxConnections != 10000 || c.Probe != "tcp" ||
				c.UpstreamRetryWindow != 3*time.Second ||
				c.LogFormat != "json" || c.LogLevel != "info" || c.KnativeMode {
				t.Errorf("defaults wrong: %+v", c)
			}
		},
	}, {
		name: "HTTP/3: on standalone, off in Knative mode unless asked, off when asked",
		args: []string{"--upstream", ":8080"},
		check: func(t *testing.T, c Config) {
			if !c.HTTP3 {
				t.Error("standalone: HTTP3 off, want on")
			}
			kn := func(env map[string]string, args ...string) bool {
				t.Helper()
				c, err := parseConfig(args, func(k string) string { return env[k] })
				if err != nil {
					t.Fatal(err)
				}
				return c.HTTP3
			}
			base := map[string]string{"USER_PORT": "8080", "SERVING_REVISION": "svc-00001"}
			if kn(base) {
				t.Error("Knative mode: HTTP3 on, want off")
			}
			if !kn(map[string]string{"USER_PORT": "8080", "SERVING_REVISION": "svc-00001", "QUEUE_HTTP3": "true"}) {
				t.Error("Knative mode with QUEUE_HTTP3=true: HTTP3 off, want on")
			}
			if kn(map[string]string{"QUEUE_HTTP3": "false"}, "--upstream", ":8080") || kn(nil, "--upstream", ":8080", "--http3=false") {
				t.Error("QUEUE_HTTP3=false or --http3=false: HTTP3 on, want off")
			}
		},
	}, {
		name: "Knative mode keeps Knative's defaults",
		env:  map[string]string{"USER_PORT": "8080", "SERVING_REVISION": "svc-00001"},
		check: func(t *testing.T, c Config) {
			if !c.KnativeMode {
				t.Errorf("SERVING_REVISION set but not in Knative mode")
			}
			if got, want := c.StatsListen, ":9090"; got != want {
				t.Errorf("StatsListen = %q, want %q (the autoscaler scrapes it)", got, want)
			}
			if got, want := c.DrainQuietPeriod, 30*time.Second; got != want {
				t.Errorf("DrainQuietPeriod = %v, want %v", got, want)
			}
			if c.MetricsListen != ":9091" || c.AdminListen != ":8022" {
				t.Errorf("ports %s %s, want :9091 :8022", c.MetricsListen, c.AdminListen)
			}
		},
	}, {
		name: "flags win over Knative mode's defaults",
		args: []string{"--stats-listen", "127.0.0.1:9999", "--drain-quiet-period", "2s"},
		env:  map[string]string{"USER_PORT": "8080", "SERVING_REVISION": "svc-00001"},
		check: func(t *testing.T, c Config) {
			if c.StatsListen != "127.0.0.1:9999" || c.DrainQuietPeriod != 2*time.Second {
				t.Errorf("stats %s quiet %v, want the flags'", c.StatsListen, c.DrainQuietPeriod)
			}
		},
	}, {
		name: "USER_PORT alone is standalone",
		env:  map[string]string{"USER_PORT": "8080"},
		check: func(t *testing.T, c Config) {
			if c.KnativeMode || c.StatsListen != "127.0.0.1:8023" || c.DrainQuietPeriod != 0 {
				t.Errorf("mode %v stats %s quiet %v, want standalone defaults", c.KnativeMode, c.StatsListen, c.DrainQuietPeriod)
			}
		},
	}, {
		name: "one port on two distinct addresses",
		args: []string{"--upstream", ":8080", "--listen", "127.0.0.1:7000", "--admin-listen", "[::1]:7000",
			"--stats-listen", "127.0.0.2:7000", "--metrics-listen", "127.0.0.1:0"},
		check: func(t *testing.T, c Config) {
			if c.Listen != "127.0.0.1:7000" || c.AdminListen != "[::1]:7000" || c.StatsListen != "127.0.0.2:7000" {
				t.Errorf("listeners %s %s %s", c.Listen, c.AdminListen, c.StatsListen)
			}
		},
	}, {
		name: "an upstream in another container on queue's port",
		args: []string{"--upstream", "app:8012"},
		check: func(t *testing.T, c Config) {
			if c.Upstream != "app:8012" || c.Listen != ":8012" {
				t.Errorf("upstream %s listen %s", c.Upstream, c.Listen)
			}
		},
	}, {
		name: "port 0 twice",
		args: []string{"--upstream", ":8080", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"},
		check: func(t *testing.T, c Config) {
			if c.Listen != "127.0.0.1:0" || c.AdminListen != "127.0.0.1:0" {
				t.Errorf("listeners %s %s", c.Listen, c.AdminListen)
			}
		},
	}, {
		name: "the TLS port is free while TLS is off",
		args: []string{"--upstream", ":8080", "--listen", ":8112"},
		check: func(t *testing.T, c Config) {
			if c.Listen != ":8112" {
				t.Errorf("Listen = %s", c.Listen)
			}
		},
	}, {
		name: "Knative's TLS port without a certificate",
		env:  map[string]string{"USER_PORT": "8080", "SERVING_REVISION": "r", "QUEUE_SERVING_TLS_PORT": "8112"},
		check: func(t *testing.T, c Config) {
			if c.TLSCert != "" || c.TLSListen != ":8112" {
				t.Errorf("TLS %q on %s, want off", c.TLSCert, c.TLSListen)
			}
		},
	}, {
		name: "queue depth with a concurrency limit",
		args: []string{"--upstream", ":8080", "--concurrency", "2", "--queue-depth", "0"},
		check: func(t *testing.T, c Config) {
			if c.Concurrency != 2 || c.QueueDepth != 0 {
				t.Errorf("concurrency %d depth %d", c.Concurrency, c.QueueDepth)
			}
		},
	}, {
		name: "response start timeout within the timeout, or with none",
		args: []string{"--upstream", ":8080", "--timeout", "0", "--response-start-timeout", "1h", "--idle-timeout", "2h"},
		check: func(t *testing.T, c Config) {
			if c.Timeout != 0 || c.ResponseStartTimeout != time.Hour || c.IdleTimeout != 2*time.Hour {
				t.Errorf("timeouts %v %v %v", c.Timeout, c.ResponseStartTimeout, c.IdleTimeout)
			}
		},
	}, {
		name: "Knative's own timeouts are taken as they come",
		env:  map[string]string{"USER_PORT": "8080", "REVISION_TIMEOUT_SECONDS": "60", "REVISION_IDLE_TIMEOUT_SECONDS": "120"},
		check: func(t *testing.T, c Config) {
			if c.Timeout != time.Minute || c.IdleTimeout != 2*time.Minute {
				t.Errorf("timeouts %v %v", c.Timeout, c.IdleTimeout)
			}
		},
	}, {
		name: "a sample rate with tracing on",
		args: []string{"--upstream", ":8080", "--trace-sample-rate", "0.5"},
		env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
		check: func(t *testing.T, c Config) {
			if c.TraceSampleRate != 0.5 {
				t.Errorf("TraceSampleRate = %v", c.TraceSampleRate)
			}
		},
	}, {
		name: "environment fills what flags leave",
		args: []string{"--upstream", "[::1]:9000"},
		env:  map[string]string{"QUEUE_DRAIN_QUIET_PERIOD": "5s", "QUEUE_CONCURRENCY": "4", "QUEUE_ACCESS_LOG": "true"},
		check: func(t *testing.T, c Config) {
			if c.Upstream != "[::1]:9000" || c.DrainQuietPeriod != 5*time.Second || c.Concurrency != 4 ||
				c.QueueDepth != 40 || !c.AccessLog {
				t.Errorf("got %+v", c)
			}
		},
	}, {
		name: "flag wins over environment",
		args: []string{"--upstream", ":1", "--timeout", "7s"},
		env:  map[string]string{"QUEUE_TIMEOUT": "9s", "QUEUE_UPSTREAM": ":2"},
		check: func(t *testing.T, c Config) {
			if c.Timeout != 7*time.Second || c.Upstream != "127.0.0.1:1" {
				t.Errorf("Timeout = %v, Upstream = %s", c.Timeout, c.Upstream)
			}
			if c.DrainTimeout != 7*time.Second {
				t.Errorf("DrainTimeout = %v, want --timeout", c.DrainTimeout)
			}
		},
	}, {
		name: "upstream retry window from the environment",
		args: []string{"--upstream", ":8080"},
		env:  map[string]string{"QUEUE_UPSTREAM_RETRY_WINDOW": "500ms"},
		check: func(t *testing.T, c Config) {
			if got, want := c.UpstreamRetryWindow, 500*time.Millisecond; got != want {
				t.Errorf("UpstreamRetryWindow = %v, want %v", got, want)
			}
		},
	}, {
		name: "no upstream retry window",
		args: []string{"--upstream", ":8080", "--upstream-retry-window", "0"},
		env:  map[string]string{"QUEUE_UPSTREAM_RETRY_WINDOW": "500ms"},
		check: func(t *testing.T, c Config) {
			if c.UpstreamRetryWindow != 0 {
				t.Errorf("UpstreamRetryWindow = %v, want 0: the flag wins", c.UpstreamRetryWindow)
			}
		},
	}, {
		name: "upstream from the environment",
		env:  map[string]string{"QUEUE_UPSTREAM": "localhost:81", "QUEUE_UPSTREAM_PROTOCOL": "h2c"},
		check: func(t *testing.T, c Config) {
			if c.Upstream != "localhost:81" || c.UpstreamProtocol != "h2c" {
				t.Errorf("got %s %s", c.Upstream, c.UpstreamProtocol)
			}
		},
	}}
	runConfigCases(t, tests)
}

// TestConfigErrors runs the real command: bad configuration exits 2 with
// one line on stderr naming the flag or variable and the form expected.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	ports := []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--tls-listen", "127.0.0.1:0",
		"--stats-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}
	tests := []struct {
		name string
		args []string
		env  []string
		want []string // substrings of the one stderr line
	}{
		{"unknown flag", []string{"--upstream", ":8080", "--bogus"}, nil, []string{"--bogus"}},
		{"missing upstream", nil, nil, []string{"--upstream", "QUEUE_UPSTREAM", "host:port"}},
		{"bad upstream", []string{"--upstream", "http://x"}, nil, []string{"--upstream", "host:port"}},
		{"upstream port 0", []string{"--upstream", ":0"}, nil, []string{"--upstream", "port"}},
		{"bad duration", []string{"--upstream", ":8080", "--timeout", "ten"}, nil, []string{"--timeout", "duration"}},
		{"negative duration", []string{"--upstream", ":8080", "--idle-timeout", "-1s"}, nil, []string{"--idle-timeout", "duration"}},
		{"bad duration in env", []string{"--upstream", ":8080"}, []string{"QUEUE_DRAIN_TIMEOUT=5"}, []string{"QUEUE_DRAIN_TIMEOUT", "duration"}},
		{"bad protocol", []string{"--upstream", ":8080", "--upstream-protocol", "h3"}, nil, []string{"--upstream-protocol", "http1, h2c"}},
		{"bad number", []string{"--upstream", ":8080", "--concurrency", "-2"}, nil, []string{"--concurrency", "number"}},
		{"bad probe", []string{"--upstream", ":8080", "--probe", "exec"}, nil, []string{"--probe", "tcp"}},
		{"bad cidr", []string{"--upstream", ":8080", "--trusted-proxies", "10.0.0.0/99"}, nil, []string{"--trusted-proxies", "CIDR"}},
		{"bad rate", []string{"--upstream", ":8080", "--trace-sample-rate", "2"}, nil, []string{"--trace-sample-rate", "0 to 1"}},
		{"bad log format", []string{"--upstream", ":8080", "--log-format", "xml"}, nil, []string{"--log-format", "json"}},
		{"cert without key", []string{"--upstream", ":8080", "--tls-cert", junk}, nil, []string{"--tls-cert", "--tls-key"}},
		{"unreadable cert", append([]string{"--upstream", ":8080", "--tls-cert", filepath.Join(dir, "none.pem"), "--tls-key", junk}, ports...), nil, []string{"--tls-cert", "PEM"}},
		{"junk cert", append([]string{"--upstream", ":8080", "--tls-cert", junk, "--tls-key", junk}, ports...), nil, []string{"--tls-cert", "PEM"}},
		{"stray argument", []string{"--upstream", ":8080", "extra"}, nil, []string{"extra"}},
		{"no connections", []string{"--upstream", ":8080", "--max-connections", "0"}, nil, []string{"--max-connections", "positive"}},
		// Combinations in which a setting would be silently ignored, or
		// cannot work.
		{"two listeners on one port", []string{"--upstream", ":8080", "--listen", ":7000", "--admin-listen", "127.0.0.1:7000"}, nil,
			[]string{"--listen :7000", "--admin-listen 127.0.0.1:7000", "port 7000"}},
		{"two listeners on all addresses", []string{"--upstream", ":8080", "--listen", "0.0.0.0:7000", "--metrics-listen", "[::]:7000"}, nil,
			[]string{"--listen", "--metrics-listen", "port 7000"}},
		{"a listener on a default port", []string{"--upstream", ":8080", "--admin-listen", ":9091"}, nil,
			[]string{"--metrics-listen :9091 (the default)", "--admin-listen :9091"}},
		{"a listener on localhost and loopback", []string{"--upstream", ":8080", "--listen", "localhost:7000", "--stats-listen", "127.0.0.1:7000"}, nil,
			[]string{"--listen", "--stats-listen", "port 7000"}},
		{"two listeners on one port from the environment", []string{"--upstream", ":8080"}, []string{"QUEUE_STATS_LISTEN=:8012"},
			[]string{"QUEUE_STATS_LISTEN :8012", "--listen :8012"}},
		{"TLS on the serving port", []string{"--upstream", ":8080", "--tls-cert", junk, "--tls-key", junk, "--tls-listen", ":8012"}, nil,
			[]string{"--listen", "--tls-listen", "port 8012"}},
		{"upstream is queue itself", []string{"--upstream", ":8012"}, nil, []string{"--upstream 127.0.0.1:8012", "--listen :8012"}},
		{"Knative's profiling port on the admin port", nil, []string{"USER_PORT=8080", "QUEUE_ADMIN_LISTEN=:8008", `OBSERVABILITY_CONFIG={"runtime":{"profiling":"enabled"}}`},
			[]string{"QUEUE_ADMIN_LISTEN :8008", "OBSERVABILITY_CONFIG (:8008)", "port 8008"}},
		{"upstream is queue's admin port", []string{"--upstream", "localhost:7000", "--admin-listen", "127.0.0.1:7000"}, nil,
			[]string{"--upstream localhost:7000", "--admin-listen 127.0.0.1:7000"}},
		{"queue depth without concurrency", []string{"--upstream", ":8080", "--queue-depth", "5"}, nil, []string{"--queue-depth", "--concurrency"}},
		{"queue depth without concurrency, from the environment", []string{"--upstream", ":8080"}, []string{"QUEUE_QUEUE_DEPTH=5"},
			[]string{"QUEUE_QUEUE_DEPTH", "--concurrency"}},
		{"key without cert", []string{"--upstream", ":8080", "--tls-key", junk}, nil, []string{"--tls-cert", "--tls-key"}},
		{"TLS port without a certificate", []string{"--upstream", ":8080", "--tls-listen", ":8443"}, nil, []string{"--tls-listen", "--tls-cert"}},
		{"certificate and Knative's directory", []string{"--upstream", ":8080", "--tls-cert", junk, "--tls-key", junk, "--knative-cert-dir", dir}, nil,
			[]string{"--knative-cert-dir", "--tls-cert"}},
		{"probe period without a probe", []string{"--upstream", ":8080", "--probe", "none", "--probe-period", "5s"}, nil,
			[]string{"--probe-period", "--probe none"}},
		{"response start timeout past the timeout", []string{"--upstream", ":8080", "--timeout", "30s", "--response-start-timeout", "1m"}, nil,
			[]string{"--response-start-timeout 60s", "--timeout 30s"}},
		{"idle timeout past Knative's timeout", []string{"--idle-timeout", "2m"}, []string{"USER_PORT=8080", "REVISION_TIMEOUT_SECONDS=60"},
			[]string{"--idle-timeout 120s", "REVISION_TIMEOUT_SECONDS (60s)"}},
		{"sample rate with tracing off", []string{"--upstream", ":8080", "--trace-sample-rate", "0.1"}, nil,
			[]string{"--trace-sample-rate", "OTEL_EXPORTER_OTLP_ENDPOINT"}},
		{"sample rate and OpenTelemetry's sampler", []string{"--upstream", ":8080", "--trace-sample-rate", "0.1"},
			[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_TRACES_SAMPLER=always_on"}, []string{"--trace-sample-rate", "OTEL_TRACES_SAMPLER"}},
		{"demo with an upstream", []string{"demo", "--upstream", ":8080"}, nil, []string{"demo", "--upstream"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := queueCmd(t, tt.args...)
			cmd.Env = append(cmd.Env, tt.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := runCmd(t, cmd, childTimeout) // a configuration taken by mistake would serve forever
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit = %v, want status 2; stderr %q", err, stderr.String())
			}
			out := stderr.String()
			if n := strings.Count(out, "\n"); n != 1 {
				t.Errorf("stderr has %d lines, want 1: %q", n, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("stderr %q does not mention %q", out, w)
				}
			}
		})
	}
}

// TestPortInUse: a taken port exits 1 and names the address.
func TestPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, flag := range []string{"--listen", "--admin-listen"} {
		args := map[string]string{"--listen": "127.0.0.1:0", "--admin-listen": "127.0.0.1:0"}
		args[flag] = ln.Addr().String()
		cmd := queueCmd(t, "--upstream", ":8080", "--listen", args["--listen"], "--admin-listen", args["--admin-listen"],
			"--stats-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := runCmd(t, cmd, childTimeout) // a port taken by mistake would serve forever
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("%s: exit = %v, want status 1; stderr %q", flag, err, stderr.String())
		}
		if !strings.Contains(stderr.String(), ln.Addr().String()) {
			t.Errorf("%s: stderr %q does not name %s", flag, stderr.String(), ln.Addr())
		}
	}
}

// TestVersion: --version prints queue's version, commit and Go version.
func TestVersion(t *testing.T) {
	t.Parallel()
	cmd := queueCmd(t, "--version")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := runCmd(t, cmd, childTimeout); err != nil {
		t.Fatalf("--version: %v", err)
	}
	if s := out.String(); !strings.HasPrefix(s, "queue ") || !strings.Contains(s, "commit ") || !strings.Contains(s, "go1.") {
		t.Errorf("--version printed %q, want version, commit and Go version", s)
	}
}

// TestHelp: --help lists every flag defined on the FlagSet, on its own
// line with its QUEUE_* variable, then its meaning; and the signals and
// exit codes. It is made from the FlagSet, so this guards the generator.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--help", "-h", "-help"} {
		t.Run(arg, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			if got, want := run([]string{arg}, env(nil), &stdout, &stderr), 0; got != want {
				t.Fatalf("%s exit status %d, want %d; stderr %q", arg, got, want, stderr.String())
			}
			help := stdout.String()
			lines := strings.Split(help, "\n")
			var c Config
			var u unset
			n := 0
			newFlagSet(&c, &u).VisitAll(func(f *flag.Flag) {
				n++
				_, meaning := flag.UnquoteUsage(f)
				i := slices.IndexFunc(lines, func(l string) bool {
					return strings.HasPrefix(l, "  --"+f.Name+" ") || l == "  --"+f.Name
				})
				if i < 0 {
					t.Errorf("--help has no line for --%s", f.Name)
					return
				}
				if !strings.Contains(lines[i], envName(f.Name)) {
					t.Errorf("--help line %q lacks %s", lines[i], envName(f.Name))
				}
				if meaning == "" || i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != meaning {
					t.Errorf("--help: --%s is not followed by its meaning %q", f.Name, meaning)
				}
			})
			if n < 28 {
				t.Errorf("the FlagSet has %d flags, want at least 28", n)
			}
			for _, want := range []string{
				"127.0.0.1:8023; Knative mode: :9090", // both modes' defaults
				"default 0s; Knative mode: 30s",
				"QUEUE_TIMEOUT (Knative: REVISION_TIMEOUT_SECONDS), default 300s",
				"QUEUE_UPSTREAM (Knative: USER_PORT), required",
				"SIGTERM", "SIGINT", "second SIGTERM or SIGINT", "SERVING_REVISION",
				"0  drained", "1  a runtime failure", "2  a configuration error",
			} {
				if !strings.Contains(help, want) {
					t.Errorf("--help lacks %q", want)
				}
			}
		})
	}
}
