package probe_test

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
	"github.com/queue-dev/queue/probe"
)

// Which of protoApp's servers: the HTTP/1.1-only one or the h2c-only one.
const (
	serverH1 = iota
	serverH2C
)

// protoApp is an upstream on one loopback port that speaks HTTP/1.1 only
// or HTTP/2 with prior knowledge only, as the test switches it, and counts
// the connections and requests each of its two servers took.
type protoApp struct {
	addr   string
	h2c    atomic.Bool  // the next connection goes to the h2c-only server
	status atomic.Int32 // what both answer
	conns  [2]atomic.Int32
	reqs   [2]atomic.Int32
}

// chanListener hands the servers the connections protoApp routes to them.
type chanListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *chanListener) Addr() net.Addr { return l.addr }

func startProtoApp(t testing.TB) *protoApp {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &protoApp{addr: ln.Addr().String()}
	a.status.Store(http.StatusOK)
	var lns [2]*chanListener
	for i := range lns {
		lns[i] = &chanListener{conns: make(chan net.Conn), done: make(chan struct{}), addr: ln.Addr()}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a.reqs[i].Add(1)
			w.WriteHeader(int(a.status.Load()))
		}), ReadHeaderTimeout: 5 * time.Second}
		if i == serverH2C {
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			srv.Protocols = &p
		}
		go srv.Serve(lns[i])
		t.Cleanup(func() { srv.Close() })
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			i := serverH1
			if a.h2c.Load() {
				i = serverH2C
			}
			a.conns[i].Add(1)
			select {
			case lns[i].conns <- c:
			case <-lns[i].done:
				c.Close()
			}
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return a
}

// TestHTTPDetectHTTP2: with DetectHTTP2 an h2c-only upstream is probed
// over h2c and an HTTP/1.1 one over HTTP/1.1, and what answered ready is
// remembered: the connections each server took show which attempts each
// probe made. Without it, an h2c-only upstream is never ready.
func TestHTTPDetectHTTP2(t *testing.T) {
	t.Parallel()
	type step struct {
		h2c    bool // the upstream speaks h2c only, else HTTP/1.1 only
		status int  // what it answers
		ready  bool // what the probe must say
	}
	ok := func(h2c bool) step { return step{h2c: h2c, status: 200, ready: true} }
	tests := []struct {
		name   string
		detect bool
		steps  []step
		// connections taken by the HTTP/1.1 and the h2c server over all steps
		wantConns [2]int32
	}{
		{name: "h2c upstream, detection: one h2c connection a probe", detect: true,
			steps: []step{ok(true), ok(true), ok(true)}, wantConns: [2]int32{0, 3}},
		{name: "h2c upstream, no detection: never ready",
			steps: []step{{h2c: true, status: 200}, {h2c: true, status: 200}}, wantConns: [2]int32{0, 2}},
		{name: "HTTP/1.1 upstream, detection: h2c and HTTP/1.1 once, then HTTP/1.1 only", detect: true,
			steps: []step{ok(false), ok(false), ok(false)}, wantConns: [2]int32{4, 0}},
		{name: "HTTP/1.1 upstream, no detection",
			steps: []step{ok(false), ok(false)}, wantConns: [2]int32{2, 0}},
		{name: "not ready yet: both protocols each probe", detect: true,
			steps: []step{{status: 503}, {status: 503}, ok(false), ok(false)}, wantConns: [2]int32{7, 0}},
		{name: "h2c remembered: a 503 over h2c tries no HTTP/1.1", detect: true,
			steps: []step{ok(true), {h2c: true, status: 503}, ok(true)}, wantConns: [2]int32{0, 3}},
		{name: "HTTP/1.1 remembered, upstream replaced by an h2c one: forgotten, found again", detect: true,
			steps: []step{ok(false), {h2c: true, status: 200}, ok(true), ok(true)}, wantConns: [2]int32{2, 3}},
		{name: "a redirect is ready, not followed, over h2c", detect: true,
			steps: []step{{h2c: true, status: 302, ready: true}}, wantConns: [2]int32{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			app := startProtoApp(t)
			p := &probe.HTTP{URL: "http://" + app.addr + "/healthz", Timeout: 5 * time.Second, DetectHTTP2: tt.detect}
			for i, s := range tt.steps {
				app.h2c.Store(s.h2c)
				app.status.Store(int32(s.status))
				err := p.Probe(t.Context())
				if got := err == nil; got != s.ready {
					t.Errorf("probe %d: error %v, want ready %v", i+1, err, s.ready)
				}
			}
			if got := [2]int32{app.conns[serverH1].Load(), app.conns[serverH2C].Load()}; got != tt.wantConns {
				t.Errorf("connections to the HTTP/1.1 and h2c servers = %v, want %v", got, tt.wantConns)
			}
		})
	}
}

// TestHTTPDetectHTTP2Header: the h2c attempt carries the probe's Host and
// headers, as the HTTP/1.1 one does.
func TestHTTPDetectHTTP2Header(t *testing.T) {
	t.Parallel()
	got := make(chan [3]string, 1)
	var proto http.Protocols
	proto.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &proto, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- [3]string{r.Proto, r.Host, r.Header.Get("X-Probe")}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	p := &probe.HTTP{URL: "http://" + ln.Addr().String() + "/", Host: "app.example", Header: http.Header{"X-Probe": {"yes"}}, DetectHTTP2: true}
	if err := p.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The handler sends before it answers: a probe that got its answer
	// finds the request there.
	select {
	case g := <-got:
		if want := [3]string{"HTTP/2.0", "app.example", "yes"}; g != want {
			t.Errorf("upstream saw %q, want %q", g, want)
		}
	default:
		t.Fatal("the probe succeeded, but the upstream's handler saw no request")
	}
}

// BenchmarkHTTPProbe measures an HTTP probe of a loopback upstream, as each
// protocol and state costs it: HTTP/1.1 as without DetectHTTP2, the
// protocol DetectHTTP2 remembered, both attempts while an HTTP/1.1
// upstream is not ready, and a refused connect with and without DetectHTTP2.
func BenchmarkHTTPProbe(b *testing.B) {
	app := startProtoApp(b)
	refused := testnet.ReservePort(b)
	for _, bm := range []struct {
		name   string
		h2c    bool
		status int
		detect bool
		addr   string
	}{
		{name: "h1", status: 200},
		{name: "h1/detected", status: 200, detect: true},
		{name: "h2c/detected", h2c: true, status: 200, detect: true},
		{name: "h1/not-ready/detecting", status: 503, detect: true},
		{name: "refused", addr: refused},
		{name: "refused/detecting", addr: refused, detect: true},
	} {
		b.Run(bm.name, func(b *testing.B) {
			app.h2c.Store(bm.h2c)
			app.status.Store(int32(bm.status))
			addr := app.addr
			if bm.addr != "" {
				addr = bm.addr
			}
			p := &probe.HTTP{URL: "http://" + addr + "/healthz", DetectHTTP2: bm.detect}
			p.Probe(b.Context()) // what DetectHTTP2 learns
			b.ReportAllocs()
			for b.Loop() {
				err := p.Probe(b.Context())
				if got, want := err == nil, bm.status == 200; got != want {
					b.Fatalf("Probe() = %v, want ready %v", err, want)
				}
			}
		})
	}
}
