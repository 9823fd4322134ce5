package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/queue-dev/queue/chain"
	"github.com/queue-dev/queue/drain"
	"github.com/queue-dev/queue/h1"
	"github.com/queue-dev/queue/ingress"
	"github.com/queue-dev/queue/internal/gostack"
	"github.com/queue-dev/queue/limit"
	"github.com/queue-dev/queue/otlp"
	"github.com/queue-dev/queue/overload"
	"github.com/queue-dev/queue/probe"
	"github.com/queue-dev/queue/proxy"
	"github.com/queue-dev/queue/stats"
	"github.com/queue-dev/queue/tracing"
)

const (
	// readHeaderTimeout and idleTimeout of the admin, stats and metrics
	// servers are the serving port's.
	readHeaderTimeout = ingress.ReadHeaderTimeout
	idleTimeout       = ingress.IdleTimeout
)

// app is a running queue: its listeners, servers and proxy.
type app struct {
	cfg   Config
	log   *slog.Logger
	proxy *proxy.Proxy
	certs *ingress.CertReloader

	ingress        *ingress.Server // the serving and TLS ports
	altSvc         *altSvcHandler  // in front of the ingress's handler: Alt-Svc for HTTP/3
	h3Conn         net.PacketConn  // HTTP/3's socket on the TLS port's number, or nil
	tlsConfig      *tls.Config
	admin          *http.Server
	plainLn, tlsLn net.Listener
	adminLn        net.Listener

	watcher *probe.Watcher
	drainer *drain.Drainer
	stats   *stats.Recorder
	tracer  *tracing.Tracer // nil: tracing off, and not on the request path
	// resource describes queue to OpenTelemetry: target_info, traces and
	// pushed metrics (Config.otelResource).
	resource []otlp.Attr
	// pushExporter sends the request metrics over OTLP, every
	// cfg.Knative.MetricsPush.Interval once serve starts pusher; both nil
	// without a push, and then no timer runs for it.
	pushExporter *otlp.Exporter
	pusher       *otlp.Pusher

	statsSrv, metricsSrv *h1.Server
	statsLn, metricsLn   net.Listener
	promLabels           string
	depth                func() int      // requests waiting for a slot; nil without --concurrency or the overload guard
	guard                *overload.Guard // nil: none (no CPU limit, --overload-guard=false, --concurrency auto)
	limit                func() int      // the adaptive limit now; nil unless --concurrency auto

	// pprofSrv serves /debug/pprof/ on --pprof-listen; nil without it.
	pprofSrv *http.Server
	pprofLn  net.Listener
}

// addrs are the bound addresses, for tests and the demo.
type addrs struct {
	Listen, TLS, Admin, Stats, Metrics string
	PProf                              string // "" without --pprof-listen
}

func (a *app) addrs() addrs {
	var x addrs
	x.Listen = a.plainLn.Addr().String()
	if a.tlsLn != nil {
		x.TLS = a.tlsLn.Addr().String()
	}
	if a.adminLn != nil {
		x.Admin = a.adminLn.Addr().String()
	}
	if a.statsLn != nil {
		x.Stats = a.statsLn.Addr().String()
	}
	if a.metricsLn != nil {
		x.Metrics = a.metricsLn.Addr().String()
	}
	if a.pprofLn != nil {
		x.PProf = a.pprofLn.Addr().String()
	}
	return x
}

