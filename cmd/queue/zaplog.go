package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/valyala/bytebufferpool"
)

// This file writes queue's log in Knative mode the way Knative's
// queue-proxy writes its own: zap (go.uber.org/zap v1.28), configured by
// the operator's config-logging through SERVING_LOGGING_CONFIG and
// SERVING_LOGGING_LEVEL, so that whatever reads the cluster's logs finds
// queue's lines under the same keys. It is an slog.Handler of its own, not
// zap: this file adds a fraction of what zap and multierr behind an slog
// bridge add to the stripped binary (`go build -ldflags=-s -w` with and
// without shows it), for the few lines queue writes, none on the request
// path. zaplog_test.go compares
// what it writes with zap's own output, byte for byte.

// zapConfig is what SERVING_LOGGING_CONFIG holds: the JSON of zap's Config,
// read as knative.dev/pkg/logging reads it, by unmarshalling the operator's
// JSON over Knative's defaults (knativeZapDefaults). A key the JSON does
// not name keeps Knative's default; a key it names takes zap's meaning of
// the value, zap's fallbacks included ("" for timeEncoder is epoch
// seconds, for levelEncoder lowercase).
type zapConfig struct {
	Level             zapLevel                   `json:"level"`
	Development       bool                       `json:"development"`
	DisableCaller     bool                       `json:"disableCaller"`
	DisableStacktrace bool                       `json:"disableStacktrace"`
	Sampling          *zapSampling               `json:"sampling"`
	Encoding          string                     `json:"encoding"`
	EncoderConfig     zapEncoderConfig           `json:"encoderConfig"`
	OutputPaths       []string                   `json:"outputPaths"`
	ErrorOutputPaths  []string                   `json:"errorOutputPaths"`
	InitialFields     map[string]json.RawMessage `json:"initialFields"`
}

// zapSampling keeps, per level and message and per second, the first
// Initial lines and then every Thereafter-th (0: none).
type zapSampling struct {
	Initial    int `json:"initial"`
	Thereafter int `json:"thereafter"`
}

// zapEncoderConfig is zapcore.EncoderConfig: an empty key leaves its part
// out of the line.
type zapEncoderConfig struct {
	MessageKey       string             `json:"messageKey"`
	LevelKey         string             `json:"levelKey"`
	TimeKey          string             `json:"timeKey"`
	NameKey          string             `json:"nameKey"`
	CallerKey        string             `json:"callerKey"`
	FunctionKey      string             `json:"functionKey"`
	StacktraceKey    string             `json:"stacktraceKey"`
	SkipLineEnding   bool               `json:"skipLineEnding"`
	LineEnding       string             `json:"lineEnding"`
	EncodeLevel      zapLevelEncoder    `json:"levelEncoder"`
	EncodeTime       zapTimeEncoder     `json:"timeEncoder"`
	EncodeDuration   zapDurationEncoder `json:"durationEncoder"`
	EncodeCaller     zapCallerEncoder   `json:"callerEncoder"`
	EncodeName       zapNameEncoder     `json:"nameEncoder"`
	ConsoleSeparator string             `json:"consoleSeparator"`
}

// knativeZapDefaults is the configuration knative.dev/pkg/logging starts
// from: zapdriver's production configuration (Stackdriver's keys and
// severities, RFC 3339 times with nanoseconds, sampling 100/100 per
// second, stderr) with durations as strings.
func knativeZapDefaults() zapConfig {
	return zapConfig{
		Level:    zapInfo,
		Sampling: &zapSampling{Initial: 100, Thereafter: 100},
		Encoding: "json",
		EncoderConfig: zapEncoderConfig{
			TimeKey: "timestamp", LevelKey: "severity", NameKey: "logger", CallerKey: "caller",
			MessageKey: "message", StacktraceKey: "stacktrace", LineEnding: "\n",
			EncodeLevel: levelStackdriver, EncodeTime: zapTimeEncoder{kind: timeRFC3339Nano},
			EncodeDuration: durationString, EncodeCaller: callerShort,
		},
		OutputPaths:      []string{"stderr"},
		ErrorOutputPaths: []string{"stderr"},
	}
}

