package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// kubeletUA is the User-Agent of the kubelet's HTTP probes (Kubernetes 1.31).
const kubeletUA = "kube-probe/1.31"

// newProber returns a client that probes as the kubelet does: a new TCP
// connection per probe, no keep-alive, a 1 s timeout.
func newProber() *http.Client {
	return &http.Client{
		Timeout:   time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// newScraper returns a client that scrapes as the autoscaler does, over a
// kept-alive connection.
func newScraper() *http.Client {
	return &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1}}
}

// get sends one GET and says the status code (0 on failure), reading and
// discarding the body so that a kept-alive connection is reused.
func get(ctx context.Context, c *http.Client, url string, header http.Header) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

var (
	probeHeader  = http.Header{"User-Agent": {kubeletUA}, "Accept": {"*/*"}}
	scrapeHeader = http.Header{"Accept": {"application/protobuf"}}
)

// counts is how many requests a loop sent and how many were answered well.
type counts struct{ sent, ok atomic.Int64 }

// every sends at most `most` requests, one per period, until ctx ends, each
// after the last has finished (as the kubelet's prober does: a late request
// delays the next one rather than overlapping it, and the schedule restarts
// from it). ok says whether a status code is a success.
func every(ctx context.Context, period time.Duration, most int64, send func(context.Context) int, ok func(int) bool, n *counts) {
	next := time.Now()
	for ctx.Err() == nil && n.sent.Load() < most {
		n.sent.Add(1)
		if ok(send(ctx)) {
			n.ok.Add(1)
		}
		if n.sent.Load() >= most {
			return
		}
		next = next.Add(period)
		wait := time.Until(next)
		if wait <= 0 {
			next = time.Now()
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func probeOK(code int) bool { return code >= 200 && code < 400 }

// cmdIdle measures the group over a quiet interval with, optionally, a
// kubelet probe and an autoscaler scrape at fixed periods.
func cmdIdle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	group := groupFlag(fs)
	l := labelFlags(fs, "rest")
	settle := fs.Duration("settle", 0, "wait this long before measuring")
	dur := fs.Duration("duration", 30*time.Second, "measure over this interval")
	probeURL := fs.String("probe", "", "send the kubelet's probe to this URL; empty = none")
	probeEvery := fs.Duration("probe-every", time.Second, "one probe per period")
	scrapeURL := fs.String("scrape", "", "scrape this URL as the autoscaler does; empty = none")
	scrapeEvery := fs.Duration("scrape-every", time.Second, "one scrape per period")
	fs.Parse(args)
	g, err := group()
	if err != nil {
		return err
	}
	time.Sleep(*settle)
	before, err := take(g)
	if err != nil {
		return err
	}
	// One request per period from the start of the interval, the last one
	// period before its end; a request still running at the end is waited
	// for (at most its 1 s timeout) and counted.
	ctx, cancel := context.WithTimeout(context.Background(), *dur+5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var probes, scrapes counts
	start := time.Now()
	if *probeURL != "" {
		c := newProber()
		wg.Go(func() {
			every(ctx, *probeEvery, int64(*dur / *probeEvery), func(ctx context.Context) int { return get(ctx, c, *probeURL, probeHeader) },
				probeOK, &probes)
		})
	}
	if *scrapeURL != "" {
		c := newScraper()
		wg.Go(func() {
			every(ctx, *scrapeEvery, int64(*dur / *scrapeEvery), func(ctx context.Context) int { return get(ctx, c, *scrapeURL, scrapeHeader) },
				func(code int) bool { return code == http.StatusOK }, &scrapes)
		})
	}
	time.Sleep(time.Until(start.Add(*dur)))
	wg.Wait()
	after, err := take(g)
	if err != nil {
		return err
	}
	d := after.since(before)
	l.emit("seconds", "%.3f", time.Since(start).Seconds())
	l.emit("cpu_ms", "%.3f", float64(d.cpuNanos)/1e6)
	l.emit("ctxsw", "%d", d.switches)
	l.emit("probes", "%d", probes.sent.Load())
	l.emit("probes_ok", "%d", probes.ok.Load())
	l.emit("scrapes", "%d", scrapes.sent.Load())
	l.emit("scrapes_ok", "%d", scrapes.ok.Load())
	return nil
}

// cmdFirstOK leaves the upstream down for a while, then binds its port and
// serves 200 there, probing the proxy every few milliseconds from that
// instant; it reports the time from the bind to the first 200 answer.
func cmdFirstOK(args []string) error {
	fs := flag.NewFlagSet("firstok", flag.ExitOnError)
	group := groupFlag(fs)
	l := labelFlags(fs, "rest")
	down := fs.Duration("down", 30*time.Second, "keep the upstream down this long first")
	listen := fs.String("listen", "", "the upstream's host:port, bound at the instant")
	probeURL := fs.String("probe", "", "the proxy's URL to probe")
	period := fs.Duration("probe-every", 5*time.Millisecond, "one probe per period")
	limit := fs.Duration("timeout", 10*time.Second, "give up after this long")
	fs.Parse(args)
	if *listen == "" || *probeURL == "" {
		return errors.New("-listen and -probe are required")
	}
	g, err := group()
	if err != nil {
		return err
	}
	time.Sleep(*down)
	before, err := take(g)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("bind the upstream's port: %w", err)
	}
	instant := time.Now()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "2")
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), *limit)
	defer cancel()
	c := newProber()
	var first time.Duration
	var probes counts
	every(ctx, *period, int64(*limit / *period), func(ctx context.Context) int {
		code := get(ctx, c, *probeURL, probeHeader)
		if code == http.StatusOK && first == 0 {
			first = time.Since(instant)
			cancel()
		}
		return code
	}, probeOK, &probes)
	after, err := take(g)
	if err != nil {
		return err
	}
	d := after.since(before)
	if first == 0 {
		l.emit("first200_ms", "-")
	} else {
		l.emit("first200_ms", "%.1f", float64(first.Microseconds())/1000)
	}
	l.emit("seconds", "%.3f", time.Since(instant).Seconds())
	l.emit("cpu_ms", "%.3f", float64(d.cpuNanos)/1e6)
	l.emit("ctxsw", "%d", d.switches)
	l.emit("probes", "%d", probes.sent.Load())
	l.emit("probes_ok", "%d", probes.ok.Load())
	return nil
}