// newApp builds everything and binds every listener, so that a port in use
// fails before anything serves.
func newApp(cfg Config, logger *slog.Logger) (*app, error) {
	p, err := proxy.New(proxy.Config{
		Upstream:             cfg.Upstream,
		Protocol:             cfg.UpstreamProtocol,
		Trust:                cfg.TrustedProxies,
		Logger:               logger,
		Timeout:              cfg.Timeout,
		ResponseStartTimeout: cfg.ResponseStartTimeout,
		IdleTimeout:          cfg.IdleTimeout,
		IdleConnTimeout:      cfg.UpstreamIdleTimeout,
		RetryWindow:          cfg.UpstreamRetryWindow,
	})
	if err != nil {
		return nil, &ConfigError{msg: err.Error()}
	}
	a := &app{cfg: cfg, log: logger, proxy: p}
	a.watcher = &probe.Watcher{Prober: newProber(cfg), Period: cfg.ProbePeriod, Logger: logger,
		FailureThreshold: cfg.FailureThreshold, SuccessThreshold: cfg.SuccessThreshold,
		OnReady: p.UpstreamUp}
	var requests *accessLog // nil: no access log
	if cfg.AccessLog {
		requests = newAccessLog(cfg, os.Stdout)
	}
	drainCfg := drain.Config{QuietPeriod: cfg.DrainQuietPeriod, Ready: a.watcher.Ready, WaitReady: a.watcher.WaitReady}
	if requests != nil && cfg.Knative.ProbeRequestLog {
		// Probes in the request log too (Knative's enableProbeRequestLog):
		// drain reports its answers; other requests are not touched.
		drainCfg.OnProbe = requests.done
	}
	a.drainer = drain.New(drainCfg)
	if cfg.TLSCert != "" {
		if a.certs, err = ingress.NewCertReloader(cfg.TLSCert, cfg.TLSKey, logger); err != nil {
			return nil, configErrorf("--tls-cert/--tls-key: %v: want a readable PEM certificate and its key", err)
		}
	}

	statsCfg := stats.Config{}
	if requests != nil {
		statsCfg.OnDone = requests.done
	}
	a.stats = stats.New(statsCfg)
	a.promLabels = cfg.Labels.prometheus()

	getenv := cfg.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	a.resource = resourceAttrs(cfg)
	resBase, service := cfg.otelResource()
	a.tracer, err = tracing.New(context.Background(), tracing.Config{Getenv: getenv, SampleRate: cfg.TraceSampleRate, Logger: logger,
		ServiceName: service, ResourceAttributes: resBase, Stdout: cfg.TraceStdout})
	if err != nil {
		return nil, &ConfigError{msg: err.Error()}
	}
	var pushCfg otlp.Config
	if cfg.Knative.MetricsPush.Protocol != "" {
		var endpoint string
		if pushCfg, endpoint, err = otlp.FromEnv(getenv, otlp.Metrics); err != nil {
			return nil, &ConfigError{msg: err.Error()}
		}
		pushCfg.Logger = logger
		logger.LogAttrs(context.Background(), slog.LevelInfo, "metrics push on",
			slog.String("endpoint", pushDescription(cfg.Knative.MetricsPush, endpoint)))
	}
	var limiter *limit.Limiter // nil: no limit, and not in the chain
	switch {
	case cfg.AdaptiveConcurrency:
		// The wait bound is --timeout's, and the controller's (half the
		// upstream's round trip) once it has measured one.
		limiter, err = limit.New(limit.Config{Adaptive: true, MaxWait: cfg.Timeout})
		if err != nil {
			return nil, &ConfigError{msg: "--concurrency auto: " + err.Error()}
		}
		a.depth, a.limit = limiter.Waiting, limiter.Limit
	case cfg.Concurrency > 0:
		limiter, err = limit.New(limit.Config{Capacity: cfg.Concurrency, QueueDepth: cfg.QueueDepth, MaxWait: cfg.Timeout})
		if err != nil {
			return nil, &ConfigError{msg: "--concurrency/--queue-depth: " + err.Error()}
		}
		a.depth = limiter.Waiting
	}
	var guard *overload.Guard // nil: none
	if cfg.CPUStat != "" && !cfg.AdaptiveConcurrency {
		l := limiter
		if l == nil {
			// No limit until the guard sheds it.
			l, _ = limit.New(limit.Config{Capacity: limit.MaxCapacity, QueueDepth: limit.MaxCapacity, MaxWait: cfg.Timeout})
		}
		if guard, err = overload.New(cfg.CPUStat, l); err != nil {
			logger.LogAttrs(context.Background(), slog.LevelWarn, "overload guard off", slog.Any("err", err))
			guard = nil
		} else {
			// Requests may wait now: queue_depth says how many.
			limiter, a.depth, a.guard = l, l.Waiting, guard
		}
	}
	// The request path in request order (package chain): probes and drain,
	// counting (queued requests count), tracing, the concurrency limit, the
	// proxy. Layers that are off (nil) are not in the chain at all.
	handler, err := chain.New(chain.Config{Drain: a.drainer, Stats: a.stats, Tracer: a.tracer, Limiter: limiter, Guard: guard, Proxy: p})
	if err != nil {
		return nil, err
	}
	errLog := serverLog(logger)
	a.altSvc = &altSvcHandler{next: handler}
	icfg := ingress.Config{
		Handler:           a.altSvc,
		MaxConns:          cfg.MaxConnections,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		Logger:            logger,
	}
	if guard != nil { // a nil *Guard would make a Gate that is not nil
		icfg.Gate = guard
	}
	a.ingress, err = ingress.New(icfg)
	if err != nil {
		return nil, err
	}
	if a.certs != nil {
		a.tlsConfig = a.certs.ServerTLSConfig(cfg.tlsOptions())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /ready", a.drainer.ServeReady)
	mux.HandleFunc("GET /wait-for-drain", a.drainer.ServeWaitForDrain)
	if cfg.PProf {
		registerPProf(mux)
	}
	a.admin = &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, ErrorLog: errLog}
	smux := http.NewServeMux()
	smux.HandleFunc("GET /metrics", a.statsHandler)
	// The scrape ports run on queue's HTTP/1.1 engine, not net/http: a
	// scrape each second then makes no system call through the syscall
	// package, which would wake the runtime's monitor thread at rest
	// (internal/netio).
	a.statsSrv = &h1.Server{Handler: smux, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, Logger: logger}
	mmux := http.NewServeMux()
	mmux.HandleFunc("GET /metrics", a.metricsHandler)
	a.metricsSrv = &h1.Server{Handler: mmux, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, Logger: logger}
	if cfg.PProfListen != "" {
		// net/http serves it: only when asked for, and the CPU profile
		// and the trace stream for seconds.
		pmux := http.NewServeMux()
		registerPProf(pmux)
		a.pprofSrv = &http.Server{Handler: pmux, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, ErrorLog: errLog}
	}

	var lns []net.Listener // closed again if newApp fails after opening them
	closeListeners := func() {
		for _, l := range lns {
			l.Close()
		}
	}
	// Accepted connections get no TCP keep-alive, as in nginx and HAProxy
	// by default: the idle and header timeouts end a connection that
	// carries no request, and the four setsockopt calls per connection
	// that net's default costs are a fifth of what a kubelet probe's
	// connection costs the process. A hijacked connection (a websocket),
	// which may carry nothing for hours, gets it then (h1's Hijack).
	lc := net.ListenConfig{KeepAlive: -1}
	listen := func(addr string) (net.Listener, error) {
		ln, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			closeListeners()
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		lns = append(lns, ln)
		return ln, nil
	}
	if a.plainLn, err = listen(cfg.Listen); err != nil {
		return nil, err
	}
	if a.tlsConfig != nil {
		if a.tlsLn, err = listen(cfg.TLSListen); err != nil {
			return nil, err
		}
		if cfg.HTTP3 {
			if a.h3Conn, err = listenHTTP3(a.tlsLn); err != nil {
				closeListeners()
				return nil, err
			}
			a.altSvc.value = altSvc(a.h3Conn.LocalAddr())
		}
	}
	if a.adminLn, err = listen(cfg.AdminListen); err != nil {
		return nil, err
	}
	if a.statsLn, err = listen(cfg.StatsListen); err != nil {
		return nil, err
	}
	if cfg.MetricsListen != "" { // "": requestMetrics protocol none
		if a.metricsLn, err = listen(cfg.MetricsListen); err != nil {
			return nil, err
		}
	}
	if a.pprofSrv != nil {
		if a.pprofLn, err = listen(cfg.PProfListen); err != nil {
			return nil, err
		}
	}
	if pushCfg.URL != "" {
		if a.pushExporter, err = otlp.New(pushCfg); err != nil {
			closeListeners()
			return nil, &ConfigError{msg: err.Error()}
		}
	}
	return a, nil
}