// parseZapConfig reads SERVING_LOGGING_CONFIG over Knative's defaults. It
// fails where zap's Config.Build would (malformed JSON, an unknown level,
// an encoding other than json and console), and then returns Knative's
// defaults, which is what Knative's queue-proxy falls back to.
func parseZapConfig(s string) (zapConfig, error) {
	c := knativeZapDefaults()
	if s == "" {
		return c, nil
	}
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return knativeZapDefaults(), err
	}
	switch c.Encoding {
	case "json", "console":
	case "":
		return knativeZapDefaults(), errors.New("no encoder name specified")
	default:
		return knativeZapDefaults(), fmt.Errorf("no encoder registered for name %q", c.Encoding)
	}
	return c, nil
}

// zapLevel is zapcore.Level: debug -1 to fatal 5.
type zapLevel int8

const (
	zapDebug zapLevel = iota - 1
	zapInfo
	zapWarn
	zapError
	zapDPanic
	zapPanic
	zapFatal
)

// UnmarshalText reads a level as zapcore.Level does: as written, else
// lowercased; "" is info.
func (l *zapLevel) UnmarshalText(b []byte) error {
	if !l.set(string(b)) && !l.set(strings.ToLower(string(b))) {
		return fmt.Errorf("unrecognized level: %q", b)
	}
	return nil
}

func (l *zapLevel) set(s string) bool {
	switch s {
	case "debug":
		*l = zapDebug
	case "info", "":
		*l = zapInfo
	case "warn", "warning":
		*l = zapWarn
	case "error":
		*l = zapError
	case "dpanic":
		*l = zapDPanic
	case "panic":
		*l = zapPanic
	case "fatal":
		*l = zapFatal
	default:
		return false
	}
	return true
}

// slog is the slog level at and above which l logs: zap's levels are
// slog's divided by 4, and dpanic and above, which queue never logs at,
// keep everything out.
func (l zapLevel) slog() slog.Level { return slog.Level(4 * int(l)) }

// zapLevelEncoder is zapcore.LevelEncoder, plus Knative's default
// (zapdriver's Stackdriver severities), which no JSON value names.
type zapLevelEncoder uint8

const (
	levelLowercase zapLevelEncoder = iota
	levelCapital
	levelLowercaseColor
	levelCapitalColor
	levelStackdriver
)

// UnmarshalText reads "capital", "capitalColor" and "color"; anything else
// is lowercase, as in zap.
func (e *zapLevelEncoder) UnmarshalText(b []byte) error {
	switch string(b) {
	case "capital":
		*e = levelCapital
	case "capitalColor":
		*e = levelCapitalColor
	case "color":
		*e = levelLowercaseColor
	default:
		*e = levelLowercase
	}
	return nil
}

// levelNames are each encoder's names for debug, info, warn and error, the
// levels queue logs at. The colors are zap's: magenta, blue, yellow, red.
var levelNames = [...][4]string{
	levelLowercase:      {"debug", "info", "warn", "error"},
	levelCapital:        {"DEBUG", "INFO", "WARN", "ERROR"},
	levelLowercaseColor: {"\x1b[35mdebug\x1b[0m", "\x1b[34minfo\x1b[0m", "\x1b[33mwarn\x1b[0m", "\x1b[31merror\x1b[0m"},
	levelCapitalColor:   {"\x1b[35mDEBUG\x1b[0m", "\x1b[34mINFO\x1b[0m", "\x1b[33mWARN\x1b[0m", "\x1b[31mERROR\x1b[0m"},
	levelStackdriver:    {"DEBUG", "INFO", "WARNING", "ERROR"},
}

// levelIndex is the zap level of an slog level, as an index into
// levelNames.
func levelIndex(l slog.Level) int {
	switch {
	case l < slog.LevelInfo:
		return 0
	case l < slog.LevelWarn:
		return 1
	case l < slog.LevelError:
		return 2
	}
	return 3
}

// zapTimeEncoder is zapcore.TimeEncoder.
type zapTimeEncoder struct {
	kind   uint8
	layout string // timeLayout
}

const (
	timeEpoch uint8 = iota // float seconds
	timeMillis
	timeNanos
	timeRFC3339Nano
	timeRFC3339
	timeISO8601
	timeLayout
)

