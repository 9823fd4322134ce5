package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/slogtest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/queue-dev/queue/internal/testnet"
)

// knativeExampleLogging is zap-logger-config from the example block of
// Knative Serving's config/core/configmaps/logging.yaml (v0.50): what an
// operator who copies it into config-logging sends as
// SERVING_LOGGING_CONFIG.
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

// logTime is the time of every record in these tests: 1767323045123456789
// nanoseconds after the epoch.
var logTime = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

// knativeFields are the fields Knative's queue-proxy adds to every line.
var knativeFields = []slog.Attr{slog.String("knative.dev/key", "ns/rev"), slog.String("knative.dev/pod", "pod")}

// zapTestHandler builds the handler for cfg (SERVING_LOGGING_CONFIG) writing
// to out, whatever its output paths say.
func zapTestHandler(t testing.TB, cfg string, out io.Writer) *zapHandler {
	t.Helper()
	c, err := parseZapConfig(cfg)
	if err != nil {
		t.Fatalf("parseZapConfig: %v", err)
	}
	c.OutputPaths, c.ErrorOutputPaths = []string{"stdout"}, []string{"stderr"}
	h, err := newZapHandler(c, c.Level, knativeLoggerName, knativeFields, out, out)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// stringer is a fmt.Stringer for the Any encodings.
type stringer struct{}

func (stringer) String() string { return "str" }

// TestZapEncodings: what the handler writes for each of zap's encoder
// settings, the lines written by hand from zap's documented encoders
// (zapcore's EncoderConfig, JSON and console encoders, v1.28) over
// Knative's defaults (zapdriver's production configuration).
func TestZapEncodings(t *testing.T) {
	t.Parallel()
	const kn = `"knative.dev/key":"ns/rev","knative.dev/pod":"pod"`
	tests := []struct {
		name  string
		cfg   string
		level slog.Level
		msg   string
		attrs []slog.Attr
		group string // WithGroup before the attrs
		want  string
	}{
		{name: "Knative's example config-logging", cfg: knativeExampleLogging, msg: "hello", attrs: []slog.Attr{slog.Int("n", 1)},
			want: `{"severity":"info","timestamp":"2026-01-02T03:04:05.123Z","logger":"queueproxy","message":"hello",` + kn + `,"n":1}` + "\n"},
		{name: "no configuration: Knative's defaults", cfg: "", level: slog.LevelWarn, msg: "w",
			want: `{"severity":"WARNING","timestamp":"2026-01-02T03:04:05.123456789Z","logger":"queueproxy","message":"w",` + kn + "}\n"},
		{name: "an unnamed key keeps Knative's default", cfg: `{"encoderConfig":{"timeEncoder":"rfc3339"}}`, level: slog.LevelWarn, msg: "e",
			want: `{"severity":"WARNING","timestamp":"2026-01-02T03:04:05Z","logger":"queueproxy","message":"e",` + kn + "}\n"},
		{name: "time epoch seconds, zap's fallback for an empty name", cfg: `{"encoderConfig":{"timeEncoder":""}}`, msg: "m",
			want: `{"severity":"INFO","timestamp":1767323045.1234567,"logger":"queueproxy","message":"m",` + kn + "}\n"},
		{name: "time millis", cfg: `{"encoderConfig":{"timeEncoder":"millis"}}`, msg: "m",
			want: `{"severity":"INFO","timestamp":1767323045123.4568,"logger":"queueproxy","message":"m",` + kn + "}\n"},
		{name: "time nanos", cfg: `{"encoderConfig":{"timeEncoder":"nanos"}}`, msg: "m",
			want: `{"severity":"INFO","timestamp":1767323045123456789,"logger":"queueproxy","message":"m",` + kn + "}\n"},
		{name: "time RFC3339Nano", cfg: `{"encoderConfig":{"timeEncoder":"RFC3339Nano"}}`, msg: "m",
			want: `{"severity":"INFO","timestamp":"2026-01-02T03:04:05.123456789Z","logger":"queueproxy","message":"m",` + kn + "}\n"},
		{name: "time ISO8601", cfg: `{"encoderConfig":{"timeEncoder":"ISO8601"}}`, msg: "m",
			want: `{"severity":"INFO","timestamp":"2026-01-02T03:04:05.123Z","logger":"queueproxy","message":"m",` + kn + "}\n"},
		{name: "time layout", cfg: `{"encoderConfig":{"timeEncoder":{"layout":"06/01/02 03:04pm"}}}`, msg: "m",
			want: `{"severity":"INFO","timestamp":"26/01/02 03:04am","logger":"queueproxy","message":"m",` + kn + "}\n"},
		{name: "level lowercase for an empty name", cfg: `{"encoderConfig":{"levelEncoder":""}}`, level: slog.LevelWarn, msg: "m",
			want: `{"severity":"warn","timestamp":"2026-01-02T03:04:05.123456789Z","logger":"queueproxy","message":"m",` + kn + "}\n"},
		{name: "level capital", cfg: `{"encoderConfig":{"levelEncoder":"capital"}}`, level: slog.LevelWarn, msg: "m",
			want: `{"severity":"WARN","timestamp":"2026-01-02T03:04:05.123456789Z","logger":"queueproxy","message":"m",` + kn + "}\n"},
		{name: "level color: escaped in JSON", cfg: `{"level":"debug","encoderConfig":{"levelEncoder":"color"}}`, level: slog.LevelDebug, msg: "m",
			want: `{"severity":"\u001b[35mdebug\u001b[0m","timestamp":"2026-01-02T03:04:05.123456789Z","logger":"queueproxy","message":"m",` + kn + "}\n"},
		{name: "level capitalColor", cfg: `{"level":"debug","encoderConfig":{"levelEncoder":"capitalColor"}}`, level: slog.LevelInfo, msg: "m",
			want: `{"severity":"\u001b[34mINFO\u001b[0m","timestamp":"2026-01-02T03:04:05.123456789Z","logger":"queueproxy","message":"m",` + kn + "}\n"},
		{name: "durations as strings by default", cfg: "", msg: "m", attrs: []slog.Attr{slog.Duration("d", 1500*time.Millisecond)},
			want: `{"severity":"INFO","timestamp":"2026-01-02T03:04:05.123456789Z","logger":"queueproxy","message":"m",` + kn + `,"d":"1.5s"}` + "\n"},
		{name: "durations in seconds for an empty name", cfg: `{"encoderConfig":{"durationEncoder":""}}`, msg: "m", attrs: []slog.Attr{slog.Duration("d", 1500*time.Millisecond)},
			want: `{"severity":"INFO","timestamp":"2026-01-02T03:04:05.123456789Z","logger":"queueproxy","message":"m",` + kn + `,"d":1.5}` + "\n"},
		{name: "durations nanos", cfg: `{"encoderConfig":{"durationEncoder":"nanos"}}`, msg: "m", attrs: []slog.Attr{slog.Duration("d", 1500*time.Millisecond)},
			want: `{"severity":"INFO","timestamp":"2026-01-02T03:04:05.123456789Z","logger":"queueproxy","message":"m",` + kn + `,"d":1500000000}` + "\n"},
		{name: "durations ms", cfg: `{"encoderConfig":{"durationEncoder":"ms"}}`, msg: "m", attrs: []slog.Attr{slog.Duration("d", 1500*time.Millisecond)},
			want: `{"severity":"INFO","timestamp":"2026-01-02T03:04:05.123456789Z","logger":"queueproxy","message":"m",` + kn + `,"d":1500}` + "\n"},
		{name: "empty keys leave their parts out", cfg: `{"encoderConfig":{"timeKey":"","levelKey":"","nameKey":"","messageKey":""}}`, msg: "m",
			want: `{` + kn + "}\n"},
		{name: `"-" is a key like any other, as in zap`, cfg: `{"encoderConfig":{"timeKey":"-","levelKey":"level","nameKey":"-","messageKey":"msg"}}`, msg: "m",
			want: `{"level":"INFO","-":"2026-01-02T03:04:05.123456789Z","-":"queueproxy","msg":"m",` + kn + "}\n"},
		{name: "line ending", cfg: `{"encoderConfig":{"lineEnding":"\r\n","timeKey":""}}`, msg: "m",
			want: `{"severity":"INFO","logger":"queueproxy","message":"m",` + kn + "}\r\n"},
		{name: "no line ending", cfg: `{"encoderConfig":{"skipLineEnding":true,"timeKey":""}}`, msg: "m",
			want: `{"severity":"INFO","logger":"queueproxy","message":"m",` + kn + "}"},
		{name: "zap's escaping: no HTML, invalid UTF-8 replaced", cfg: `{"encoderConfig":{"timeKey":""}}`, msg: "a\"b\\c\nd\te\x01f\xffg<&>\u2028é",
			want: `{"severity":"INFO","logger":"queueproxy","message":"a\"b\\c\nd\te\u0001f\ufffdg<&>` + "\u2028" + `é",` + kn + "}\n"},
		{name: "values", cfg: `{"encoderConfig":{"timeKey":"","timeEncoder":"iso8601"}}`, msg: "m", attrs: []slog.Attr{
			slog.Uint64("u", 7), slog.Float64("f", 0.25), slog.Float64("nan", math.NaN()), slog.Float64("inf", math.Inf(-1)),
			slog.Float64("big", 1e21), slog.Bool("ok", true), slog.Time("at", logTime), slog.Any("err", errors.New("boom")),
			slog.Any("s", stringer{}), slog.Any("nil", nil), slog.Any("list", []int{1, 2}), slog.Any("bytes", []byte("hi"))},
			want: `{"severity":"INFO","logger":"queueproxy","message":"m",` + kn + `,"u":7,"f":0.25,"nan":"NaN","inf":"-Inf",` +
				`"big":1000000000000000000000,"ok":true,"at":"2026-01-02T03:04:05.123Z","err":"boom","s":"str","nil":null,"list":[1,2],"bytes":"aGk="}` + "\n"},
		{name: "groups nest; an empty one is left out", cfg: `{"encoderConfig":{"timeKey":""}}`, msg: "m", attrs: []slog.Attr{
			slog.Group("config", slog.String("mode", "knative"), slog.Group("inner", slog.Int("n", 1))), slog.Group("none"),
			slog.Group("", slog.Int("inline", 2))},
			want: `{"severity":"INFO","logger":"queueproxy","message":"m",` + kn + `,"config":{"mode":"knative","inner":{"n":1}},"inline":2}` + "\n"},
		{name: "WithGroup is zap's namespace", cfg: `{"encoderConfig":{"timeKey":""}}`, msg: "m", group: "req", attrs: []slog.Attr{slog.Int("n", 1)},
			want: `{"severity":"INFO","logger":"queueproxy","message":"m",` + kn + `,"req":{"n":1}}` + "\n"},
		{name: "a namespace without fields is left out", cfg: `{"encoderConfig":{"timeKey":""}}`, msg: "m", group: "req",
			want: `{"severity":"INFO","logger":"queueproxy","message":"m",` + kn + "}\n"},
		{name: "initialFields, sorted, before Knative's", cfg: `{"encoderConfig":{"timeKey":""},"initialFields":{"z":"last","a":1,"m":{"k":[true,null]}}}`, msg: "m",
			want: `{"severity":"INFO","logger":"queueproxy","message":"m","a":1,"m":{"k":[true,null]},"z":"last",` + kn + "}\n"},
		{name: "console: tab-separated, the fields spaced JSON", cfg: `{"encoding":"console","encoderConfig":{"timeEncoder":"iso8601"}}`, msg: "hello world",
			attrs: []slog.Attr{slog.Int("n", 1), slog.Group("g", slog.String("a", "b"))},
			want:  "2026-01-02T03:04:05.123Z\tINFO\tqueueproxy\thello world\t" + `{"knative.dev/key": "ns/rev", "knative.dev/pod": "pod", "n": 1, "g": {"a": "b"}}` + "\n"},
		{name: "console: epoch time as %v prints it, message unescaped", cfg: `{"encoding":"console","encoderConfig":{"timeEncoder":"","levelEncoder":"","consoleSeparator":" | "}}`, msg: "a\"b",
			want: "1.7673230451234567e+09 | info | queueproxy | a\"b | " + `{"knative.dev/key": "ns/rev", "knative.dev/pod": "pod"}` + "\n"},
		{name: "console: no message key, no name key", cfg: `{"encoding":"console","encoderConfig":{"messageKey":"","nameKey":"","timeKey":""}}`, msg: "m",
			want: "INFO\t" + `{"knative.dev/key": "ns/rev", "knative.dev/pod": "pod"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			var h slog.Handler = zapTestHandler(t, tt.cfg, &buf)
			if tt.group != "" {
				h = h.WithGroup(tt.group)
			}
			r := slog.NewRecord(logTime, tt.level, tt.msg, 0)
			r.AddAttrs(tt.attrs...)
			if !h.Enabled(context.Background(), tt.level) {
				t.Fatalf("level %v not enabled", tt.level)
			}
			if err := h.Handle(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != tt.want {
				t.Errorf("line\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestZapLevels: the configuration's level, SERVING_LOGGING_LEVEL over it,
// --log-level over both; zap's levels above error keep queue silent.
func TestZapLevels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want slog.Level // the lowest level logged
	}{
		{name: "Knative's default: info", want: slog.LevelInfo},
		{name: "the configuration's", env: map[string]string{"SERVING_LOGGING_CONFIG": `{"level":"WARNING"}`}, want: slog.LevelWarn},
		{name: "SERVING_LOGGING_LEVEL wins", env: map[string]string{"SERVING_LOGGING_CONFIG": `{"level":"error"}`, "SERVING_LOGGING_LEVEL": "debug"}, want: slog.LevelDebug},
		{name: "--log-level wins over both", args: []string{"--log-level", "warn"}, env: map[string]string{"SERVING_LOGGING_CONFIG": `{"level":"error"}`, "SERVING_LOGGING_LEVEL": "debug"}, want: slog.LevelWarn},
		{name: "fatal: nothing queue logs", env: map[string]string{"SERVING_LOGGING_LEVEL": "fatal"}, want: slog.Level(20)},
		{name: "a refused configuration: info, or SERVING_LOGGING_LEVEL", env: map[string]string{"SERVING_LOGGING_CONFIG": `{"level":"loud"}`, "SERVING_LOGGING_LEVEL": "error"}, want: slog.LevelError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := map[string]string{"USER_PORT": "8080", "SERVING_REVISION": "rev"}
			for k, v := range tt.env {
				e[k] = v
			}
			c, err := parseConfig(tt.args, env(e))
			if err != nil {
				t.Fatal(err)
			}
			h := newLogger(c, io.Discard).Handler()
			for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
				if got, want := h.Enabled(context.Background(), l), l >= tt.want; got != want {
					t.Errorf("Enabled(%v) = %v, want %v", l, got, want)
				}
			}
		})
	}
}

// TestZapFallback: a configuration zap would not build leaves, as in
// Knative, Knative's defaults on stderr, the name fallback-logger.queueproxy
// and a warning that says why; queue starts all the same.
func TestZapFallback(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name, cfg, why string
	}{
		{"not JSON", `level: info`, "invalid character"},
		{"unknown level", `{"level":"loud"}`, "unrecognized level"},
		{"unknown encoding", `{"encoding":"logfmt"}`, `no encoder registered for name "logfmt"`},
		{"unknown sink", `{"outputPaths":["syslog://localhost"]}`, `no sink found for scheme "syslog"`},
		{"unwritable file", `{"outputPaths":["` + filepath.Join(dir, "none", "log") + `"]}`, "no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseConfig(nil, env(map[string]string{"USER_PORT": "8080", "SERVING_REVISION": "rev", "SERVING_NAMESPACE": "ns",
				"SERVING_LOGGING_CONFIG": tt.cfg}))
			if err != nil {
				t.Fatalf("parseConfig: %v, want the fallback", err)
			}
			var buf testnet.SyncBuffer
			newLogger(c, &buf).Info("after")
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != 2 {
				t.Fatalf("lines %q, want the warning and the line", lines)
			}
			var warn, after map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &warn); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(lines[1]), &after); err != nil {
				t.Fatal(err)
			}
			if warn["severity"] != "WARNING" || warn["logger"] != "fallback-logger.queueproxy" ||
				!strings.Contains(fmt.Sprint(warn["error"]), tt.why) || warn["knative.dev/key"] != "ns/rev" {
				t.Errorf("warning %v", warn)
			}
			if after["message"] != "after" || after["severity"] != "INFO" {
				t.Errorf("line %v, want Knative's defaults", after)
			}
		})
	}
}

// TestZapFileSink: a path is a file, appended to, as zap's file sink; a
// file: URL too; both outputs get each line.
func TestZapFileSink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	if err := os.WriteFile(a, []byte("before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := parseZapConfig(`{"outputPaths":["` + a + `","file://` + b + `"],"encoderConfig":{"timeKey":""}}`)
	if err != nil {
		t.Fatal(err)
	}
	log := newZapLogger(zapLog{Config: c}, io.Discard, io.Discard)
	log.Info("x")
	want := `{"severity":"INFO","logger":"queueproxy","caller":`
	for _, p := range []string{a, b} {
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.TrimPrefix(string(got), "before\n")
		if p == a && len(s) == len(got) {
			t.Errorf("%s: not appended to: %q", p, got)
		}
		if !strings.HasPrefix(s, want) || strings.Count(s, "\n") != 1 {
			t.Errorf("%s holds %q, want one line starting %s", p, got, want)
		}
	}
}

// TestZapCallerAndStack: the caller is the line that logged, dir/file:line
// or the full path; a stack trace from that line down comes with errors
// (warnings in development), unless disabled.
func TestZapCallerAndStack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cfg        string
		level      slog.Level
		wantCaller string // a regexp; "" for none
		wantStack  bool
	}{
		{name: "short caller, no stack at info", cfg: knativeExampleLogging, level: slog.LevelInfo, wantCaller: `^queue/zaplog_test\.go:\d+$`},
		{name: "full caller", cfg: `{"encoderConfig":{"callerEncoder":"full"}}`, level: slog.LevelInfo, wantCaller: `/cmd/queue/zaplog_test\.go:\d+$`},
		{name: "stack at error", cfg: knativeExampleLogging, level: slog.LevelError, wantCaller: `^queue/zaplog_test\.go:\d+$`, wantStack: true},
		{name: "stack at warn in development", cfg: `{"development":true}`, level: slog.LevelWarn, wantCaller: `zaplog_test\.go`, wantStack: true},
		{name: "no caller, no stack", cfg: `{"disableCaller":true,"disableStacktrace":true}`, level: slog.LevelError},
		{name: "a stack without a caller", cfg: `{"disableCaller":true}`, level: slog.LevelError, wantStack: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log := slog.New(zapTestHandler(t, tt.cfg, &buf))
			_, _, line, _ := runtime.Caller(0)
			log.Log(context.Background(), tt.level, "m")
			var got map[string]any
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("%v: %s", err, buf.Bytes())
			}
			caller, _ := got["caller"].(string)
			if tt.wantCaller == "" {
				if caller != "" {
					t.Errorf("caller %q, want none", caller)
				}
			} else if !regexp.MustCompile(tt.wantCaller).MatchString(caller) || !strings.HasSuffix(caller, fmt.Sprintf(":%d", line+1)) {
				t.Errorf("caller %q, want %s at line %d", caller, tt.wantCaller, line+1)
			}
			stack, _ := got["stacktrace"].(string)
			if !tt.wantStack {
				if stack != "" {
					t.Errorf("stacktrace %q, want none", stack)
				}
				return
			}
			// zap's format: function, then a tab and file:line, frame after
			// frame, from the logging function down.
			first := "github.com/queue-dev/queue/cmd/queue.TestZapCallerAndStack.func1\n\t"
			if !strings.HasPrefix(stack, first) || !strings.Contains(stack, fmt.Sprintf("zaplog_test.go:%d\n", line+1)) ||
				!strings.Contains(stack, "\ntesting.tRunner\n\t") || strings.Contains(stack, "log/slog") {
				t.Errorf("stacktrace %q", stack)
			}
		})
	}
}

// TestZapSampling: per level and message, each second, the first lines
// pass, then every thereafter-th, as zap's sampler; Knative's default is
// 100 and 100.
func TestZapSampling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   string
		other int             // lines "o" first, at logTime
		times []time.Duration // then lines "m", each at logTime plus this
		want  int             // lines "m" written
	}{
		{name: "Knative's 100/100: 100, then the 200th", cfg: "", times: repeat(250, 0), want: 101},
		{name: "another message counts apart", cfg: `{"sampling":{"initial":2,"thereafter":0}}`, other: 5, times: repeat(5, 0), want: 2},
		{name: "a new second starts over", cfg: `{"sampling":{"initial":2,"thereafter":0}}`, times: append(repeat(5, 0), repeat(5, time.Second)...), want: 4},
		{name: "every thereafter-th", cfg: `{"sampling":{"initial":1,"thereafter":3}}`, times: repeat(10, 0), want: 4}, // 1st, 4th, 7th, 10th
		{name: "no sampling", cfg: `{"sampling":null}`, times: repeat(300, 0), want: 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			h := zapTestHandler(t, tt.cfg, &buf)
			for range tt.other {
				h.Handle(context.Background(), slog.NewRecord(logTime, slog.LevelInfo, "o", 0))
			}
			buf.Reset()
			for _, d := range tt.times {
				h.Handle(context.Background(), slog.NewRecord(logTime.Add(d), slog.LevelInfo, "m", 0))
			}
			if got := strings.Count(buf.String(), "\n"); got != tt.want {
				t.Errorf("%d lines of m, want %d", got, tt.want)
			}
		})
	}
}

func repeat(n int, d time.Duration) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = d
	}
	return s
}

// lineWriter records each Write as one line, for TestZapConcurrent.
type lineWriter struct {
	mu     sync.Mutex
	writes []string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, string(p))
	w.mu.Unlock()
	return len(p), nil
}

// TestZapConcurrent: loggers derived from one handler, on many goroutines,
// write each line whole in one Write, with its own fields only.
func TestZapConcurrent(t *testing.T) {
	t.Parallel()
	var w lineWriter
	base := slog.New(zapTestHandler(t, `{"sampling":null,"encoderConfig":{"timeKey":""}}`, &w))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			log := base.With("g", g).WithGroup("x")
			for i := range 100 {
				log.Info("line", "i", i, "s", strings.Repeat("y", g*100))
			}
		})
	}
	wg.Wait()
	if len(w.writes) != 800 {
		t.Fatalf("%d writes, want 800", len(w.writes))
	}
	for _, l := range w.writes {
		var v struct {
			G int `json:"g"`
			X struct {
				I int    `json:"i"`
				S string `json:"s"`
			} `json:"x"`
		}
		if strings.Count(l, "\n") != 1 || !strings.HasSuffix(l, "\n") || json.Unmarshal([]byte(l), &v) != nil || len(v.X.S) != v.G*100 {
			t.Fatalf("write %q is not one whole line of its own", l)
		}
	}
}

// TestZapSlogtest: the handler keeps slog's rules for handlers
// (testing/slogtest), with zap's keys renamed to slog's.
func TestZapSlogtest(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	cfg := `{"sampling":null,"disableCaller":true,"encoderConfig":{"timeKey":"time","levelKey":"level","messageKey":"msg","nameKey":""}}`
	// Each runs on the subtest's goroutine: it fails that subtest.
	newHandler := func(t *testing.T) slog.Handler {
		buf.Reset()
		c, err := parseZapConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		h, err := newZapHandler(c, zapDebug, "", nil, &buf, &buf)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	result := func(t *testing.T) map[string]any {
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("%v: %s", err, buf.Bytes())
		}
		return m
	}
	slogtest.Run(t, newHandler, result)
}

// zapReference is what zap itself writes for cfg over Knative's defaults:
// the encoder zap.Config.Build would make, the level, and the context
// fields (initialFields, then Knative's) added as a logger's With adds
// them.
func zapReference(cfg string) (zapcore.Encoder, zapcore.Level, error) {
	c := zap.Config{
		Level:    zap.NewAtomicLevelAt(zap.InfoLevel),
		Sampling: &zap.SamplingConfig{Initial: 100, Thereafter: 100},
		Encoding: "json",
		EncoderConfig: zapcore.EncoderConfig{
			TimeKey: "timestamp", LevelKey: "severity", NameKey: "logger", CallerKey: "caller", MessageKey: "message",
			StacktraceKey: "stacktrace", LineEnding: zapcore.DefaultLineEnding,
			// zapdriver's encoders, as knative.dev/pkg/logging sets them.
			EncodeLevel: func(l zapcore.Level, enc zapcore.PrimitiveArrayEncoder) {
				enc.AppendString(map[zapcore.Level]string{zapcore.DebugLevel: "DEBUG", zapcore.InfoLevel: "INFO",
					zapcore.WarnLevel: "WARNING", zapcore.ErrorLevel: "ERROR"}[l])
			},
			EncodeTime: func(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
				enc.AppendString(t.Format(time.RFC3339Nano))
			},
			EncodeDuration: zapcore.StringDurationEncoder,
			EncodeCaller:   zapcore.ShortCallerEncoder,
		},
		OutputPaths: []string{"stderr"}, ErrorOutputPaths: []string{"stderr"},
	}
	if cfg != "" {
		if err := json.Unmarshal([]byte(cfg), &c); err != nil {
			return nil, 0, err
		}
	}
	var enc zapcore.Encoder
	switch c.Encoding {
	case "json":
		enc = zapcore.NewJSONEncoder(c.EncoderConfig)
	case "console":
		enc = zapcore.NewConsoleEncoder(c.EncoderConfig)
	default:
		return nil, 0, fmt.Errorf("encoding %q", c.Encoding)
	}
	keys := make([]string, 0, len(c.InitialFields))
	for k := range c.InitialFields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		zap.Any(k, c.InitialFields[k]).AddTo(enc)
	}
	zap.String("knative.dev/key", "ns/rev").AddTo(enc)
	zap.String("knative.dev/pod", "pod").AddTo(enc)
	return enc, c.Level.Level(), nil
}

// zapFieldPairs are the same fields for slog and for zap.
var zapFieldPairs = []struct {
	slog slog.Attr
	zap  zap.Field
}{
	{slog.String("s", "a\"b\\c\nd\te\x01f\xffg<&>\u2028é"), zap.String("s", "a\"b\\c\nd\te\x01f\xffg<&>\u2028é")},
	{slog.Int("i", -42), zap.Int("i", -42)},
	{slog.Uint64("u", 42), zap.Uint64("u", 42)},
	{slog.Float64("f", 1.5), zap.Float64("f", 1.5)},
	{slog.Float64("tiny", 1e-7), zap.Float64("tiny", 1e-7)},
	{slog.Float64("nan", math.NaN()), zap.Float64("nan", math.NaN())},
	{slog.Float64("inf", math.Inf(1)), zap.Float64("inf", math.Inf(1))},
	{slog.Bool("b", false), zap.Bool("b", false)},
	{slog.Duration("d", 1500*time.Millisecond), zap.Duration("d", 1500*time.Millisecond)},
	{slog.Time("t", logTime), zap.Time("t", logTime)},
	{slog.Any("err", errors.New("boom \"x\"")), zap.NamedError("err", errors.New("boom \"x\""))},
	{slog.Any("addr", net.IPv4(10, 0, 0, 1)), zap.Stringer("addr", net.IPv4(10, 0, 0, 1))},
	{slog.Any("m", map[string]any{"b": []any{1.0, "x<"}, "a": nil}), zap.Any("m", map[string]any{"b": []any{1.0, "x<"}, "a": nil})},
	{slog.Group("g", slog.String("a", "b"), slog.Group("h", slog.Int("n", 1))), zap.Dict("g", zap.String("a", "b"), zap.Dict("h", zap.Int("n", 1)))},
}

// zapLinesAgree writes one record at each level through both, with fields,
// a group for the last one (zap's Namespace) and a message, and reports
// the first difference.
func zapLinesAgree(t testing.TB, cfg, msg string) {
	t.Helper()
	enc, level, zerr := zapReference(cfg)
	c, err := parseZapConfig(cfg)
	if (err == nil) != (zerr == nil) {
		t.Fatalf("config %q: queue's error %v, zap's %v", cfg, err, zerr)
	}
	if err != nil {
		return
	}
	c.OutputPaths, c.ErrorOutputPaths = []string{"stdout"}, []string{"stdout"}
	var buf bytes.Buffer
	h, err := newZapHandler(c, c.Level, knativeLoggerName, knativeFields, &buf, &buf)
	if err != nil {
		t.Fatal(err)
	}
	var attrs []slog.Attr
	var fields []zap.Field
	for _, p := range zapFieldPairs {
		attrs = append(attrs, p.slog)
		fields = append(fields, p.zap)
	}
	for _, sl := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		zl := zapcore.Level(sl / 4)
		if got, want := h.Enabled(context.Background(), sl), level.Enabled(zl); got != want {
			t.Errorf("config %q: Enabled(%v) = %v, zap's %v", cfg, sl, got, want)
		}
		buf.Reset()
		r := slog.NewRecord(logTime, sl, msg, 0)
		r.AddAttrs(attrs...)
		// No caller (both) and no stack trace: TestZapCallerAndStack has them.
		h.core.stackLevel = slog.Level(math.MaxInt)
		h.core.sampler = nil
		h.WithGroup("ns").Handle(context.Background(), r)
		out, err := enc.EncodeEntry(zapcore.Entry{Level: zl, Time: logTime, LoggerName: knativeLoggerName, Message: msg},
			append([]zap.Field{zap.Namespace("ns")}, fields...))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := buf.String(), out.String(); got != want {
			t.Fatalf("config %q, level %v:\nqueue %q\n  zap %q", cfg, sl, got, want)
		}
	}
}

// TestZapMatchesZap: for each configuration, queue's line is zap's, byte
// for byte (go.uber.org/zap is a test dependency only).
func TestZapMatchesZap(t *testing.T) {
	t.Parallel()
	for _, cfg := range zapSeedConfigs {
		zapLinesAgree(t, cfg, "hello \"world\"\n\xff")
	}
}

// zapSeedConfigs are the configurations TestZapMatchesZap compares and
// FuzzZapConfig starts from.
var zapSeedConfigs = []string{
	"", knativeExampleLogging, `null`, `{}`, `{"level":"Debug"}`, `{"level":"warning"}`, `{"level":""}`, `{"level":null}`,
	`{"level":3}`, `{"encoding":"console"}`, `{"encoding":""}`, `{"encoding":"text"}`,
	`{"encoding":"console","encoderConfig":{"consoleSeparator":" ","levelEncoder":"color","timeEncoder":"millis","durationEncoder":"ms"}}`,
	`{"encoding":"console","encoderConfig":{"timeEncoder":"nanos","durationEncoder":"nanos","nameKey":"","levelKey":""}}`,
	`{"encoderConfig":{"timeEncoder":{"layout":"15:04"},"levelEncoder":"capitalColor","durationEncoder":"bogus"}}`,
	`{"encoderConfig":{"timeEncoder":null,"levelEncoder":null}}`, `{"encoderConfig":{"timeEncoder":7}}`,
	`{"encoderConfig":{"messageKey":"-","levelKey":"","timeKey":"t","lineEnding":";","skipLineEnding":false}}`,
	`{"encoderConfig":{"skipLineEnding":true,"functionKey":"fn","nameEncoder":"short"}}`,
	`{"initialFields":{"b":"x","a":[1,"2",{"c":null}],"n":1e21,"t":true,"z":null}}`, `{"initialFields":"x"}`,
	`{"sampling":{"initial":-1}}`, `{"outputPaths":"stdout"}`, `{"development":"yes"}`, `{"ENCODING":"console"}`,
}

// FuzzZapConfig: for any SERVING_LOGGING_CONFIG, queue refuses what zap
// refuses, and otherwise writes zap's lines.
func FuzzZapConfig(f *testing.F) {
	for _, c := range zapSeedConfigs {
		f.Add(c, "m")
	}
	f.Fuzz(func(t *testing.T, cfg, msg string) {
		zapLinesAgree(t, cfg, msg)
	})
}

// BenchmarkZapLine is one line of Knative's example configuration, caller
// included, with three fields, none sampled away: the cost of a log line in
// Knative mode.
func BenchmarkZapLine(b *testing.B) {
	cfg := strings.Replace(knativeExampleLogging, `"development": false,`, `"development": false, "sampling": null,`, 1)
	log := slog.New(zapTestHandler(b, cfg, io.Discard))
	b.ReportAllocs()
	for b.Loop() {
		log.LogAttrs(context.Background(), slog.LevelInfo, "upstream failing", slog.String("upstream", "127.0.0.1:8080"),
			slog.Int("status", 502), slog.Duration("duration", time.Second))
	}
}