// newProber turns --probe into a prober of the upstream.
func newProber(cfg Config) probe.Prober {
	switch {
	case cfg.Prober != nil:
		return cfg.Prober
	case cfg.Probe == "none":
		return probe.None{}
	case cfg.Probe == "grpc":
		return &probe.GRPC{Addr: cfg.Upstream}
	case strings.HasPrefix(cfg.Probe, "http:"):
		return &probe.HTTP{URL: "http://" + cfg.Upstream + strings.TrimPrefix(cfg.Probe, "http:"), DetectHTTP2: cfg.DetectHTTP2}
	}
	return probe.TCP{Addr: cfg.Upstream}
}

// serve runs every server until a drain completes or a server fails.
func (a *app) serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.guard != nil {
		defer a.guard.Close() // after the servers: requests look at it to the last
	}
	errc := make(chan error, 6)
	// Each server's accept loop, and the watcher, lives as long as the
	// process: their stacks grow before the start-up pages go.
	run := func(name string, f func() error) {
		go func() {
			gostack.Grow()
			if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s server: %w", name, err)
			}
		}()
	}
	run("serving", func() error { return a.ingress.Serve(a.plainLn) })
	if a.tlsLn != nil {
		run("tls", func() error { return a.ingress.ServeTLS(a.tlsLn, a.tlsConfig) })
	}
	if a.h3Conn != nil {
		run("http3", func() error { return a.ingress.ServeHTTP3(a.h3Conn, a.tlsConfig) })
	}
	run("admin", func() error { return a.admin.Serve(a.adminLn) })
	run("stats", func() error { return a.statsSrv.Serve(a.statsLn) })
	if a.metricsLn != nil {
		run("metrics", func() error { return a.metricsSrv.Serve(a.metricsLn) })
	}
	if a.pprofSrv != nil {
		run("profiling", func() error { return a.pprofSrv.Serve(a.pprofLn) })
	}
	if a.pushExporter != nil {
		a.pusher = otlp.StartPusher(a.pushExporter, a.cfg.Knative.MetricsPush.Interval, a.otlpMetrics)
	}
	go func() {
		gostack.Grow()
		a.watcher.Run(ctx)
	}()
	go a.releaseWhenReady(ctx)
	go releaseAtRest(ctx, a.drainer.Arrivals, a.log)
	// Canceling ctx drains at once, even in the middle of a quiet period.
	defer context.AfterFunc(ctx, func() { a.drainer.Start(true) })()

	select {
	case err := <-errc:
		return err
	case <-a.drainer.Started():
	}
	// Probes answer 503 from here on; requests are still served until none
	// has come for the quiet period (none at all after SIGINT).
	a.drainer.WaitQuiet(context.Background())
	return a.drain()
}