// UnmarshalJSON reads an object with a layout, or a name, as zap does:
// "rfc3339nano"/"RFC3339Nano", "rfc3339"/"RFC3339", "iso8601"/"ISO8601",
// "millis", "nanos"; anything else is epoch seconds.
func (e *zapTimeEncoder) UnmarshalJSON(b []byte) error {
	var o struct {
		Layout string `json:"layout"`
	}
	if err := json.Unmarshal(b, &o); err == nil {
		*e = zapTimeEncoder{kind: timeLayout, layout: o.Layout}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	switch s {
	case "rfc3339nano", "RFC3339Nano":
		*e = zapTimeEncoder{kind: timeRFC3339Nano}
	case "rfc3339", "RFC3339":
		*e = zapTimeEncoder{kind: timeRFC3339}
	case "iso8601", "ISO8601":
		*e = zapTimeEncoder{kind: timeISO8601}
	case "millis":
		*e = zapTimeEncoder{kind: timeMillis}
	case "nanos":
		*e = zapTimeEncoder{kind: timeNanos}
	default:
		*e = zapTimeEncoder{kind: timeEpoch}
	}
	return nil
}

// layout is the time layout of a string encoding, "" for a number.
func (e zapTimeEncoder) layoutOf() (string, bool) {
	switch e.kind {
	case timeRFC3339Nano:
		return time.RFC3339Nano, true
	case timeRFC3339:
		return time.RFC3339, true
	case timeISO8601:
		return "2006-01-02T15:04:05.000Z0700", true
	case timeLayout:
		return e.layout, true
	}
	return "", false
}

// zapDurationEncoder is zapcore.DurationEncoder.
type zapDurationEncoder uint8

const (
	durationSeconds zapDurationEncoder = iota // float
	durationNanos
	durationMillis
	durationString
)

// UnmarshalText reads "string", "nanos" and "ms"; anything else is float
// seconds, as in zap.
func (e *zapDurationEncoder) UnmarshalText(b []byte) error {
	switch string(b) {
	case "string":
		*e = durationString
	case "nanos":
		*e = durationNanos
	case "ms":
		*e = durationMillis
	default:
		*e = durationSeconds
	}
	return nil
}

// zapCallerEncoder is zapcore.CallerEncoder.
type zapCallerEncoder uint8

const (
	callerShort zapCallerEncoder = iota // dir/file.go:line
	callerFull
)

// UnmarshalText reads "full"; anything else is short, as in zap.
func (e *zapCallerEncoder) UnmarshalText(b []byte) error {
	*e = callerShort
	if string(b) == "full" {
		*e = callerFull
	}
	return nil
}

// zapNameEncoder is zapcore.NameEncoder, which has one encoding: the name
// as it is.
type zapNameEncoder struct{}

func (*zapNameEncoder) UnmarshalText([]byte) error { return nil }

// zapLog is the logging configuration of the zap format (--log-format
// zap), resolved by applyKnativeRest.
type zapLog struct {
	// Config is SERVING_LOGGING_CONFIG over Knative's defaults; Knative's
	// defaults alone when Err is set.
	Config zapConfig
	// Err is why SERVING_LOGGING_CONFIG could not be used: queue then logs
	// with Knative's defaults and says so once, as Knative's queue-proxy.
	Err error
	// Override is the level that --log-level or else SERVING_LOGGING_LEVEL
	// sets over the configuration's; nil: none.
	Override *zapLevel
	// Fields are the fields every line carries after the configuration's
	// initialFields: Knative's commit, knative.dev/key and knative.dev/pod.
	Fields []slog.Attr
}

// knativeLoggerName is the logger name (nameKey) of Knative's queue-proxy.
const knativeLoggerName = "queueproxy"

// newZapLogger builds the logger of --log-format zap: "stdout" and
// "stderr" in the configuration's paths are stdout and stderr, anything
// else a file, opened for appending, as zap's file sink. A configuration
// zap would not build falls back, as in Knative, to Knative's defaults
// under the name fallback-logger.queueproxy, with one warning.
func newZapLogger(zl zapLog, stdout, stderr io.Writer) *slog.Logger {
	cfg, err := zl.Config, zl.Err
	var h *zapHandler
	if err == nil {
		h, err = newZapHandler(cfg, zl.level(cfg), knativeLoggerName, zl.Fields, stdout, stderr)
	}
	if err != nil {
		cfg = knativeZapDefaults()
		h, _ = newZapHandler(cfg, zl.level(cfg), "fallback-logger."+knativeLoggerName, zl.Fields, stdout, stderr)
	}
	log := slog.New(h)
	if err != nil {
		log.LogAttrs(context.Background(), slog.LevelWarn, "Failed to parse logging config - using default zap production config",
			slog.String("error", err.Error()))
	}
	return log
}

func (zl zapLog) level(c zapConfig) zapLevel {
	if zl.Override != nil {
		return *zl.Override
	}
	return c.Level
}

// knativeCommit is the commit field of Knative's log lines
// (knative.dev/pkg/changeset): the commit set at link time as it is, else
// the module's VCS revision cut to 7 characters and marked -dirty when the
// tree was; "" when neither is known ("unknown", the Dockerfile's default,
// is not known), and the field is left out.
func knativeCommit() string {
	if commit != "" && commit != "unknown" {
		return commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty, _ = strconv.ParseBool(s.Value)
		}
	}
	if n := len(rev); n >= 40 && n <= 64 && strings.Trim(rev, "0123456789abcdef") == "" {
		rev = rev[:7]
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}

// zapCore is what every handler derived from one newZapHandler shares.
type zapCore struct {
	enc        zapEncoderConfig
	console    bool
	level      slog.Level
	stackLevel slog.Level
	name       string
	caller     bool
	spaced     bool // JSON with a space after ':' and ',': the console's fields
	lineEnding string
	sep        string // console separator
	out, errs  []io.Writer
	sampler    *sampler
}

// zapHandler is an slog.Handler that writes zap's JSON or console lines.
// It is safe for concurrent use: the core and a handler's encoded context
// are read-only once built, the sampler's counters are atomic, and each
// line is built in a pooled buffer and written with one Write per output.
type zapHandler struct {
	core *zapCore
	// ctx holds the fields of WithAttrs, encoded, without braces; open
	// counts the groups opened in it, pending the groups opened by
	// WithGroup and not yet written (slog leaves out a group without
	// fields).
	ctx     []byte
	open    int
	pending []string
}

// newZapHandler returns the handler for c, logging from level, under name,
// with fields (after c's initialFields) on every line. It fails where
// zap's Build would: an output it cannot open.
func newZapHandler(c zapConfig, level zapLevel, name string, fields []slog.Attr, stdout, stderr io.Writer) (*zapHandler, error) {
	core := &zapCore{enc: c.EncoderConfig, console: c.Encoding == "console", level: level.slog(),
		stackLevel: slog.LevelError, name: name, caller: !c.DisableCaller, lineEnding: c.EncoderConfig.LineEnding,
		sep: c.EncoderConfig.ConsoleSeparator}
	if c.Development {
		core.stackLevel = slog.LevelWarn
	}
	if c.DisableStacktrace || c.EncoderConfig.StacktraceKey == "" {
		core.stackLevel = slog.Level(math.MaxInt) // never captured
	}
	core.spaced = core.console
	switch {
	case c.EncoderConfig.SkipLineEnding:
		core.lineEnding = ""
	case core.lineEnding == "":
		core.lineEnding = "\n"
	}
	if core.sep == "" {
		core.sep = "\t"
	}
	var err error
	if core.out, err = openZapSinks(c.OutputPaths, stdout, stderr); err != nil {
		return nil, err
	}
	if core.errs, err = openZapSinks(c.ErrorOutputPaths, stdout, stderr); err != nil {
		return nil, err
	}
	if s := c.Sampling; s != nil {
		core.sampler = &sampler{first: uint64(s.Initial), thereafter: uint64(s.Thereafter)} // as zap converts them
	}
	h := &zapHandler{core: core}
	// zap adds initialFields sorted by key, then Knative its own.
	keys := make([]string, 0, len(c.InitialFields))
	for k := range c.InitialFields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		h.ctx = h.appendRaw(h.ctx, k, c.InitialFields[k])
	}
	for _, a := range fields {
		h.ctx = h.appendAttr(h.ctx, a)
	}
	return h, nil
}

