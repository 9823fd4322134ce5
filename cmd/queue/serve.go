//lint:file-ignore SA1019 x/net's http2.Server serves the connections that "Upgrade: h2c" hands over (see proxy.H2CUpgrade); ConfigureServer gives those connections a GOAWAY on drain.

package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queue-dev/queue/drain"
	"github.com/queue-dev/queue/limit"
	"github.com/queue-dev/queue/probe"
	"github.com/queue-dev/queue/proxy"
	"github.com/queue-dev/queue/stats"
	"github.com/queue-dev/queue/tracing"
	"golang.org/x/net/http2"
)

// Limits of the client-facing servers. They are not flags: they bound
// hostile clients and no honest one comes near them.
const (
	// readHeaderTimeout cuts a client that sends its request head slowly
	// (slowloris).
	readHeaderTimeout = 10 * time.Second
	// idleTimeout closes keep-alive connections idle this long. It is above
	// the 90 s that Go's and Envoy's clients keep idle connections, so that
	// the client, not queue, closes first and no request races a close.
	idleTimeout = 120 * time.Second
	// maxHeaderBytes is the request head limit; over it, 431. net/http reads
	// 4096 bytes past MaxHeaderBytes before it refuses, hence the subtraction.
	maxHeaderBytes = 64<<10 - 4096
	// maxConcurrentStreams per HTTP/2 connection.
	maxConcurrentStreams = 250
	// certPollPeriod is how often the certificate files are re-read.
	certPollPeriod = time.Second
)

// app is a running queue: its listeners, servers and proxy.
type app struct {
	cfg   Config
	log   *slog.Logger
	proxy *proxy.Proxy
	certs *proxy.CertReloader
	conns *connLimit

	plain, tls, admin *http.Server
	plainLn, tlsLn    net.Listener
	adminLn           net.Listener
	upgrade           *proxy.H2CUpgrade
	h2Shutdown        *http.Server // fronts upgraded h2c connections for GOAWAY on drain

	watcher *probe.Watcher
	drainer *drain.Drainer
	stats   *stats.Recorder
	tracer  *tracing.Tracer // nil: tracing off, and not on the request path

	statsSrv, metricsSrv *http.Server
	statsLn, metricsLn   net.Listener
	promLabels           string
	depth                func() int // requests waiting for a slot; nil without --concurrency
}

// addrs are the bound addresses, for tests and the demo.
type addrs struct {
	Listen, TLS, Admin, Stats, Metrics string
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
		x.Metrics = a.metricsLn.Addr().String()
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
	})
	if err != nil {
		return nil, &ConfigError{msg: err.Error()}
	}
	a := &app{cfg: cfg, log: logger, proxy: p}
	a.watcher = &probe.Watcher{Prober: newProber(cfg), Period: cfg.ProbePeriod, Logger: logger,
		FailureThreshold: cfg.FailureThreshold, SuccessThreshold: cfg.SuccessThreshold}
	a.drainer = drain.New(drain.Config{QuietPeriod: cfg.DrainQuietPeriod, Ready: a.watcher.Ready})
	if cfg.TLSCert != "" {
		if a.certs, err = proxy.NewCertReloader(cfg.TLSCert, cfg.TLSKey, logger); err != nil {
			return nil, configErrorf("--tls-cert/--tls-key: %v: want a readable PEM certificate and its key", err)
		}
	}

	statsCfg := stats.Config{}
	if cfg.AccessLog {
		statsCfg.OnDone = (&accessLog{w: os.Stdout}).done
	}
	a.stats = stats.New(statsCfg)
	a.promLabels = cfg.Labels.prometheus()

	// The request path, outermost first (STYLE section 2): probes and
	// drain, counting (queued requests count), the concurrency limit, the
	// proxy. Layers that are off are not in the chain at all.
	mw := []func(http.Handler) http.Handler{a.drainer.Handler, a.stats.Handler}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	a.tracer, err = tracing.New(context.Background(), tracing.Config{Getenv: getenv, SampleRate: cfg.TraceSampleRate, Logger: logger})
	if err != nil {
		return nil, &ConfigError{msg: err.Error()}
	}
	if a.tracer != nil {
		mw = append(mw, a.tracer.Handler) // inside stats: it reads the status from stats' writer
	}
	if cfg.Concurrency > 0 {
		l, err := limit.New(limit.Config{Capacity: cfg.Concurrency, QueueDepth: cfg.QueueDepth, MaxWait: cfg.Timeout})
		if err != nil {
			return nil, &ConfigError{msg: "--concurrency/--queue-depth: " + err.Error()}
		}
		mw = append(mw, l.Handler)
		a.depth = l.Waiting
	}
	handler := chain(p, mw...)
	errLog := serverLog(logger)
	headerTimeout := cfg.ReadHeaderTimeout
	if headerTimeout <= 0 {
		headerTimeout = readHeaderTimeout
	}
	a.plain = ingressServer(handler, false, errLog, headerTimeout)
	a.upgrade = &proxy.H2CUpgrade{
		Next: handler,
		H2: &http2.Server{
			MaxConcurrentStreams: maxConcurrentStreams,
			IdleTimeout:          idleTimeout,
			MaxReadFrameSize:     16 << 10,
		},
		Base: a.plain,
	}
	a.plain.Handler = a.upgrade
	a.h2Shutdown = &http.Server{}
	if err := http2.ConfigureServer(a.h2Shutdown, a.upgrade.H2); err != nil {
		return nil, err
	}
	if a.certs != nil {
		a.tls = ingressServer(handler, true, errLog, headerTimeout)
		a.tls.TLSConfig = a.certs.TLSConfig(cfg.TLSMinVersion)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /ready", a.drainer.ServeReady)
	mux.HandleFunc("GET /wait-for-drain", a.drainer.ServeWaitForDrain)
	if cfg.PProf {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	a.admin = &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, ErrorLog: errLog}
	smux := http.NewServeMux()
	smux.HandleFunc("GET /metrics", a.statsHandler)
	a.statsSrv = &http.Server{Handler: smux, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, ErrorLog: errLog}
	mmux := http.NewServeMux()
	mmux.HandleFunc("GET /metrics", a.metricsHandler)
	a.metricsSrv = &http.Server{Handler: mmux, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, ErrorLog: errLog}

	a.conns = &connLimit{max: int64(cfg.MaxConnections)}
	var lns []net.Listener
	listen := func(addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		lns = append(lns, ln)
		return ln, nil
	}
	if a.plainLn, err = listen(cfg.Listen); err != nil {
		return nil, err
	}
	a.plainLn = a.conns.wrap(a.plainLn)
	if a.tls != nil {
		if a.tlsLn, err = listen(cfg.TLSListen); err != nil {
			return nil, err
		}
		a.tlsLn = a.conns.wrap(a.tlsLn)
	}
	if a.adminLn, err = listen(cfg.AdminListen); err != nil {
		return nil, err
	}
	if a.statsLn, err = listen(cfg.StatsListen); err != nil {
		return nil, err
	}
	if a.metricsLn, err = listen(cfg.MetricsListen); err != nil {
		return nil, err
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
		return &probe.HTTP{URL: "http://" + cfg.Upstream + strings.TrimPrefix(cfg.Probe, "http:")}
	}
	return probe.TCP{Addr: cfg.Upstream}
}

