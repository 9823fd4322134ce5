package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/queue-dev/queue/headers"
	"github.com/queue-dev/queue/probe"
	"github.com/queue-dev/queue/proxy"
)

// Config is queue's validated configuration: the flags of docs/contract.md
// section 1, with what the Knative environment fills in.
type Config struct {
	Upstream            string // host:port, ":8080" already turned into 127.0.0.1:8080
	UpstreamProtocol    string // proxy.HTTP1 or proxy.H2C
	Listen              string
	TLSListen           string
	TLSCert, TLSKey     string
	AdminListen         string
	StatsListen         string
	MetricsListen       string
	Concurrency         int
	AdaptiveConcurrency bool // --concurrency auto (docs/decisions.md D26); Concurrency and QueueDepth are then 0
	// CPUStat is the cpu.stat file of the cgroup whose CPU quota binds the
	// process, found at start (procs.go), for the overload guard; "": no
	// guard. Not a flag.
	CPUStat              string
	QueueDepth           int
	Timeout              time.Duration
	ResponseStartTimeout time.Duration
	IdleTimeout          time.Duration
	UpstreamIdleTimeout  time.Duration // closes idle upstream HTTP/1.1 connections; 0: never
	UpstreamRetryWindow  time.Duration // retries a refused upstream connect this long; 0: never
	Probe                string
	ProbePeriod          time.Duration
	DrainQuietPeriod     time.Duration
	DrainTimeout         time.Duration
	MaxConnections       int
	TrustedProxies       headers.Trust
	TraceSampleRate      float64
	LogFormat            string
	LogLevel             string
	AccessLog            bool
	OverloadGuard        bool // --overload-guard (docs/decisions.md); the guard runs only under a CPU limit (CPUStat)
	PProf                bool
	// HTTP3 serves HTTP/3 on the TLS port's number over UDP when TLS is on:
	// the default outside Knative; in Knative mode only when asked
	// (QUEUE_HTTP3=true), as the ingress, not the end client, talks to the
	// sidecar there.
	HTTP3       bool
	PProfListen string // the profiling port (--pprof-listen); "": none
	Version     bool
	// KnativeMode is true when knativeModeVar is set: queue runs as
	// Knative Serving's queue-proxy and takes Knative's defaults.
	KnativeMode bool
	// Labels are the revision labels of the metrics and logs, from the
	// Knative environment.
	Labels Labels
	// PodIP is SERVING_POD_IP, for the logs.
	PodIP string
	// ZapLog configures the log of --log-format zap, from
	// SERVING_LOGGING_CONFIG and the levels (knative.go, zaplog.go).
	ZapLog zapLog
	// KnativeCertDir holds tls.crt and tls.key when Knative mounts them.
	KnativeCertDir string
	// TLSMinVersion raises the TLS floor above 1.2 (QUEUE_PROXY_TLS_MIN_VERSION;
	// unset, 1.3 in Knative mode: knativeTLSMinVersion).
	TLSMinVersion uint16
	// Knative is what the rest of the Knative environment sets (knative.go).
	Knative Knative
	// DetectHTTP2 makes HTTP readiness probes of http:// URLs find out
	// whether the upstream speaks h2c (ENABLE_HTTP2_AUTO_DETECTION; see
	// probe.HTTP's DetectHTTP2).
	DetectHTTP2 bool
	// Prober, when set, replaces the one --probe describes
	// (SERVING_READINESS_PROBE), with its thresholds.
	Prober                             probe.Prober
	FailureThreshold, SuccessThreshold int
	// Getenv is the environment the configuration was read from; tracing
	// reads OpenTelemetry's variables through it.
	Getenv func(string) string
	// ReadHeaderTimeout bounds reading a request head (slowloris). It is
	// not a flag; 0 means readHeaderTimeout. Tests shorten it.
	ReadHeaderTimeout time.Duration
	// TraceStdout is where spans go with the console exporter (Knative's
	// tracing protocol stdout). It is not a flag; nil means os.Stdout.
	// Tests read it.
	TraceStdout io.Writer
}

// ConfigError is a configuration mistake: queue exits 2 with its message.
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