// openZapSinks opens zap's output paths: stdout, stderr, or a file path or
// file: URL, appended to and created if need be.
func openZapSinks(paths []string, stdout, stderr io.Writer) ([]io.Writer, error) {
	var ws []io.Writer
	for _, p := range paths {
		path := p
		if !filepath.IsAbs(p) {
			u, err := url.Parse(p)
			if err != nil {
				return nil, fmt.Errorf("open sink %q: can't parse %q as a URL: %w", p, p, err)
			}
			switch u.Scheme {
			case "", "file":
			default:
				return nil, fmt.Errorf("open sink %q: no sink found for scheme %q", p, u.Scheme)
			}
			if u.User != nil || u.Fragment != "" || u.RawQuery != "" || u.Port() != "" || u.Hostname() != "" && u.Hostname() != "localhost" {
				return nil, fmt.Errorf("open sink %q: want a file path or a file URL without user, host, port, query or fragment", p)
			}
			path = u.Path
		}
		switch path {
		case "stdout":
			ws = append(ws, stdout)
		case "stderr":
			ws = append(ws, stderr)
		default:
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
			if err != nil {
				return nil, fmt.Errorf("open sink %q: %w", p, err)
			}
			ws = append(ws, f)
		}
	}
	return ws, nil
}

// Enabled reports whether l is at or above the configured level.
func (h *zapHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.core.level }

