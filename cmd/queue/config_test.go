package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

func TestParseConfig(t *testing.T) {
	t.Parallel()
	tests := []configCase{{
		name: "defaults",
		args: []string{"--upstream", ":8080"},
		check: func(t *testing.T, c Config) {
			if got, want := c.Upstream, "127.0.0.1:8080"; got != want {
				t.Errorf("Upstream = %q, want %q", got, want)
			}
			if c.Listen != ":8012" || c.TLSListen != ":8112" || c.AdminListen != ":8022" ||
				c.StatsListen != ":9090" || c.MetricsListen != ":9091" {
				t.Errorf("ports = %s %s %s %s %s", c.Listen, c.TLSListen, c.AdminListen, c.StatsListen, c.MetricsListen)
			}
			if c.UpstreamProtocol != "http1" || c.Timeout != 300*time.Second || c.DrainTimeout != 300*time.Second ||
				c.DrainQuietPeriod != 30*time.Second || c.MaxConnections != 10000 || c.Probe != "tcp" ||
				c.LogFormat != "json" || c.LogLevel != "info" {
				t.Errorf("defaults wrong: %+v", c)
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
	os.WriteFile(junk, []byte("not a certificate"), 0o600)
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := queueCmd(t, tt.args...)
			cmd.Env = append(cmd.Env, tt.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
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
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("%s: exit = %v, want status 1; stderr %q", flag, err, stderr.String())
		}
		if !strings.Contains(stderr.String(), ln.Addr().String()) {
			t.Errorf("%s: stderr %q does not name %s", flag, stderr.String(), ln.Addr())
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	out, err := queueCmd(t, "--version").Output()
	if err != nil {
		t.Fatalf("--version: %v", err)
	}
	if s := string(out); !strings.HasPrefix(s, "queue ") || !strings.Contains(s, "commit ") || !strings.Contains(s, "go1.") {
		t.Errorf("--version printed %q, want version, commit and Go version", s)
	}
}
