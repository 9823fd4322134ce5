package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/queue-dev/queue/internal/testnet"
)

// decodeStat decodes a Stat message by field number, independently of the
// encoder.
func decodeStat(t *testing.T, b []byte) (pod string, f map[protowire.Number]float64) {
	t.Helper()
	f = map[protowire.Number]float64{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeString(b)
			if n < 0 || num != 1 {
				t.Fatalf("field %d: bad string", num)
			}
			pod, b = v, b[n:]
		case protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				t.Fatalf("field %d: bad double", num)
			}
			f[num], b = math.Float64frombits(v), b[n:]
		case protowire.VarintType:
			_, n := protowire.ConsumeVarint(b)
			if n < 0 {
				t.Fatalf("field %d: bad varint", num)
			}
			b = b[n:]
		default:
			t.Fatalf("field %d: unexpected wire type %d", num, typ)
		}
	}
	return pod, f
}

func statNow(t *testing.T, q *testQueue) map[protowire.Number]float64 {
	t.Helper()
	res, err := boundedClient.Get("http://" + q.addr.Stats + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "application/protobuf" {
		t.Errorf("Content-Type %q, want application/protobuf", ct)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading the stat: %v", err)
	}
	_, f := decodeStat(t, b)
	return f
}

// statWindowAfter scrapes the stats port until it serves a window that
// ended after uptime seconds, and returns it: a scrape closes a window
// once it is a second old, and serves the last one again before, so
// polling is how a new one is had. Nothing else scrapes the test's queue,
// so two windows seen one after the other are consecutive.
func statWindowAfter(t *testing.T, q *testQueue, uptime float64) map[protowire.Number]float64 {
	t.Helper()
	deadline := time.Now().Add(h2Wait)
	for {
		f := statNow(t, q)
		if f[6] > uptime {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("no window ended after %.3f s of uptime within %v; last %v", uptime, h2Wait, f)
		}
		time.Sleep(100 * time.Millisecond) // polling the endpoint, which announces nothing
	}
}

// TestStatsEndToEnd: n slow requests in flight for a whole window show as
// an average concurrency of exactly n, the activator-proxied among them as
// the proxied concurrency, and no arrivals; probes sent within that window
// are counted neither as arrivals nor as concurrency.
func TestStatsEndToEnd(t *testing.T) {
	t.Parallel()
	const n, proxied = 5, 2
	release := make(chan struct{})
	arrived := make(chan struct{}, n)
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	q := startQueue(t, hostPort(up))
	q.waitReady(t, true)
	c, base := q.client(t, modeH1)
	failed := make(chan error, n)
	var done sync.WaitGroup
	defer func() { close(release); done.Wait() }()
	for i := range n {
		done.Go(func() {
			req, _ := http.NewRequest("GET", base+"/slow", nil)
			if i < proxied {
				req.Header.Set("K-Proxy-Request", "activator")
			}
			res, err := c.Do(req)
			if err != nil {
				failed <- err
				return
			}
			res.Body.Close()
		})
	}
	timeout := time.After(h2Wait)
	for i := range n {
		select {
		case <-arrived:
		case err := <-failed:
			t.Fatalf("slow request: %v", err)
		case <-timeout:
			t.Fatalf("%d of %d slow requests reached the upstream within %v", i, n, h2Wait)
		}
	}
	if got := q.app.stats.Active(); got != n {
		t.Fatalf("active = %d with the %d slow requests at the upstream, want %d", got, n, n)
	}
	// The window after the first one to end now or later holds the n
	// requests from its start to its end, and nothing else but the probes.
	arrivedBy := time.Since(q.app.stats.Start()).Seconds()
	first := statWindowAfter(t, q, arrivedBy)
	for range 20 {
		if res, body := get(t, c, base+"/", map[string]string{"User-Agent": "kube-probe/1.31"}); res.StatusCode != 200 {
			t.Fatalf("probe: %d %q, want 200", res.StatusCode, body)
		}
	}
	f := statWindowAfter(t, q, first[6])
	for _, tt := range []struct {
		name  string
		field protowire.Number
		want  float64
	}{
		{"average concurrency", 2, n},
		{"average proxied concurrency", 3, proxied},
		{"requests per second", 4, 0},
		{"proxied requests per second", 5, 0},
	} {
		if got := f[tt.field]; got != tt.want {
			t.Errorf("%s = %v, want %v (window %v)", tt.name, got, tt.want, f)
		}
	}
	if got := q.app.stats.Active(); got != n {
		t.Errorf("active now = %d, want %d", got, n)
	}
}

// TestPrometheusMetrics: the text exposition parses with Prometheus' own
// parser and carries the contract's names and the revision labels.
func TestPrometheusMetrics(t *testing.T) {
	t.Parallel()
	up := h1Upstream(t, http.HandlerFunc(echo))
	q := startQueue(t, hostPort(up))
	q.app.promLabels = Labels{Namespace: "ns", Service: "svc", Configuration: "cfg", Revision: "rev-1", Pod: `p"od`}.prometheus()
	c, base := q.client(t, modeH1)
	for range 3 {
		get(t, c, base+"/", nil)
	}
	// A request is counted when its handler returns, which may be just
	// after its client has the response: scrape until the third is in,
	// within a bound.
	scrape := func() []byte {
		res, err := boundedClient.Get("http://" + q.addr.Metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatalf("reading the exposition: %v", err)
		}
		return body
	}
	body := scrape()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	for deadline := time.Now().Add(h2Wait); err == nil && time.Now().Before(deadline); {
		if ms := families["http_server_request_duration_seconds"].GetMetric(); len(ms) > 0 && ms[0].GetHistogram().GetSampleCount() >= 3 {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling the endpoint, bounded by the deadline
		body = scrape()
		families, err = p.TextToMetricFamilies(bytes.NewReader(body))
	}
	if err != nil {
		t.Fatalf("Prometheus cannot parse the exposition: %v\n%s", err, body)
	}
	for _, name := range []string{"queue_requests_per_second", "queue_proxied_operations_per_second",
		"queue_average_concurrent_requests", "queue_average_proxied_concurrent_requests", "queue_active_requests",
		"queue_depth", "queue_process_uptime_seconds", "http_server_request_duration_seconds"} {
		m, ok := firstMetric(t, name, families[name].GetMetric())
		if !ok {
			continue
		}
		labels := labelMap(m.GetLabel())
		want := map[string]string{"namespace": "ns", "service": "svc", "configuration": "cfg", "revision": "rev-1", "pod": `p"od`}
		for k, v := range want {
			if labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", name, k, labels[k], v)
			}
		}
	}
	if m, ok := firstMetric(t, "http_server_request_duration_seconds", families["http_server_request_duration_seconds"].GetMetric()); ok && m.GetHistogram().GetSampleCount() != 3 {
		t.Errorf("histogram: %v, want 3 requests in 2xx", m)
	}
}

// TestAccessLog: one JSON line per request to stdout, with the fields the
// contract lists.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	var buf testnet.SyncBuffer
	l := &accessLog{w: &buf}
	req := &http.Request{Method: "GET", URL: &url.URL{Path: "/a\"b\x01\xff", RawQuery: "q=1"}, Header: http.Header{}}
	req.RemoteAddr = "127.0.0.1:5000"
	req.Proto = "HTTP/2.0"
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	l.done(req, 204, 12, 1500*time.Microsecond)
	l.done(req, 0, 0, time.Millisecond)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %q", len(lines), buf.String())
	}
	var e struct {
		Time, Method, Path, RemoteAddr, Protocol, TraceID string
		Status                                            int
		Bytes                                             int64
		Duration                                          float64
	}
	dec := json.NewDecoder(strings.NewReader(strings.ReplaceAll(strings.ReplaceAll(lines[0], "remote_addr", "remoteaddr"), "trace_id", "traceid")))
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("not JSON: %v: %s", err, lines[0])
	}
	if e.Method != "GET" || e.Path != "/a\"b\x01\ufffd" || e.Status != 204 || e.Bytes != 12 || e.Duration != 0.0015 ||
		e.RemoteAddr != "127.0.0.1:5000" || e.Protocol != "HTTP/2.0" || e.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("line %s decoded as %+v", lines[0], e)
	}
	if _, err := time.Parse(time.RFC3339Nano, e.Time); err != nil {
		t.Errorf("time %q: %v", e.Time, err)
	}
	if !strings.Contains(lines[1], `"status":499`) {
		t.Errorf("a request with nothing written logs %s, want status 499", lines[1])
	}
}

// TestAccessLogAllocs: a line costs at most the buffer's first growth.
func TestAccessLogAllocs(t *testing.T) {
	l := &accessLog{w: io.Discard}
	req := &http.Request{Method: "GET", URL: &url.URL{Path: "/p"}, Header: http.Header{}, Proto: "HTTP/1.1", RemoteAddr: "127.0.0.1:1"}
	l.done(req, 200, 1, time.Millisecond)
	// A GC empties the buffer pool; on a loaded machine one may come
	// mid-measurement and count as the line's allocation. None is wanted
	// here (a global setting: this test is not parallel).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	budget := 0.0
	if raceEnabled {
		budget = 1
	}
	// AllocsPerRun counts the whole process's allocations, and goroutines
	// of earlier tests may still be ending: they can only add, so the least
	// of three runs is the line's own figure.
	n := math.Inf(1)
	for range 3 {
		n = min(n, testing.AllocsPerRun(100, func() { l.done(req, 200, 1, time.Millisecond) }))
	}
	if n > budget {
		t.Errorf("allocs per line = %v, want at most %v once the pool is warm", n, budget)
	}
}