// WithAttrs returns a handler whose lines carry attrs, encoded once here.
func (h *zapHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	h2.ctx = slices.Clip(h.ctx)
	h2.pending = slices.Clip(h.pending)
	for _, a := range attrs {
		h2.ctx = h2.appendAttr(h2.ctx, a)
	}
	return &h2
}

// WithGroup returns a handler whose later fields nest under name, as zap's
// Namespace does.
func (h *zapHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.pending = append(slices.Clip(h.pending), name)
	return &h2
}

// appendAttr appends a, after this handler's pending groups when it is the
// first field in them. It is how WithAttrs builds ctx.
func (h *zapHandler) appendAttr(b []byte, a slog.Attr) []byte {
	n := len(b)
	b = h.openPending(b, h.pending)
	m := len(b)
	b = h.core.appendAttr(b, a)
	if len(b) == m {
		return b[:n] // nothing written: the groups stay pending
	}
	h.open += len(h.pending)
	h.pending = nil
	return b
}

// appendRaw appends one of zap's initialFields: a JSON value, encoded as
// zap.Any encodes what encoding/json decodes.
func (h *zapHandler) appendRaw(b []byte, key string, raw json.RawMessage) []byte {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return b
	}
	switch v := v.(type) {
	case string:
		return h.core.appendKeyed(b, key, slog.StringValue(v))
	case float64:
		return h.core.appendKeyed(b, key, slog.Float64Value(v))
	case bool:
		return h.core.appendKeyed(b, key, slog.BoolValue(v))
	}
	return h.core.appendKeyed(b, key, slog.AnyValue(v))
}

func (h *zapHandler) openPending(b []byte, groups []string) []byte {
	for _, g := range groups {
		b = h.core.appendKey(b, g)
		b = append(b, '{')
	}
	return b
}

var errBufs bytebufferpool.Pool

