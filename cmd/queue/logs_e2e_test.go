package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
)

// queueProcess runs queue as a child process with env (NAME=value) and
// args, on ports of its own, and returns its listen address and what it
// wrote to stdout and stderr; stop drains it with SIGTERM and waits for
// exit 0.
func queueProcess(t *testing.T, env []string, upstream string) (listen string, stdout, stderr *testnet.SyncBuffer, stop func()) {
	t.Helper()
	listen, admin := freeAddr(t), freeAddr(t)
	cmd := queueCmd(t, "--upstream", upstream, "--listen", listen, "--admin-listen", admin,
		"--stats-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--drain-quiet-period", "0s")
	cmd.Env = append(cmd.Env, env...)
	stdout, stderr = &testnet.SyncBuffer{}, &testnet.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("queue's stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	})
	waitHTTP(t, "http://"+admin+"/ready", http.StatusOK)
	return listen, stdout, stderr, func() {
		t.Helper()
		cmd.Process.Signal(syscall.SIGTERM)
		if code := waitExit(t, cmd, 10*time.Second); code != 0 {
			t.Errorf("exit status %d after SIGTERM, want 0", code)
		}
	}
}

// knativeIdentity is the identity Knative's reconciler gives a revision's
// queue-proxy.
var knativeIdentity = []string{"SERVING_NAMESPACE=default", "SERVING_SERVICE=hello", "SERVING_CONFIGURATION=hello",
	"SERVING_REVISION=hello-00001", "SERVING_POD=hello-00001-deployment-abcde", "SERVING_POD_IP=127.0.0.1"}

// TestKnativeLogSchema starts queue in Knative mode with config-logging's
// zap configuration and checks every line it writes, from start to drain,
// against the schema Knative's queue-proxy writes: zap's keys as the
// configuration names them, its time encoding, the logger queueproxy, the
// caller, and knative.dev/key and knative.dev/pod.
func TestKnativeLogSchema(t *testing.T) {
	t.Parallel()
	iso8601 := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d{4})$`)
	rfc3339Nano := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$`)
	caller := regexp.MustCompile(`^[a-z0-9_]+/[a-z0-9_]+\.go:\d+$`) // dir/file.go:line
	check := func(t *testing.T, line string, fields map[string]any, timeRE *regexp.Regexp, levels string) {
		t.Helper()
		ts, _ := fields["timestamp"].(string)
		sev, _ := fields["severity"].(string)
		msg, _ := fields["message"].(string)
		call, _ := fields["caller"].(string)
		if !timeRE.MatchString(ts) || !strings.Contains(levels, " "+sev+" ") || msg == "" || fields["logger"] != "queueproxy" ||
			!caller.MatchString(call) || fields["knative.dev/key"] != "default/hello-00001" ||
			fields["knative.dev/pod"] != "hello-00001-deployment-abcde" {
			t.Errorf("line out of Knative's schema: %s", line)
		}
	}
	tests := []struct {
		name string
		cfg  string // SERVING_LOGGING_CONFIG
		// stdout: the lines are on stdout (the configuration's outputPaths),
		// else on stderr.
		stdout bool
		parse  func(t *testing.T, line string) map[string]any
		timeRE *regexp.Regexp
		levels string
	}{
		{name: "config-logging's example", cfg: knativeExampleLogging, stdout: true, parse: parseJSONLine, timeRE: iso8601, levels: " debug info warn error "},
		{name: "console", cfg: strings.Replace(knativeExampleLogging, `"encoding": "json"`, `"encoding": "console"`, 1), stdout: true,
			timeRE: iso8601, levels: " debug info warn error ",
			parse: func(t *testing.T, line string) map[string]any {
				// time, level, logger, caller, message, then the fields.
				parts := strings.SplitN(line, "\t", 6)
				if len(parts) != 6 {
					t.Errorf("console line with %d tab-separated parts: %q", len(parts), line)
					return nil
				}
				fields := parseJSONLine(t, parts[5])
				if fields == nil {
					return nil
				}
				fields["timestamp"], fields["severity"], fields["logger"], fields["caller"], fields["message"] = parts[0], parts[1], parts[2], parts[3], parts[4]
				return fields
			}},
		{name: "no zap configuration: Knative's defaults", cfg: "", parse: parseJSONLine, timeRE: rfc3339Nano, levels: " DEBUG INFO WARNING ERROR "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hi")) }))
			env := append([]string{"SERVING_LOGGING_CONFIG=" + tt.cfg, "SERVING_LOGGING_LEVEL=debug"}, knativeIdentity...)
			listen, stdout, stderr, stop := queueProcess(t, env, hostPort(up))
			res, _ := get(t, boundedClient, "http://"+listen+"/", nil)
			if res.StatusCode != http.StatusOK {
				t.Errorf("status %d", res.StatusCode)
			}
			stop()
			logs, other := stderr.String(), stdout.String()
			if tt.stdout {
				logs, other = other, logs
			}
			if other != "" {
				t.Errorf("lines where the configuration sends none: %q", other)
			}
			lines := strings.Split(strings.TrimSuffix(logs, "\n"), "\n")
			var msgs []string
			for _, l := range lines {
				fields := tt.parse(t, l)
				if fields == nil {
					continue
				}
				check(t, l, fields, tt.timeRE, tt.levels)
				msg, _ := fields["message"].(string) // check reports a line without one
				msgs = append(msgs, msg)
			}
			// From start to drain, and a debug line: SERVING_LOGGING_LEVEL.
			for _, want := range []string{"queue starting", "knative environment", "upstream ready", "drained"} {
				found := false
				for _, m := range msgs {
					found = found || strings.HasPrefix(m, want)
				}
				if !found {
					t.Errorf("no line %q among %q", want, msgs)
				}
			}
		})
	}
}

