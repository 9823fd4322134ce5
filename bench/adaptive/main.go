// Command adaptive measures --concurrency auto against a real loopback
// upstream with a knee: the upstream answers in -base while at most -knee
// requests run at once, and in base*n/knee with n running beyond (its
// throughput is flat past the knee, as a server whose workers are all
// busy). queue's request path is composed in this process as cmd/queue
// composes it (chain.New with an adaptive limit.Limiter, proxy.New,
// ingress.New, over TCP on loopback), so what is measured is the code
// that runs.
//
// It runs three phases, one after the other, and prints a table:
//
//  1. reference: -knee clients in a closed loop straight to the upstream,
//     for its p99 at the knee;
//  2. each mode (auto; fixed at the knee; no limit) in turn: an open loop
//     of Poisson arrivals at -load times the knee's throughput for
//     -duration, through queue. Client latency runs from each request's
//     scheduled arrival, so a slow queue cannot hide its backlog; the
//     upstream's is timed in its handler.
//
// For auto it also prints the limit every second and when it settled in
// [-knee*3/4, -knee*2] for good. Every loop is bounded in time and
// count; everything listens on 127.0.0.1.
//
//	go run ./bench/adaptive -base 20ms -knee 8 -duration 45s
package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queue-dev/queue/chain"
	"github.com/queue-dev/queue/headers"
	"github.com/queue-dev/queue/ingress"
	"github.com/queue-dev/queue/limit"
	"github.com/queue-dev/queue/proxy"
	"github.com/queue-dev/queue/stats"
)

func main() {
	base := flag.Duration("base", 20*time.Millisecond, "the upstream's latency up to the knee")
	knee := flag.Int("knee", 8, "requests the upstream runs at once before its latency grows")
	load := flag.Float64("load", 2, "offered load, as a multiple of the upstream's throughput at the knee")
	duration := flag.Duration("duration", 45*time.Second, "how long each mode is loaded")
	skip := flag.Duration("skip", 30*time.Second, "the start of each run left out of the latencies (the settling time)")
	modes := flag.String("modes", "auto,fixed,none", "modes to run: auto, fixed (--concurrency knee), none (no limit)")
	flag.Parse()
	if err := run(*base, *knee, *load, *duration, *skip, *modes); err != nil {
		fmt.Fprintf(os.Stderr, "adaptive: %v\n", err)
		os.Exit(1)
	}
}

// upstream is the loopback upstream with a knee.
type upstream struct {
	base    time.Duration
	knee    int64
	running atomic.Int64

	mu  sync.Mutex
	lat []time.Duration // handler times, while recording
	rec bool
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	n := u.running.Add(1)
	d := time.Duration(float64(u.base) * max(1, float64(n)/float64(u.knee)))
	time.Sleep(d) // the upstream's work
	u.running.Add(-1)
	io.WriteString(w, "ok")
	u.mu.Lock()
	if u.rec {
		u.lat = append(u.lat, time.Since(start))
	}
	u.mu.Unlock()
}

func (u *upstream) record(on bool) []time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	lat := u.lat
	u.rec, u.lat = on, nil
	return lat
}