// Handle writes r as one line, unless the sampler drops it.
func (h *zapHandler) Handle(_ context.Context, r slog.Record) error {
	c := h.core
	if c.sampler != nil && !c.sampler.keep(r.Level, r.Message, r.Time) {
		return nil
	}
	// The caller's frame, for the caller field and where a stack trace
	// starts: a line's only allocations (BenchmarkZapLine counts them),
	// paid by the few lines queue writes, none per request.
	stacked := r.Level >= c.stackLevel
	var frame runtime.Frame
	if r.PC != 0 && (c.caller || stacked) {
		frame, _ = runtime.CallersFrames([]uintptr{r.PC}).Next()
	}
	var stack string
	if stacked {
		stack = takeStack(frame)
	}
	if !c.caller {
		frame = runtime.Frame{}
	}
	bb := bytebufferpool.Get()
	b := bb.B[:0]
	if c.console {
		b = h.appendConsole(b, r, frame, stack)
	} else {
		b = h.appendJSON(b, r, frame, stack)
	}
	bb.B = b
	var err error
	for _, w := range c.out {
		if _, werr := w.Write(b); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	bytebufferpool.Put(bb)
	if err != nil {
		// zap's report of a failed write, on the error outputs.
		eb := errBufs.Get()
		fmt.Fprintf(eb, "%v write error: %v\n", r.Time, err)
		for _, w := range c.errs {
			w.Write(eb.B)
		}
		errBufs.Put(eb)
	}
	return nil
}

// appendJSON builds a line as zap's JSON encoder: level, time, logger name,
// caller, function, message, the fields, the stack trace.
func (h *zapHandler) appendJSON(b []byte, r slog.Record, frame runtime.Frame, stack string) []byte {
	c := h.core
	e := &c.enc
	b = append(b, '{')
	if e.LevelKey != "" {
		b = c.appendKey(b, e.LevelKey)
		b = appendZapString(b, levelNames[e.EncodeLevel][levelIndex(r.Level)])
	}
	if e.TimeKey != "" && !r.Time.IsZero() {
		b = c.appendKey(b, e.TimeKey)
		b = c.appendTime(b, r.Time, true)
	}
	if e.NameKey != "" && c.name != "" {
		b = c.appendKey(b, e.NameKey)
		b = appendZapString(b, c.name)
	}
	if frame.PC != 0 {
		if e.CallerKey != "" {
			b = c.appendKey(b, e.CallerKey)
			b = append(b, '"')
			b = c.appendCaller(b, frame, true)
			b = append(b, '"')
		}
		if e.FunctionKey != "" {
			b = c.appendKey(b, e.FunctionKey)
			b = appendZapString(b, frame.Function)
		}
	}
	if e.MessageKey != "" {
		b = c.appendKey(b, e.MessageKey)
		b = appendZapString(b, r.Message)
	}
	b = h.appendFields(b, r)
	if stack != "" {
		b = c.appendKey(b, e.StacktraceKey)
		b = appendZapString(b, stack)
	}
	b = append(b, '}')
	return append(b, c.lineEnding...)
}

// appendConsole builds a line as zap's console encoder: time, level, logger
// name, caller and function as they are, separated by the console
// separator, then the message, the fields as a JSON object, and the stack
// trace on lines of its own.
func (h *zapHandler) appendConsole(b []byte, r slog.Record, frame runtime.Frame, stack string) []byte {
	c := h.core
	e := &c.enc
	first := true
	sep := func(b []byte) []byte {
		if !first {
			b = append(b, c.sep...)
		}
		first = false
		return b
	}
	if e.TimeKey != "" && !r.Time.IsZero() {
		b = c.appendTime(sep(b), r.Time, false)
	}
	if e.LevelKey != "" {
		b = append(sep(b), levelNames[e.EncodeLevel][levelIndex(r.Level)]...)
	}
	if e.NameKey != "" && c.name != "" {
		b = append(sep(b), c.name...)
	}
	if frame.PC != 0 {
		if e.CallerKey != "" {
			b = c.appendCaller(sep(b), frame, false)
		}
		if e.FunctionKey != "" {
			b = append(sep(b), frame.Function...)
		}
	}
	if e.MessageKey != "" {
		if len(b) > 0 {
			b = append(b, c.sep...)
		}
		b = append(b, r.Message...)
	}
	n := len(b)
	if len(b) > 0 {
		b = append(b, c.sep...)
	}
	b = append(b, '{')
	m := len(b)
	b = h.appendFields(b, r)
	if len(b) == m {
		b = b[:n]
	} else {
		b = append(b, '}')
	}
	if stack != "" {
		b = append(b, '\n')
		b = append(b, stack...)
	}
	return append(b, c.lineEnding...)
}

// appendFields appends the handler's context and r's attributes, inside
// the groups they belong to, and closes the groups.
func (h *zapHandler) appendFields(b []byte, r slog.Record) []byte {
	c := h.core
	if len(h.ctx) > 0 {
		b = c.appendSep(b)
		b = append(b, h.ctx...)
	}
	open := h.open
	pending := h.pending
	r.Attrs(func(a slog.Attr) bool {
		n := len(b)
		b = h.openPending(b, pending)
		m := len(b)
		b = c.appendAttr(b, a)
		if len(b) == m {
			b = b[:n]
		} else {
			open += len(pending)
			pending = nil
		}
		return true
	})
	for range open {
		b = append(b, '}')
	}
	return b
}

// appendCaller appends zap's caller: dir/file.go:line (short), or the
// whole path; escaped for JSON, as it is on the console.
func (c *zapCore) appendCaller(b []byte, f runtime.Frame, escape bool) []byte {
	file := f.File
	if c.enc.EncodeCaller == callerShort {
		if i := strings.LastIndexByte(file, '/'); i >= 0 {
			if j := strings.LastIndexByte(file[:i], '/'); j >= 0 {
				file = file[j+1:]
			}
		}
	}
	if escape {
		b = appendZapEscaped(b, file)
	} else {
		b = append(b, file...)
	}
	b = append(b, ':')
	return strconv.AppendInt(b, int64(f.Line), 10)
}

// takeStack is zap's stack trace from the caller's frame down: each frame
// a function and, indented, its file:line, without the runtime's last
// frame. Without a caller it starts at Handle's caller.
func takeStack(caller runtime.Frame) string {
	const skip = 3 // runtime.Callers, takeStack, Handle
	pcs := make([]uintptr, 64)
	n := runtime.Callers(skip, pcs)
	for n == len(pcs) {
		pcs = make([]uintptr, 2*len(pcs))
		n = runtime.Callers(skip, pcs)
	}
	frames := runtime.CallersFrames(pcs[:n])
	var b []byte
	found := caller.PC == 0 // no caller: the whole stack
	for f, more := frames.Next(); more; f, more = frames.Next() {
		if !found {
			if f.Function != caller.Function || f.Line != caller.Line {
				continue
			}
			found = true
		}
		if len(b) > 0 {
			b = append(b, '\n')
		}
		b = append(b, f.Function...)
		b = append(b, "\n\t"...)
		b = append(b, f.File...)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(f.Line), 10)
	}
	return string(b)
}