func parseJSONLine(t *testing.T, line string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Errorf("not a JSON line: %q: %v", line, err)
		return nil
	}
	return m
}

// TestProbeRequestLog: the kubelet's and the activator's probes are in the
// request log when OBSERVABILITY_CONFIG's enableProbeRequestLog asks, and
// only then, as Knative's queue-proxy logs them.
func TestProbeRequestLog(t *testing.T) {
	t.Parallel()
	const tmpl = `{{.Request.Header.Get \"User-Agent\"}} {{.Request.URL.Path}} {{.Response.Code}} {{.Response.Size}}`
	tests := []struct {
		name string
		obs  string
		want string
	}{
		{name: "asked", obs: `{"enableRequestLog":true,"enableProbeRequestLog":true,"requestLogTemplate":"` + tmpl + `"}`,
			want: "kube-probe/1.31 /healthz 200 5\nKnative-Activator-Probe / 200 5\nGo-http-client/1.1 /hello 200 2\n"},
		{name: "not asked", obs: `{"enableRequestLog":true,"requestLogTemplate":"` + tmpl + `"}`,
			want: "Go-http-client/1.1 /hello 200 2\n"},
		{name: "asked, with the request log off", obs: `{"enableProbeRequestLog":true,"requestLogTemplate":"` + tmpl + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hi")) }))
			listen, stdout, _, stop := queueProcess(t, []string{"OBSERVABILITY_CONFIG=" + tt.obs}, hostPort(up))
			for _, h := range []map[string]string{
				{"User-Agent": "kube-probe/1.31", "K-Network-Probe": "queue"}, // the kubelet's readiness probe
				{"User-Agent": "Knative-Activator-Probe", "K-Network-Probe": "queue"},
			} {
				path := "/"
				if strings.HasPrefix(h["User-Agent"], "kube-probe") {
					path = "/healthz"
				}
				if res, body := get(t, boundedClient, "http://"+listen+path, h); res.StatusCode != 200 || body != "queue" {
					t.Errorf("probe %v: %d %q", h, res.StatusCode, body)
				}
			}
			if res, _ := get(t, boundedClient, "http://"+listen+"/hello", nil); res.StatusCode != 200 {
				t.Errorf("request: %d", res.StatusCode)
			}
			stop()
			if got := stdout.String(); got != tt.want {
				t.Errorf("request log %q, want %q", got, tt.want)
			}
		})
	}
}
