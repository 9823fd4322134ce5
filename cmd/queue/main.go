// Command queue is an L7 ingress proxy that runs as a sidecar in front of one
// user container. See README.md and docs/contract.md for what it promises.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
)

// Set by the linker: go build -ldflags "-X main.version=v1.2.3 -X main.commit=abc".
var (
	version = ""
	commit  = ""
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is queue's whole life; it returns the exit status: 0 after a clean
// drain (and for --help and --version), 1 for a runtime failure (a port in
// use, a second signal), 2 for bad configuration. SIGTERM drains with the
// quiet period, SIGINT (Ctrl-C) without it; a second signal exits 1 at once.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	demo := len(args) > 0 && args[0] == "demo"
	if demo {
		args = args[1:]
	}
	cfg, err := parseConfigDemo(args, getenv, demo)
	if errors.Is(err, flag.ErrHelp) {
		writeUsage(stdout)
		return 0
	}
	if demo && err == nil && demoUpstreamGiven(args) {
		err = configErrorf("queue demo runs its own echo upstream: want no --upstream (or run queue --upstream ADDR)")
	}
	if err != nil {
		fmt.Fprintf(stderr, "queue: %v\n", err)
		return 2
	}
	if cfg.Version {
		v, c := buildInfo()
		fmt.Fprintf(stdout, "queue %s commit %s %s\n", v, c, runtime.Version())
		return 0
	}
	log := newLogger(cfg, stderr)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var echo *demoUpstream
	if demo {
		if echo, err = startDemoUpstream(); err != nil {
			fmt.Fprintf(stderr, "queue: demo upstream: %v\n", err)
			return 1
		}
		defer echo.Close()
		cfg.Upstream = echo.Addr()
	}
	cpuLimit, cpuDir, procs := sidecarProcs(getenv)
	if cpuDir != "" && cfg.OverloadGuard {
		cfg.CPUStat = filepath.Join(cpuDir, "cpu.stat")
	}
	a, err := newApp(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "queue: %v\n", err)
		var ce *ConfigError
		if errors.As(err, &ce) {
			return 2
		}
		return 1
	}
	logStart(log, cfg, cpuLimit, procs, a.guard != nil)
	logKnative(log, cfg)
	if demo {
		printDemo(stdout, a.addrs(), echo.Addr())
	}

	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
	done := make(chan error, 1)
	go func() { done <- a.serve(ctx) }()
	select {
	case err = <-done:
	case sig := <-signals:
		// Start first: once the line is out, probes must already answer 503.
		a.drainer.Start(sig == syscall.SIGINT)
		log.LogAttrs(ctx, slog.LevelInfo, "signal received, draining", slog.String("signal", sig.String()))
		select {
		case err = <-done:
		case sig := <-signals:
			log.LogAttrs(ctx, slog.LevelWarn, "second signal, exiting at once", slog.String("signal", sig.String()))
			return 1
		}
	}
	if err != nil {
		log.LogAttrs(ctx, slog.LevelError, "stopped", slog.Any("err", err))
		return 1
	}
	return 0
}

// demoUpstreamGiven reports whether the demo's flags name an upstream,
// which the demo would replace with its echo.
func demoUpstreamGiven(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "upstream" {
			return true
		}
	}
	return false
}

