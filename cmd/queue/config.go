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

// Config is queue's validated configuration. Its fields are the flags of
// ../../../shared/CONTRACT.md section 1.
type Config struct {
	Upstream             string // host:port, ":8080" already turned into 127.0.0.1:8080
	UpstreamProtocol     string // proxy.HTTP1 or proxy.H2C
	Listen               string
	TLSListen            string
	TLSCert, TLSKey      string
	AdminListen          string
	StatsListen          string
	MetricsListen        string
	Concurrency          int
	QueueDepth           int
	Timeout              time.Duration
	ResponseStartTimeout time.Duration
	IdleTimeout          time.Duration
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
	PProf                bool
	Version              bool
	// Labels are the revision labels of the metrics and logs, from the
	// Knative environment.
	Labels Labels
	// PodIP is SERVING_POD_IP, for the logs.
	PodIP string
	// KnativeCertDir holds tls.crt and tls.key when Knative mounts them.
	KnativeCertDir string
	// TLSMinVersion raises the TLS floor above 1.2 (QUEUE_PROXY_TLS_MIN_VERSION).
	TLSMinVersion uint16
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
}

// ConfigError is a configuration mistake: queue exits 2 with its message.
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

func configErrorf(format string, a ...any) error {
	return &ConfigError{msg: fmt.Sprintf(format, a...)}
}

// parseConfig reads flags from args and, for each flag not given, its
// QUEUE_* variable through getenv. Flags win over the environment, the
// environment over defaults.
func parseConfig(args []string, getenv func(string) string) (Config, error) {
	c := Config{
		UpstreamProtocol: proxy.HTTP1,
		Listen:           ":8012",
		TLSListen:        ":8112",
		AdminListen:      ":8022",
		StatsListen:      ":9090",
		MetricsListen:    ":9091",
		Timeout:          300 * time.Second,
		Probe:            "tcp",
		DrainQuietPeriod: 30 * time.Second,
		MaxConnections:   10000,
		LogFormat:        "json",
		LogLevel:         "info",
		KnativeCertDir:   DefaultKnativeCertDir,
	}
	c.TrustedProxies, _ = headers.ParseTrust(headers.DefaultTrust)
	queueDepth, drainTimeout := -1, time.Duration(-1)

	fs := flag.NewFlagSet("queue", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(addrValue{&c.Upstream, true}, "upstream", "")
	fs.Var(enumValue{&c.UpstreamProtocol, []string{proxy.HTTP1, proxy.H2C}}, "upstream-protocol", "")
	fs.Var(addrValue{&c.Listen, false}, "listen", "")
	fs.Var(addrValue{&c.TLSListen, false}, "tls-listen", "")
	fs.Var(stringValue{&c.TLSCert}, "tls-cert", "")
	fs.Var(stringValue{&c.TLSKey}, "tls-key", "")
	fs.Var(addrValue{&c.AdminListen, false}, "admin-listen", "")
	fs.Var(addrValue{&c.StatsListen, false}, "stats-listen", "")
	fs.Var(addrValue{&c.MetricsListen, false}, "metrics-listen", "")
	fs.Var(intValue{&c.Concurrency}, "concurrency", "")
	fs.Var(intValue{&queueDepth}, "queue-depth", "")
	fs.Var(durationValue{&c.Timeout}, "timeout", "")
	fs.Var(durationValue{&c.ResponseStartTimeout}, "response-start-timeout", "")
	fs.Var(durationValue{&c.IdleTimeout}, "idle-timeout", "")
	fs.Var(probeValue{&c.Probe}, "probe", "")
	fs.Var(durationValue{&c.ProbePeriod}, "probe-period", "")
	fs.Var(durationValue{&c.DrainQuietPeriod}, "drain-quiet-period", "")
	fs.Var(durationValue{&drainTimeout}, "drain-timeout", "")
	fs.Var(intValue{&c.MaxConnections}, "max-connections", "")
	fs.Var(trustValue{&c.TrustedProxies}, "trusted-proxies", "")
	fs.Var(rateValue{&c.TraceSampleRate}, "trace-sample-rate", "")
	fs.Var(enumValue{&c.LogFormat, []string{"json", "text"}}, "log-format", "")
	fs.Var(enumValue{&c.LogLevel, []string{"debug", "info", "warn", "error"}}, "log-level", "")
	fs.Var(boolValue{&c.AccessLog}, "access-log", "")
	fs.Var(boolValue{&c.PProf}, "pprof", "")
	fs.Var(boolValue{&c.Version}, "version", "")
	fs.Var(stringValue{&c.KnativeCertDir}, "knative-cert-dir", "")

	if err := fs.Parse(args); err != nil {
		return c, flagError(err)
	}
	if fs.NArg() > 0 {
		return c, configErrorf("unexpected argument %q: queue takes only flags (see --help)", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || envErr != nil {
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
		given[f.Name] = true
	})
	if envErr != nil {
		return c, envErr
	}
	if c.Version {
		return c, nil
	}
	c.Getenv = getenv
	if err := applyKnative(&c, given, getenv); err != nil {
		return c, err
	}

	if c.Upstream == "" {
		return c, configErrorf("missing --upstream (or QUEUE_UPSTREAM, or Knative's USER_PORT): want the user container's host:port, such as :8080")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return c, configErrorf("--tls-cert and --tls-key go together: want both PEM files or neither")
	}
	if queueDepth < 0 {
		queueDepth = 10 * c.Concurrency
	}
	c.QueueDepth = queueDepth
	if drainTimeout < 0 {
		drainTimeout = c.Timeout
	}
	c.DrainTimeout = drainTimeout
	if c.MaxConnections == 0 {
		return c, configErrorf("invalid value 0 for --max-connections: want a positive number of connections")
	}
	return c, nil
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

type durationValue struct{ p *time.Duration }

func (v durationValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
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