// releaseWhenReady releases the start-up pages (resident_linux.go) once the
// upstream is first seen ready: by then what runs once has run, and what
// serving needs is about to run again.
func (a *app) releaseWhenReady(ctx context.Context) {
	for {
		ch := a.watcher.Changed()
		if a.watcher.Ready() {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
	if n, err := releaseStartupPages(); err != nil {
		a.log.LogAttrs(ctx, slog.LevelDebug, "start-up pages kept", slog.Any("err", err))
	} else {
		a.log.LogAttrs(ctx, slog.LevelDebug, "start-up pages released", slog.Int64("bytes", n))
	}
}

// drain closes the listeners, lets in-flight requests and tunnels finish
// within --drain-timeout (0: no limit), and closes what is left.
func (a *app) drain() error {
	a.log.LogAttrs(context.Background(), slog.LevelInfo, "closing listeners")
	ctx := context.Background()
	if a.cfg.DrainTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.cfg.DrainTimeout)
		defer cancel()
	}
	if err := a.ingress.Shutdown(ctx); err != nil {
		a.log.LogAttrs(ctx, slog.LevelWarn, "connections cut at drain timeout", slog.Any("err", err))
	}
	if err := a.proxy.WaitTunnels(ctx); err != nil {
		a.log.LogAttrs(ctx, slog.LevelWarn, "websocket connections cut at drain timeout", slog.Int("open", a.proxy.Tunnels()))
	}
	a.proxy.Close()
	if a.pusher != nil {
		// The last push: what came since the one before would be lost.
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		a.pusher.Shutdown(flush)
		cancel()
	}
	if a.tracer != nil {
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		a.tracer.Shutdown(flush)
		cancel()
	}
	a.drainer.Finish()
	// Let /wait-for-drain answer before the admin port goes.
	adminCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := a.admin.Shutdown(adminCtx); err != nil {
		a.admin.Close()
	}
	a.statsSrv.Close()
	a.metricsSrv.Close()
	if a.pprofSrv != nil {
		a.pprofSrv.Close()
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, "drained")
	return nil
}

// serverLog routes net/http's error log into slog. Handshake failures and
// broken prefaces are what scanners and hostile clients cause: debug, so
// they cannot flood the log; anything else, a handler panic included, warns.
func serverLog(l *slog.Logger) *log.Logger {
	return log.New(levelWriter{l}, "", 0)
}

type levelWriter struct{ l *slog.Logger }

func (w levelWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelWarn
	if strings.Contains(msg, "TLS handshake error") || strings.Contains(msg, "error reading preface") ||
		strings.Contains(msg, "URL query contains semicolon") || strings.Contains(msg, "http2: server connection error") {
		level = slog.LevelDebug
	}
	w.l.LogAttrs(context.Background(), level, msg, slog.String("source", "net/http"))
	return len(p), nil
}