func run(base time.Duration, knee int, load float64, duration, skip time.Duration, modes string) error {
	up := &upstream{base: base, knee: int64(knee)}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	upSrv := &http.Server{Handler: up, ReadHeaderTimeout: 5 * time.Second}
	go upSrv.Serve(upLn)
	defer upSrv.Close()
	upAddr := upLn.Addr().String()

	tr := &http.Transport{MaxIdleConnsPerHost: 4096, MaxConnsPerHost: 4096, DisableCompression: true}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer tr.CloseIdleConnections()

	// 1. The upstream's p99 with knee requests in flight.
	up.record(true)
	var wg sync.WaitGroup
	refEnd := time.Now().Add(5 * time.Second)
	for range knee {
		wg.Go(func() {
			for i := 0; i < 100000 && time.Now().Before(refEnd); i++ {
				if res, err := client.Get("http://" + upAddr + "/"); err == nil {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	ref := quantile(up.record(false), 0.99)
	rate := load * float64(knee) / base.Seconds()
	fmt.Printf("upstream: base %v, knee %d, throughput at the knee %.0f/s; p99 at %d in flight %v\n",
		base, knee, float64(knee)/base.Seconds(), knee, ref.Round(10*time.Microsecond))
	fmt.Printf("load: %.0f requests/s (%.1fx), %v a mode, latencies after the first %v\n\n", rate, load, duration, skip)
	fmt.Printf("%-6s %8s %8s %8s %10s %8s %10s %10s %8s %10s\n", "mode", "served/s", "refused", "failed", "up p99", "(x ref)", "client p50", "client p99", "(x ref)", "limit")

	for _, mode := range []string{"auto", "fixed", "none"} {
		if !slices.Contains(strings.Split(modes, ","), mode) {
			continue
		}
		r, err := loadMode(mode, upAddr, up, client, knee, rate, duration, skip)
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		fmt.Printf("%-6s %8.0f %8d %8d %10v %8.2f %10v %10v %8.2f %10s\n", mode,
			float64(len(r.client))/(duration-skip).Seconds(), r.refused, r.failed,
			r.up99.Round(10*time.Microsecond), float64(r.up99)/float64(ref),
			quantile(r.client, 0.5).Round(10*time.Microsecond), quantile(r.client, 0.99).Round(10*time.Microsecond),
			float64(quantile(r.client, 0.99))/float64(ref), r.limits)
		if r.trace != "" {
			fmt.Print(r.trace)
		}
	}
	return nil
}

type result struct {
	client  []time.Duration // served requests after skip, from their scheduled arrival
	refused int             // 503s after skip
	failed  int             // client timeouts, 502s and 504s after skip: none mode's backlog
	up99    time.Duration
	limits  string // the limit's range after skip
	trace   string // auto: the limit each second
}

func loadMode(mode, upAddr string, up *upstream, client *http.Client, knee int, rate float64, duration, skip time.Duration) (*result, error) {
	trust, err := headers.ParseTrust(headers.DefaultTrust)
	if err != nil {
		return nil, err
	}
	p, err := proxy.New(proxy.Config{Upstream: upAddr, Trust: trust, Timeout: 300 * time.Second})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	var l *limit.Limiter
	switch mode {
	case "auto":
		l, err = limit.New(limit.Config{Adaptive: true, MaxWait: 300 * time.Second})
	case "fixed":
		l, err = limit.New(limit.Config{Capacity: knee, QueueDepth: 10 * knee, MaxWait: 300 * time.Second})
	}
	if err != nil {
		return nil, err
	}
	cfg := chain.Config{Stats: stats.New(stats.Config{}), Proxy: p}
	if l != nil {
		cfg.Limiter = l
	}
	handler, err := chain.New(cfg)
	if err != nil {
		return nil, err
	}
	srv, err := ingress.New(ingress.Config{Handler: handler, MaxConns: 10000})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"

	// The limit each 100 ms, and when it settled for good.
	type point struct {
		at    time.Duration
		limit int
	}
	var points []point
	t0 := time.Now()
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if l != nil {
				points = append(points, point{time.Since(t0), l.Limit()})
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	var (
		mu  sync.Mutex
		res result
		wg  sync.WaitGroup
	)
	rng := rand.New(rand.NewPCG(1, 2))
	recording := false
	next := t0
	end := t0.Add(duration)
	maxRequests := int(rate*duration.Seconds()) * 2
	for i := 0; i < maxRequests && next.Before(end); i++ {
		if !recording && next.Sub(t0) >= skip {
			up.record(true)
			recording = true
		}
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		at := next
		rec := recording
		wg.Go(func() {
			res2, err := client.Get(url)
			if err != nil {
				if rec {
					mu.Lock()
					res.failed++
					mu.Unlock()
				}
				return
			}
			io.Copy(io.Discard, res2.Body)
			res2.Body.Close()
			if !rec {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch res2.StatusCode {
			case http.StatusOK:
				res.client = append(res.client, time.Since(at))
			case http.StatusServiceUnavailable:
				res.refused++
			default: // 502 or 504: the upstream's backlog without a limit
				res.failed++
			}
		})
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
	}
	wg.Wait()
	close(stop)
	<-sampled
	res.up99 = quantile(up.record(false), 0.99)
	if l == nil {
		res.limits = "none"
		return &res, nil
	}
	lo, hi, settled := -1, -1, time.Duration(-1)
	for _, pt := range points {
		if pt.at >= skip && (mode != "auto" || pt.limit != limit.MinLimit) { // MinLimit: a measurement
			if lo < 0 || pt.limit < lo {
				lo = pt.limit
			}
			hi = max(hi, pt.limit)
		}
		in := pt.limit >= knee*3/4 && pt.limit <= 2*knee || pt.limit == limit.MinLimit // MinLimit: a measurement
		switch {
		case !in:
			settled = -1
		case settled < 0 && pt.limit != limit.MinLimit:
			settled = pt.at
		}
	}
	res.limits = fmt.Sprintf("%d..%d", lo, hi)
	if mode == "auto" {
		res.limits += "*"
	}
	if mode == "auto" {
		var b []byte
		b = fmt.Appendf(b, "       *the limit outside measurements (at %d); settled in [%d, %d] at %v; each second:", limit.MinLimit, knee*3/4, 2*knee, settled.Round(100*time.Millisecond))
		for i, pt := range points {
			if i%10 == 0 {
				b = fmt.Appendf(b, " %d", pt.limit)
			}
		}
		res.trace = string(append(b, '\n'))
	}
	return &res, nil
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