func configErrorf(format string, a ...any) error {
	return &ConfigError{msg: fmt.Sprintf(format, a...)}
}

// knativeModeVar decides the mode. Knative Serving's reconciler sets it on
// every queue-proxy container it makes (the revision the pod belongs to),
// and nothing outside Knative has a reason to: with it set, queue is in
// Knative mode and takes Knative's defaults (defaultConfig); without it,
// queue is standalone (behind Docker, a plain Kubernetes Service, a
// developer's terminal). The other Knative variables (USER_PORT, ...) are
// read in either mode; only the defaults differ.
const knativeModeVar = "SERVING_REVISION"

// Defaults that differ between the modes.
const (
	// Knative's autoscaler scrapes the Stat protobuf at the pod's :9090,
	// and Knative's queue-proxy waits 30 s after SIGTERM for the network
	// to stop sending (docs/contract.md section 4).
	knativeStatsListen      = ":9090"
	knativeDrainQuietPeriod = 30 * time.Second
	// Standalone, nothing reads the Stat protobuf, so it stays on loopback,
	// and off 9090, which is Prometheus' own default port: a Prometheus on
	// the same host (or in the same pod) would otherwise fail to start, or
	// queue would. No quiet period: SIGTERM (docker stop) closes the
	// listeners at once, in-flight requests finish, and queue exits well
	// inside Docker's 10 s stop timeout. Ask for a quiet period when a load
	// balancer needs time to see the 503 probes (the Kubernetes sample
	// does).
	standaloneStatsListen      = "127.0.0.1:8023"
	standaloneDrainQuietPeriod = 0
)

// knativeVars are the Knative variables that fill a flag's value in either
// mode when neither the flag nor its QUEUE_* variable is given (knative.go
// reads them). Help and error messages name them.
var knativeVars = map[string]string{
	"upstream":               "USER_PORT",
	"listen":                 "QUEUE_SERVING_PORT",
	"tls-listen":             "QUEUE_SERVING_TLS_PORT",
	"concurrency":            "CONTAINER_CONCURRENCY",
	"timeout":                "REVISION_TIMEOUT_SECONDS",
	"response-start-timeout": "REVISION_RESPONSE_START_TIMEOUT_SECONDS",
	"idle-timeout":           "REVISION_IDLE_TIMEOUT_SECONDS",
	"probe":                  "SERVING_READINESS_PROBE",
	"log-level":              "SERVING_LOGGING_LEVEL",
	"pprof-listen":           "OBSERVABILITY_CONFIG",
}

// defaultConfig is the configuration before any flag or variable: the
// standalone defaults, or Knative mode's.
func defaultConfig(knative bool) Config {
	c := Config{
		UpstreamProtocol: proxy.HTTP1,
		Listen:           ":8012",
		TLSListen:        ":8112",
		// All interfaces: the kubelet calls the preStop hook
		// (/wait-for-drain) and the liveness probe (/live) at the pod IP.
		AdminListen:      ":8022",
		StatsListen:      standaloneStatsListen,
		MetricsListen:    ":9091",
		Timeout:          300 * time.Second,
		Probe:            "tcp",
		DrainQuietPeriod: standaloneDrainQuietPeriod,
		MaxConnections:   10000,
		LogFormat:        "json",
		LogLevel:         "info",
		KnativeCertDir:   DefaultKnativeCertDir,
		KnativeMode:      knative,
		HTTP3:            !knative,
		OverloadGuard:    true,
	}
	if knative {
		c.StatsListen = knativeStatsListen
		c.DrainQuietPeriod = knativeDrainQuietPeriod
		// Knative's queue-proxy logs through zap, as config-logging
		// configures it: an operator's log pipeline reads its keys.
		c.LogFormat = "zap"
	}
	c.TrustedProxies, _ = headers.ParseTrust(headers.DefaultTrust)
	// Under the keep-alive timeouts of common app servers, so that the
	// upstream rarely closes a connection first (proxy.DefaultIdleConnTimeout).
	c.UpstreamIdleTimeout = proxy.DefaultIdleConnTimeout
	// Long enough for an upstream that restarts to come back
	// (proxy.DefaultRetryWindow).
	c.UpstreamRetryWindow = proxy.DefaultRetryWindow
	return c
}