// chain composes the request path: mw[0] is the outermost layer.
func chain(final http.Handler, mw ...func(http.Handler) http.Handler) http.Handler {
	h := final
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

func ingressServer(h http.Handler, tls bool, errLog *log.Logger, headerTimeout time.Duration) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	if tls {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return &http.Server{
		Handler:           h,
		Protocols:         &p,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: maxConcurrentStreams,
			// The protocol's default frame size (RFC 9113 section 4.2): a
			// larger frame is a FRAME_SIZE_ERROR (h2spec 4.2/3) and no peer
			// can make queue buffer a 1 MiB frame (net/http's default).
			MaxReadFrameSize: 16 << 10,
		},
		ErrorLog: errLog,
	}
}

// serve runs every server until a drain completes or a server fails.
func (a *app) serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 5)
	run := func(name string, f func() error) {
		go func() {
			if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s server: %w", name, err)
			}
		}()
	}
	run("serving", func() error { return a.plain.Serve(a.plainLn) })
	if a.tls != nil {
		run("tls", func() error { return a.tls.ServeTLS(a.tlsLn, "", "") })
		go a.certs.Run(ctx, certPollPeriod)
	}
	run("admin", func() error { return a.admin.Serve(a.adminLn) })
	run("stats", func() error { return a.statsSrv.Serve(a.statsLn) })
	run("metrics", func() error { return a.metricsSrv.Serve(a.metricsLn) })
	go a.watcher.Run(ctx)
	go a.stats.Run(ctx)
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
	var wg sync.WaitGroup
	shutdown := func(s *http.Server) {
		if s == nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Shutdown(ctx); err != nil {
				s.Close()
			}
		}()
	}
	shutdown(a.plain)
	shutdown(a.tls)
	shutdown(a.h2Shutdown)
	wg.Wait()
	if err := a.upgrade.Wait(ctx); err != nil {
		a.log.LogAttrs(ctx, slog.LevelWarn, "upgraded h2c connections cut at drain timeout")
	}
	if err := a.proxy.WaitTunnels(ctx); err != nil {
		a.log.LogAttrs(ctx, slog.LevelWarn, "websocket connections cut at drain timeout", slog.Int("open", a.proxy.Tunnels()))
	}
	a.proxy.Close()
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

// connLimit bounds the open client connections across the serving
// listeners. A connection beyond the bound is closed at once, before any
// byte is read: the client sees a reset, not an answer.
type connLimit struct {
	max  int64
	open atomic.Int64
}

func (l *connLimit) wrap(ln net.Listener) net.Listener { return &limitListener{Listener: ln, l: l} }

type limitListener struct {
	net.Listener
	l *connLimit
}

func (ln *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ln.l.open.Add(1) > ln.l.max {
			ln.l.open.Add(-1)
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			c.Close()
			continue
		}
		return &limitConn{Conn: c, l: ln.l}, nil
	}
}

type limitConn struct {
	net.Conn
	l      *connLimit
	closed atomic.Bool
}

func (c *limitConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
	}
	return c.Conn.Close()
}