// appendSep separates a field from the one before it, as zap's
// addElementSeparator.
func (c *zapCore) appendSep(b []byte) []byte {
	if n := len(b); n > 0 {
		switch b[n-1] {
		case '{', '[', ':', ',', ' ':
			return b
		}
		b = append(b, ',')
		if c.spaced {
			b = append(b, ' ')
		}
	}
	return b
}

func (c *zapCore) appendKey(b []byte, k string) []byte {
	b = c.appendSep(b)
	b = appendZapString(b, k)
	b = append(b, ':')
	if c.spaced {
		b = append(b, ' ')
	}
	return b
}

// appendTime encodes t with the time encoder: a string (quoted in JSON) or
// a number (as %v prints it on the console, as zap's console encoder).
func (c *zapCore) appendTime(b []byte, t time.Time, quote bool) []byte {
	e := c.enc.EncodeTime
	if layout, ok := e.layoutOf(); ok {
		if quote {
			b = append(b, '"')
		}
		b = t.AppendFormat(b, layout)
		if quote {
			b = append(b, '"')
		}
		return b
	}
	switch e.kind {
	case timeNanos:
		return strconv.AppendInt(b, t.UnixNano(), 10)
	case timeMillis:
		return appendZapFloat(b, float64(t.UnixNano())/float64(time.Millisecond), quote)
	}
	return appendZapFloat(b, float64(t.UnixNano())/float64(time.Second), quote)
}

// appendZapFloat writes f as zap does: in JSON without an exponent and
// with NaN and infinities quoted; on the console as fmt's %v.
func appendZapFloat(b []byte, f float64, json bool) []byte {
	if !json {
		return strconv.AppendFloat(b, f, 'g', -1, 64)
	}
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"+Inf"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Inf"`...)
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

// appendAttr appends one field as zap would for the zap.Field that an slog
// value of its kind maps to. An attribute with no key and a group without
// fields write nothing, as slog asks of handlers.
func (c *zapCore) appendAttr(b []byte, a slog.Attr) []byte {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		attrs := v.Group()
		if len(attrs) == 0 {
			return b
		}
		if a.Key == "" {
			for _, g := range attrs {
				b = c.appendAttr(b, g)
			}
			return b
		}
		n := len(b)
		b = c.appendKey(b, a.Key)
		b = append(b, '{')
		m := len(b)
		for _, g := range attrs {
			b = c.appendAttr(b, g)
		}
		if len(b) == m {
			return b[:n]
		}
		return append(b, '}')
	}
	if a.Key == "" {
		return b
	}
	return c.appendKeyed(b, a.Key, v)
}