// unset is the value of --queue-depth and --drain-timeout until parsing
// gives them one; their defaults depend on other flags.
type unset struct {
	queueDepth   int
	drainTimeout time.Duration
}

// computedDefaults is the default that --help shows for the flags whose
// default is not a value of its own.
var computedDefaults = map[string]string{
	"upstream":      "required",
	"queue-depth":   "10*concurrency",
	"drain-timeout": "--timeout",
}

// newFlagSet defines queue's flags on a new FlagSet, bound to c and u. Each
// usage string is the flag's one-line meaning, with its argument's name in
// backquotes (flag.UnquoteUsage); --help is made from it (writeUsage).
func newFlagSet(c *Config, u *unset) *flag.FlagSet {
	u.queueDepth, u.drainTimeout = -1, -1
	fs := flag.NewFlagSet("queue", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(addrValue{&c.Upstream, true}, "upstream", "the user container at `ADDR` (host:port); :8080 means 127.0.0.1:8080")
	fs.Var(enumValue{&c.UpstreamProtocol, []string{proxy.HTTP1, proxy.H2C}}, "upstream-protocol", "speak `PROTO` to the upstream, whatever the client speaks: http1 (HTTP/1.1) or h2c (HTTP/2 with prior knowledge)")
	fs.Var(addrValue{&c.Listen, false}, "listen", "serve HTTP/1.1 and h2c (prior knowledge and Upgrade) on `ADDR`")
	fs.Var(addrValue{&c.TLSListen, false}, "tls-listen", "serve TLS (HTTP/2 and HTTP/1.1) on `ADDR`; on only with a certificate")
	fs.Var(stringValue{&c.TLSCert}, "tls-cert", "PEM certificate `FILE`, re-read when it changes; needs --tls-key")
	fs.Var(stringValue{&c.TLSKey}, "tls-key", "PEM private key `FILE` of --tls-cert")
	fs.Var(addrValue{&c.AdminListen, false}, "admin-listen", "serve GET /ready, /live, /wait-for-drain (and /debug/pprof/ with --pprof) on `ADDR`")
	fs.Var(addrValue{&c.StatsListen, false}, "stats-listen", "serve Knative's autoscaler Stat (protobuf at /metrics) on `ADDR`")
	fs.Var(addrValue{&c.MetricsListen, false}, "metrics-listen", "serve the Prometheus text at /metrics on `ADDR`")
	fs.Var(concurrencyValue{&c.Concurrency, &c.AdaptiveConcurrency}, "concurrency", "let at most `N` requests be in flight to the upstream; 0 = unlimited; auto = a limit found from the upstream's latency, which rises while its round trip stays near its unloaded one (the queue then follows the limit, and a request waits at most half a round trip)")
	fs.Var(intValue{&u.queueDepth}, "queue-depth", "let at most `N` requests wait for a slot; needs --concurrency N (not auto)")
	fs.Var(boolValue{&c.OverloadGuard}, "overload-guard", "under a CPU limit, while the limit binds, serve at most 16 requests at once (newest waiter first, but one slot in four to the oldest under 3s) and leave new connections in the backlog while requests wait; not with --concurrency auto")
	fs.Var(durationValue{&c.Timeout}, "timeout", "limit each request to `D`; 0 = none")
	fs.Var(durationValue{&c.ResponseStartTimeout}, "response-start-timeout", "limit the wait for the first response byte to `D`, at most --timeout; 0 = none")
	fs.Var(durationValue{&c.IdleTimeout}, "idle-timeout", "limit the wait between two reads of the upstream's response body to `D`, at most --timeout; 0 = none")
	fs.Var(durationValue{&c.UpstreamIdleTimeout}, "upstream-idle-timeout", "close an upstream connection (HTTP/1.1, or h2c with no stream open) idle for `D`, and an HTTP/1.1 one always before the upstream's Keep-Alive timeout; 0 = by that timeout only")
	fs.Var(durationValue{&c.UpstreamRetryWindow}, "upstream-retry-window", "retry a connect the upstream refuses for up to `D` (a restart costs latency, not errors); 0 = never")
	fs.Var(probeValue{&c.Probe}, "probe", "check the upstream's readiness with `SPEC`: tcp, http:/path, grpc or none")
	fs.Var(durationValue{&c.ProbePeriod}, "probe-period", "probe once per `D`; 0 = fast while it matters (start, a failure, a waiting probe), backing off to once a second otherwise")
	fs.Var(durationValue{&c.DrainQuietPeriod}, "drain-quiet-period", "after SIGTERM, serve until no request came for `D`; 0 = close the listeners at once")
	fs.Var(durationValue{&u.drainTimeout}, "drain-timeout", "then wait at most `D` for in-flight requests and upgraded connections; 0 = no limit")
	fs.Var(intValue{&c.MaxConnections}, "max-connections", "keep at most `N` client connections open; one more is closed at once")
	fs.Var(trustValue{&c.TrustedProxies}, "trusted-proxies", "keep Forwarded and X-Forwarded-* from peers in `CIDRS` (comma-separated), or none")
	fs.Var(rateValue{&c.TraceSampleRate}, "trace-sample-rate", "start a sampled trace for a share `F` (0 to 1) of the requests that come without a trace context (one that comes with it keeps its sampling decision); needs tracing on (OTEL_EXPORTER_OTLP_ENDPOINT) and no OTEL_TRACES_SAMPLER")
	fs.Var(enumValue{&c.LogFormat, []string{"json", "text", "zap"}}, "log-format", "write log lines as `FORMAT`: json, text, or zap (Knative's: zap's encoders as SERVING_LOGGING_CONFIG configures them)")
	fs.Var(enumValue{&c.LogLevel, []string{"debug", "info", "warn", "error"}}, "log-level", "log from `LEVEL` up: debug, info, warn or error")
	fs.Var(boolValue{&c.AccessLog}, "access-log", "write one JSON line per request to stdout")
	fs.Var(boolValue{&c.PProf}, "pprof", "serve /debug/pprof/ on the admin port")
	fs.Var(boolValue{&c.HTTP3}, "http3", "serve HTTP/3 (QUIC) on the TLS port's number over UDP when TLS is on")
	fs.Var(addrValue{&c.PProfListen, false}, "pprof-listen", "serve /debug/pprof/ on a port of its own at `ADDR` (Knative: :8008 with runtime profiling on)")
	fs.Var(boolValue{&c.Version}, "version", "print the version, commit and Go version, and exit")
	fs.Var(stringValue{&c.KnativeCertDir}, "knative-cert-dir", "read Knative's tls.crt and tls.key from `DIR` when both exist and no --tls-cert is given")
	return fs
}

// parseConfig reads flags from args and, for each flag not given, its
// QUEUE_* variable through getenv; then the Knative variables fill what is
// still unset, and the mode's defaults the rest. Flags win over QUEUE_*
// variables, those over Knative's variables, those over defaults. Every
// mistake, and every combination in which a setting would be silently
// ignored, is a *ConfigError (exit 2); --help is flag.ErrHelp.
func parseConfig(args []string, getenv func(string) string) (Config, error) {
	return parseConfigFrom(args, getenv, nil)
}

// parseConfigFrom is parseConfig with other defaults: base, when not nil,
// changes the mode's defaults before the flags are read (queue demo).
func parseConfigFrom(args []string, getenv func(string) string, base func(*Config)) (Config, error) {
	c := defaultConfig(getenv(knativeModeVar) != "")
	if base != nil {
		base(&c)
	}
	var u unset
	fs := newFlagSet(&c, &u)

	if err := fs.Parse(args); err != nil {
		return c, flagError(err)
	}
	if fs.NArg() > 0 {
		return c, configErrorf("unexpected argument %q: queue takes only flags (see --help)", fs.Arg(0))
	}
	src := sources{getenv: getenv, from: map[string]string{}}
	fs.Visit(func(f *flag.Flag) { src.from[f.Name] = "--" + f.Name })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if src.from[f.Name] != "" || envErr != nil {
			return
		}
		name := envName(f.Name)
		v := getenv(name)
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			envErr = configErrorf("invalid value %q for %s (--%s): %v", v, name, f.Name, err)
		}
		src.from[f.Name] = name
	})
	if envErr != nil {
		return c, envErr
	}
	if c.Version {
		return c, nil
	}
	c.Getenv = getenv
	given := map[string]bool{}
	for name := range src.from {
		given[name] = true
	}
	if err := applyKnative(&c, given, getenv); err != nil {
		return c, err
	}

	if c.Upstream == "" {
		return c, configErrorf("missing --upstream (or QUEUE_UPSTREAM, or Knative's USER_PORT): want the user container's host:port, such as :8080")
	}
	if u.queueDepth < 0 {
		u.queueDepth = 10 * c.Concurrency
	}
	c.QueueDepth = u.queueDepth
	if u.drainTimeout < 0 {
		u.drainTimeout = c.Timeout
	}
	c.DrainTimeout = u.drainTimeout
	if err := c.validate(src); err != nil {
		return c, err
	}
	return c, nil
}