// buildInfo returns the version and commit, from the linker flags or else
// from the module's build information.
func buildInfo() (string, string) {
	v, c := version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && c == "" {
				c = s.Value
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	if c == "" {
		c = "unknown"
	}
	return v, c
}

// newLogger builds queue's one logger, writing to w (stderr): slog's JSON
// or text with queue's keys, or with --log-format zap (Knative mode's
// default) zap's format as SERVING_LOGGING_CONFIG configures it, whose
// "stderr" is w and "stdout" the process's stdout (zaplog.go).
func newLogger(cfg Config, w io.Writer) *slog.Logger {
	if cfg.LogFormat == "zap" {
		return newZapLogger(cfg.ZapLog, os.Stdout, w)
	}
	var level slog.Level
	level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	attrs := []any{slog.String("component", "queue")}
	for _, kv := range [...][2]string{{"namespace", cfg.Labels.Namespace}, {"service", cfg.Labels.Service},
		{"configuration", cfg.Labels.Configuration}, {"revision", cfg.Labels.Revision}, {"pod", cfg.Labels.Pod},
		{"pod_ip", cfg.PodIP}} {
		if kv[1] != "" {
			attrs = append(attrs, slog.String(kv[0], kv[1]))
		}
	}
	return slog.New(h).With(attrs...)
}

// mode names the mode for the log: knative or standalone.
func mode(c Config) string {
	if c.KnativeMode {
		return "knative"
	}
	return "standalone"
}

// logStart writes the first line: version, commit, the CPU limit read from
// the cgroup (0: none) and GOMAXPROCS (procs.go), the effective
// configuration, and whether the overload guard runs (guard). Nothing in Config is secret today (certificates are
// file names, not contents).
func logStart(log *slog.Logger, c Config, cpuLimit float64, procs int, guard bool) {
	v, commit := buildInfo()
	version := []slog.Attr{slog.String("version", v), slog.String("commit", commit)}
	if c.LogFormat == "zap" && knativeCommit() != "" {
		// Every line has Knative's commit already: a second key of the
		// same name would make the line one that some log stores refuse.
		version = version[:1]
	}
	log.LogAttrs(context.Background(), slog.LevelInfo, "queue starting", append(version,
		slog.String("go", runtime.Version()),
		slog.Float64("cpu_limit", cpuLimit), slog.Int("gomaxprocs", procs),
		slog.Group("config",
			slog.String("mode", mode(c)),
			slog.String("upstream", c.Upstream),
			slog.String("upstream_protocol", c.UpstreamProtocol),
			slog.String("listen", c.Listen),
			slog.String("tls_listen", c.TLSListen),
			slog.String("tls_cert", c.TLSCert),
			slog.String("tls_key", c.TLSKey),
			slog.String("admin_listen", c.AdminListen),
			slog.String("stats_listen", c.StatsListen),
			slog.String("metrics_listen", c.MetricsListen),
			slog.Int("concurrency", c.Concurrency),
			slog.Bool("concurrency_auto", c.AdaptiveConcurrency),
			slog.Int("queue_depth", c.QueueDepth),
			slog.Bool("overload_guard", guard),
			slog.String("timeout", c.Timeout.String()),
			slog.String("response_start_timeout", c.ResponseStartTimeout.String()),
			slog.String("idle_timeout", c.IdleTimeout.String()),
			slog.String("upstream_idle_timeout", c.UpstreamIdleTimeout.String()),
			slog.String("upstream_retry_window", c.UpstreamRetryWindow.String()),
			slog.String("probe", c.Probe),
			slog.String("probe_period", c.ProbePeriod.String()),
			slog.String("drain_quiet_period", c.DrainQuietPeriod.String()),
			slog.String("drain_timeout", c.DrainTimeout.String()),
			slog.Int("max_connections", c.MaxConnections),
			slog.String("trusted_proxies", c.TrustedProxies.String()),
			slog.Float64("trace_sample_rate", c.TraceSampleRate),
			slog.Bool("access_log", c.AccessLog),
			slog.Bool("pprof", c.PProf),
			slog.String("pprof_listen", c.PProfListen),
		))...)
}

// usageHead is the start of --help; writeUsage adds the flags, made from
// the FlagSet itself, then usageTail.
const usageHead = `queue: an L7 ingress proxy for one user container.

Usage:
  queue --upstream HOST:PORT [flags]   proxy to the user container
  queue demo [flags]                   a built-in echo upstream with queue in front of it, on loopback
  queue --version                      print the version and exit
  queue --help                         print this and exit

Each flag can be set by its environment variable instead (after the flag below).
A flag wins over its variable, the variable over Knative's (after "Knative:"),
and that over the default.

Modes: with SERVING_REVISION set, as Knative Serving sets it on its queue-proxy,
queue is in Knative mode and takes Knative's defaults where they differ (after
"Knative mode:"); without it, queue is standalone.

Flags:
`

const usageTail = `
Signals:
  SIGTERM  drain: probes answer 503 at once; once no request has come for
           --drain-quiet-period the listeners close, in-flight requests finish
           (at most --drain-timeout), and queue exits 0. Standalone the quiet
           period is 0: docker stop ends queue at once when nothing is in flight.
  SIGINT   (Ctrl-C) the same drain without the quiet period.
  A second SIGTERM or SIGINT during a drain exits 1 at once.

Exit status:
  0  drained after a signal; --help; --version
  1  a runtime failure (a port in use, a server error), or a second signal
  2  a configuration error, named in one line on stderr
`

// writeUsage writes --help. The flags come from the FlagSet, with their
// variables and both modes' defaults, so that --help cannot miss one.
func writeUsage(w io.Writer) {
	std, kn := defaultConfig(false), defaultConfig(true)
	var su, ku unset
	sfs, kfs := newFlagSet(&std, &su), newFlagSet(&kn, &ku)
	var b strings.Builder
	b.WriteString(usageHead)
	sfs.VisitAll(func(f *flag.Flag) {
		arg, meaning := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if arg != "" {
			head += " " + arg
		}
		info := envName(f.Name)
		if v := knativeVars[f.Name]; v != "" {
			info += " (Knative: " + v + ")"
		}
		def, ok := computedDefaults[f.Name]
		if !ok && f.DefValue != "" && f.DefValue != "false" {
			def = f.DefValue
		}
		switch def {
		case "":
		case "required":
			info += ", required"
		default:
			info += ", default " + def
		}
		if kd := kfs.Lookup(f.Name).DefValue; kd != f.DefValue {
			info += "; Knative mode: " + kd
		}
		fmt.Fprintf(&b, "%-30s %s\n        %s\n", head, info, meaning)
	})
	b.WriteString(usageTail)
	io.WriteString(w, b.String())
}