// appendKeyed appends key and the value v (no group), as zap encodes them.
// Unlike appendAttr, it writes an empty key too: zap keeps such a field
// of the configuration's initialFields, where slog drops an attribute
// without a key.
func (c *zapCore) appendKeyed(b []byte, key string, v slog.Value) []byte {
	if v.Kind() == slog.KindAny {
		// zap.Any's encodings of what queue logs: errors and Stringers as
		// strings, bytes as base64, the rest through encoding/json (zap's
		// reflected encoder), which only values queue does not log reach.
		switch x := v.Any().(type) {
		case nil:
			b = c.appendKey(b, key)
			return append(b, "null"...)
		case error:
			b = c.appendKey(b, key)
			return appendZapString(b, x.Error())
		case fmt.Stringer:
			b = c.appendKey(b, key)
			return appendZapString(b, x.String())
		case []byte:
			b = c.appendKey(b, key)
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, x)
			return append(b, '"')
		default:
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(x); err != nil {
				b = c.appendKey(b, key+"Error")
				return appendZapString(b, err.Error())
			}
			b = c.appendKey(b, key)
			return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	b = c.appendKey(b, key)
	switch v.Kind() {
	case slog.KindString:
		return appendZapString(b, v.String())
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindFloat64:
		return appendZapFloat(b, v.Float64(), true)
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool())
	case slog.KindTime:
		return c.appendTime(b, v.Time(), true)
	case slog.KindDuration:
		d := v.Duration()
		switch c.enc.EncodeDuration {
		case durationString:
			return appendZapString(b, d.String())
		case durationNanos:
			return strconv.AppendInt(b, int64(d), 10)
		case durationMillis:
			return strconv.AppendInt(b, d.Nanoseconds()/1e6, 10)
		}
		return appendZapFloat(b, float64(d)/float64(time.Second), true)
	}
	return appendZapString(b, v.String())
}

// appendZapString appends s as a JSON string escaped as zap escapes:
// backslash, quote, \n, \r, \t, other control bytes as \u00XX, invalid
// UTF-8 as \ufffd; nothing else (no HTML escaping).
func appendZapString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendZapEscaped(b, s)
	return append(b, '"')
}

func appendZapEscaped(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	last := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			b = append(b, s[last:i]...)
			b = append(b, `\ufffd`...)
			i++
			last = i
			continue
		}
		if c >= 0x20 && c != '\\' && c != '"' {
			i++
			continue
		}
		b = append(b, s[last:i]...)
		switch c {
		case '\\', '"':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		last = i
	}
	return append(b, s[last:]...)
}

// sampler is zap's sampler (zapcore.NewSamplerWithOptions with a tick of
// one second): per level and message, each second, the first lines pass,
// then every thereafter-th. Messages share a counter when their hash
// does, as in zap, over 256 counters per level rather than zap's 4096:
// queue has a few dozen messages.
type sampler struct {
	first, thereafter uint64
	counts            [4][256]sampleCounter
}

type sampleCounter struct {
	resetAt atomic.Int64
	n       atomic.Uint64
}

func (s *sampler) keep(l slog.Level, msg string, t time.Time) bool {
	// FNV-1a, as zap.
	h := uint32(2166136261)
	for i := 0; i < len(msg); i++ {
		h ^= uint32(msg[i])
		h *= 16777619
	}
	c := &s.counts[levelIndex(l)][h%256]
	n := c.inc(t.UnixNano(), int64(time.Second))
	return n <= s.first || s.thereafter != 0 && (n-s.first)%s.thereafter == 0
}

func (c *sampleCounter) inc(now, tick int64) uint64 {
	reset := c.resetAt.Load()
	if reset > now {
		return c.n.Add(1)
	}
	c.n.Store(1)
	if !c.resetAt.CompareAndSwap(reset, now+tick) {
		return c.n.Add(1) // another line reset it meanwhile
	}
	return 1
}