// sources tells where each setting came from, so that an error names what
// the operator wrote.
type sources struct {
	getenv func(string) string
	from   map[string]string // flag name -> "--flag" or its QUEUE_* variable
}

func (s sources) given(name string) bool { return s.from[name] != "" }

// of names the origin of a flag's value and the value: "--listen :8012",
// "QUEUE_LISTEN :8012", "QUEUE_SERVING_PORT :8012" or, for a default,
// "--listen :8012 (the default)".
func (s sources) of(name, value string) string {
	if from := s.from[name]; from != "" {
		return from + " " + value
	}
	if v := knativeVars[name]; v != "" && s.getenv(v) != "" {
		return v + " (" + value + ")"
	}
	return "--" + name + " " + value + " (the default)"
}

// validate refuses what cannot work and every combination in which a
// setting would have no effect. Each message names the flags (or
// variables) and the form expected.
func (c *Config) validate(src sources) error {
	if c.MaxConnections == 0 {
		return configErrorf("invalid value 0 for --max-connections: want a positive number of connections")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return configErrorf("--tls-cert and --tls-key go together: want both PEM files or neither")
	}
	if src.given("tls-cert") && src.given("knative-cert-dir") {
		return configErrorf("%s is not used with %s: want --tls-cert/--tls-key or --knative-cert-dir, not both",
			src.of("knative-cert-dir", c.KnativeCertDir), src.of("tls-cert", c.TLSCert))
	}
	if src.given("tls-listen") && c.TLSCert == "" {
		return configErrorf("%s has no certificate to serve: want --tls-cert and --tls-key (or tls.crt and tls.key in --knative-cert-dir %s), or no --tls-listen",
			src.of("tls-listen", c.TLSListen), c.KnativeCertDir)
	}
	if src.given("queue-depth") && c.AdaptiveConcurrency {
		return configErrorf("%s with %s: the adaptive limit sizes its own queue (as deep as its limit, a wait of half the upstream's round trip at most); want no --queue-depth, or --concurrency N",
			src.of("queue-depth", strconv.Itoa(c.QueueDepth)), src.of("concurrency", "auto"))
	}
	if src.given("queue-depth") && c.Concurrency == 0 {
		return configErrorf("%s needs a concurrency limit: want --concurrency N (N > 0) too, or no --queue-depth (without a limit nothing waits)",
			src.of("queue-depth", strconv.Itoa(c.QueueDepth)))
	}
	if src.given("probe-period") && c.Probe == "none" {
		return configErrorf("%s with --probe none: want a probe (tcp, http:/path, grpc), or no --probe-period",
			src.of("probe-period", fmtDuration(c.ProbePeriod)))
	}
	// Knative's own pair of values is taken as it comes: the reconciler
	// accepted it, and refusing it would crash-loop the revision. Whichever
	// limit comes first ends the request, as with Knative's queue-proxy.
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"response-start-timeout", c.ResponseStartTimeout}, {"idle-timeout", c.IdleTimeout}} {
		if c.Timeout > 0 && t.d > c.Timeout && (src.given(t.name) || src.given("timeout")) {
			return configErrorf("%s is longer than %s, which ends the request first: want at most --timeout, or 0 (none)",
				src.of(t.name, fmtDuration(t.d)), src.of("timeout", fmtDuration(c.Timeout)))
		}
	}
	if src.given("trace-sample-rate") {
		env := src.getenv
		if env("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && env("OTEL_TRACES_EXPORTER") == "" {
			return configErrorf("%s with tracing off: want OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_TRACES_EXPORTER=otlp) too",
				src.of("trace-sample-rate", strconv.FormatFloat(c.TraceSampleRate, 'g', -1, 64)))
		}
		if env("OTEL_TRACES_SAMPLER") != "" {
			return configErrorf("%s and OTEL_TRACES_SAMPLER %s both choose the sampler: want one of them",
				src.of("trace-sample-rate", strconv.FormatFloat(c.TraceSampleRate, 'g', -1, 64)), env("OTEL_TRACES_SAMPLER"))
		}
	}
	return c.validateAddrs(src)
}

