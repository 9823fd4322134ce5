// Command queue is an L7 ingress proxy that runs as a sidecar in front of one
// user container. See README.md and CONTRACT.md for what it promises.
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
	"runtime"
	"runtime/debug"
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
// drain, 1 for a runtime failure (a port in use, a second signal), 2 for bad
// configuration.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	demo := len(args) > 0 && args[0] == "demo"
	if demo {
		args = args[1:]
	}
	cfg, err := parseConfigDemo(args, getenv, demo)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
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
	a, err := newApp(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "queue: %v\n", err)
		var ce *ConfigError
		if errors.As(err, &ce) {
			return 2
		}
		return 1
	}
	logStart(log, cfg)
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
		log.LogAttrs(ctx, slog.LevelInfo, "signal received, draining", slog.String("signal", sig.String()))
		a.drainer.Start(sig == syscall.SIGINT)
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

func newLogger(cfg Config, w io.Writer) *slog.Logger {
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

// logStart writes the first line: version, commit and the effective
// configuration. Nothing in Config is secret today (certificates are
// file names, not contents).
func logStart(log *slog.Logger, c Config) {
	v, commit := buildInfo()
	log.LogAttrs(context.Background(), slog.LevelInfo, "queue starting",
		slog.String("version", v), slog.String("commit", commit), slog.String("go", runtime.Version()),
		slog.Group("config",
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
			slog.Int("queue_depth", c.QueueDepth),
			slog.String("timeout", c.Timeout.String()),
			slog.String("response_start_timeout", c.ResponseStartTimeout.String()),
			slog.String("idle_timeout", c.IdleTimeout.String()),
			slog.String("probe", c.Probe),
			slog.String("probe_period", c.ProbePeriod.String()),
			slog.String("drain_quiet_period", c.DrainQuietPeriod.String()),
			slog.String("drain_timeout", c.DrainTimeout.String()),
			slog.Int("max_connections", c.MaxConnections),
			slog.String("trusted_proxies", c.TrustedProxies.String()),
			slog.Float64("trace_sample_rate", c.TraceSampleRate),
			slog.Bool("access_log", c.AccessLog),
			slog.Bool("pprof", c.PProf),
		))
}

const usage = `queue: an L7 ingress proxy for one user container.

Usage:
  queue --upstream HOST:PORT [flags]   proxy to the user container
  queue demo [flags]                   start a built-in echo upstream and queue in front of it
  queue --version

Every flag has an environment fallback QUEUE_<FLAG> (--drain-timeout -> QUEUE_DRAIN_TIMEOUT).

Flags:
  --upstream ADDR              user container, :8080 means 127.0.0.1:8080 (required)
  --upstream-protocol P        http1 (default) or h2c
  --listen ADDR                serving port, HTTP/1.1 and h2c (default :8012)
  --tls-listen ADDR            TLS serving port, on when a certificate is given (default :8112)
  --tls-cert FILE, --tls-key FILE
                               PEM certificate pair, re-read when it changes
  --admin-listen ADDR          /ready, /live, /wait-for-drain (default :8022)
  --stats-listen ADDR          autoscaler Stat protobuf at /metrics (default :9090)
  --metrics-listen ADDR        Prometheus text at /metrics (default :9091)
  --concurrency N              most requests in flight upstream; 0 = unlimited
  --queue-depth N              requests that may wait for a slot (default 10*concurrency)
  --timeout D                  whole-request limit (default 300s); 0 = none
  --response-start-timeout D   limit until the first response byte; 0 = none
  --idle-timeout D             limit between two response writes; 0 = none
  --probe SPEC                 tcp (default), http:/path, grpc or none
  --probe-period D             0 = aggressive until ready; else one probe per period
  --drain-quiet-period D       after SIGTERM, serve until no request came for D (default 30s)
  --drain-timeout D            then wait at most D for in-flight requests (default --timeout)
  --max-connections N          open client connections at most (default 10000)
  --trusted-proxies CIDRS      peers whose Forwarded/X-Forwarded-* are kept
  --trace-sample-rate F        share of new traces, 0 to 1 (default 0)
  --log-format F               json (default) or text
  --log-level L                debug, info (default), warn, error
  --access-log                 one JSON line per request to stdout
  --pprof                      serve /debug/pprof/ on the admin port
  --version                    print version and exit
`