// validateAddrs refuses two listeners on one port and an upstream that is
// one of queue's own listeners (every request would loop).
func (c *Config) validateAddrs(src sources) error {
	type listener struct{ name, addr string }
	lns := []listener{{"listen", c.Listen}}
	if c.TLSCert != "" {
		lns = append(lns, listener{"tls-listen", c.TLSListen})
	}
	lns = append(lns, listener{"admin-listen", c.AdminListen}, listener{"stats-listen", c.StatsListen})
	if c.MetricsListen != "" { // "": no metrics port (requestMetrics protocol none)
		lns = append(lns, listener{"metrics-listen", c.MetricsListen})
	}
	if c.PProfListen != "" {
		lns = append(lns, listener{"pprof-listen", c.PProfListen})
	}
	for i, a := range lns {
		for _, b := range lns[:i] {
			if port, ok := sharePort(a.addr, b.addr); ok {
				return configErrorf("%s and %s both take port %s: want a different port for each listener",
					src.of(b.name, b.addr), src.of(a.name, a.addr), port)
			}
		}
	}
	// Only a loopback upstream is surely this host: another address or a
	// name may be another container (docker compose) on the same port.
	uhost, uport, _ := net.SplitHostPort(c.Upstream)
	if ip := net.ParseIP(uhost); !strings.EqualFold(uhost, "localhost") && (ip == nil || !ip.IsLoopback()) {
		return nil
	}
	uhost = "localhost" // every loopback address reaches a listener on any of them
	for _, l := range lns {
		if port, ok := sharePort(net.JoinHostPort(uhost, uport), l.addr); ok {
			return configErrorf("%s is queue's own %s: every request would come back to queue; want the user container's port, not %s",
				src.of("upstream", c.Upstream), src.of(l.name, l.addr), port)
		}
	}
	return nil
}

// sharePort reports whether two listen addresses would collide: the same
// port (not 0, which the kernel picks) on overlapping hosts. An empty
// host, 0.0.0.0 and :: are every address; localhost is every loopback
// address.
func sharePort(a, b string) (string, bool) {
	ah, ap, err := net.SplitHostPort(a)
	if err != nil {
		return "", false
	}
	bh, bp, err := net.SplitHostPort(b)
	if err != nil || ap != bp {
		return "", false
	}
	if n, err := strconv.Atoi(ap); err != nil || n == 0 {
		return "", false
	}
	return ap, hostsOverlap(ah, bh)
}

func hostsOverlap(a, b string) bool {
	wildcard := func(h string) bool {
		ip := net.ParseIP(h)
		return h == "" || (ip != nil && ip.IsUnspecified())
	}
	local := func(h string) bool {
		ip := net.ParseIP(h)
		return strings.EqualFold(h, "localhost") || (ip != nil && ip.IsLoopback())
	}
	switch {
	case wildcard(a) || wildcard(b):
		return true
	case strings.EqualFold(a, "localhost") && local(b), strings.EqualFold(b, "localhost") && local(a):
		return true
	}
	ia, ib := net.ParseIP(a), net.ParseIP(b)
	if ia != nil && ib != nil {
		return ia.Equal(ib)
	}
	return strings.EqualFold(a, b)
}

// envName is the environment fallback of a flag: --drain-quiet-period ->
// QUEUE_DRAIN_QUIET_PERIOD.
func envName(flagName string) string {
	return "QUEUE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagError rewrites the flag package's messages into one line that names the
// flag in its -- form.
func flagError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return configErrorf("unknown flag --%s (see --help)", strings.TrimPrefix(name, "-"))
	}
	if errors.Is(err, flag.ErrHelp) {
		return flag.ErrHelp
	}
	msg = strings.Replace(msg, "for flag -", "for --", 1)
	msg = strings.Replace(msg, "flag needs an argument: -", "flag needs an argument: --", 1)
	return configErrorf("%s", msg)
}

// fmtDuration writes whole seconds as seconds (300s, not 5m0s), as the
// contract and the Knative variables count them.
func fmtDuration(d time.Duration) string {
	if d != 0 && d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

type stringValue struct{ p *string }

func (v stringValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}
func (v stringValue) Set(s string) error { *v.p = s; return nil }

// addrValue is a host:port. An empty host means all interfaces for a
// listener and 127.0.0.1 for the upstream (a sidecar's upstream is local).
type addrValue struct {
	p        *string
	upstream bool
}

func (v addrValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v addrValue) Set(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil || port == "" {
		return errors.New("want host:port, such as :8080, 127.0.0.1:8080 or [::1]:8080")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (v.upstream && n == 0) {
		return errors.New("want a port number from 1 to 65535 in host:port")
	}
	if v.upstream && host == "" {
		s = net.JoinHostPort("127.0.0.1", port)
	}
	*v.p = s
	return nil
}

type enumValue struct {
	p    *string
	want []string
}

func (v enumValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v enumValue) Set(s string) error {
	for _, w := range v.want {
		if s == w {
			*v.p = s
			return nil
		}
	}
	return fmt.Errorf("want one of %s", strings.Join(v.want, ", "))
}

type intValue struct{ p *int }

func (v intValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return errors.New("want a whole number, 0 or more")
	}
	*v.p = n
	return nil
}

// concurrencyValue is a whole number of requests, 0 for no limit, or auto
// for the adaptive limit (which sets the number to 0).
type concurrencyValue struct {
	n    *int
	auto *bool
}

func (v concurrencyValue) String() string {
	if v.n == nil {
		return ""
	}
	if *v.auto {
		return "auto"
	}
	return strconv.Itoa(*v.n)
}

func (v concurrencyValue) Set(s string) error {
	if s == "auto" {
		*v.n, *v.auto = 0, true
		return nil
	}
	if err := (intValue{v.n}).Set(s); err != nil {
		return fmt.Errorf("%v, or auto", err) // intValue's rule, and its words
	}
	*v.auto = false
	return nil
}

type durationValue struct{ p *time.Duration }

func (v durationValue) String() string {
	if v.p == nil {
		return ""
	}
	return fmtDuration(*v.p)
}

func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return errors.New("want a Go duration, 0 or more, such as 250ms or 30s")
	}
	*v.p = d
	return nil
}

type boolValue struct{ p *bool }

func (v boolValue) IsBoolFlag() bool { return true }
func (v boolValue) String() string {
	if v.p == nil {
		return "false"
	}
	return strconv.FormatBool(*v.p)
}

func (v boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*v.p = b
	return nil
}

type rateValue struct{ p *float64 }

func (v rateValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatFloat(*v.p, 'g', -1, 64)
}

func (v rateValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1 {
		return errors.New("want a number from 0 to 1")
	}
	*v.p = f
	return nil
}

type trustValue struct{ p *headers.Trust }

func (v trustValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}

func (v trustValue) Set(s string) error {
	t, err := headers.ParseTrust(s)
	if err != nil {
		return err
	}
	*v.p = t
	return nil
}

// probeValue is tcp, none, grpc or http:/path.
type probeValue struct{ p *string }

func (v probeValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v probeValue) Set(s string) error {
	switch {
	case s == "tcp", s == "none", s == "grpc":
	case strings.HasPrefix(s, "http:/"):
	default:
		return errors.New("want tcp, http:/path, grpc or none")
	}
	*v.p = s
	return nil
}
