package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/queue-dev/queue/internal/testnet"
	"github.com/queue-dev/queue/stats"
	collectormetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// collector is a real OTLP receiver for both signals over both transports:
// grpc-go serving the collector's TraceService and MetricsService, and an
// OTLP/HTTP endpoint (/v1/traces, /v1/metrics) decoding the same messages.
type collector struct {
	collectortracepb.UnimplementedTraceServiceServer
	collectormetricspb.UnimplementedMetricsServiceServer

	grpcURL, httpURL string
	got              chan struct{} // a signal per export received

	mu      sync.Mutex
	metrics []*collectormetricspb.ExportMetricsServiceRequest
	spans   []receivedSpan
}

type receivedSpan struct {
	span     *tracepb.Span
	resource *resourcepb.Resource
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{got: make(chan struct{}, 64)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	collectortracepb.RegisterTraceServiceServer(s, c)
	collectormetricspb.RegisterMetricsServiceServer(s, collectorMetrics{c})
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	c.grpcURL = "http://" + ln.Addr().String()

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		var req collectortracepb.ExportTraceServiceRequest
		if !decodeOTLP(w, r, &req) {
			return
		}
		c.Export(r.Context(), &req)
		writeOTLP(w, &collectortracepb.ExportTraceServiceResponse{})
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, r *http.Request) {
		var req collectormetricspb.ExportMetricsServiceRequest
		if !decodeOTLP(w, r, &req) {
			return
		}
		collectorMetrics{c}.Export(r.Context(), &req)
		writeOTLP(w, &collectormetricspb.ExportMetricsServiceResponse{})
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	c.httpURL = hs.URL
	return c
}

func decodeOTLP(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return false
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err == nil && r.Header.Get("Content-Type") != "application/x-protobuf" {
		err = fmt.Errorf("Content-Type %q", r.Header.Get("Content-Type"))
	}
	if err == nil {
		err = proto.Unmarshal(b, m)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeOTLP(w http.ResponseWriter, m proto.Message) {
	b, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

func (c *collector) signal() {
	select {
	case c.got <- struct{}{}:
	default:
	}
}

// Export is TraceService's.
func (c *collector) Export(_ context.Context, req *collectortracepb.ExportTraceServiceRequest) (*collectortracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, receivedSpan{span: s, resource: rs.GetResource()})
			}
		}
	}
	c.mu.Unlock()
	c.signal()
	return &collectortracepb.ExportTraceServiceResponse{}, nil
}

// collectorMetrics is the collector's MetricsService, whose method has the
// TraceService's name.
type collectorMetrics struct{ *collector }

func (c collectorMetrics) Export(_ context.Context, req *collectormetricspb.ExportMetricsServiceRequest) (*collectormetricspb.ExportMetricsServiceResponse, error) {
	c.mu.Lock()
	c.metrics = append(c.metrics, req)
	c.mu.Unlock()
	c.signal()
	return &collectormetricspb.ExportMetricsServiceResponse{}, nil
}

// metricsSince returns the pushes received after the first n.
func (c *collector) metricsSince(n int) []*collectormetricspb.ExportMetricsServiceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n >= len(c.metrics) {
		return nil
	}
	return slices.Clone(c.metrics[n:])
}

// pushTime returns the time a push was collected at: that of its data
// points, which all carry it; zero if it has none.
func pushTime(req *collectormetricspb.ExportMetricsServiceRequest) time.Time {
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				var ns uint64
				switch {
				case len(m.GetSum().GetDataPoints()) > 0:
					ns = m.GetSum().GetDataPoints()[0].GetTimeUnixNano()
				case len(m.GetGauge().GetDataPoints()) > 0:
					ns = m.GetGauge().GetDataPoints()[0].GetTimeUnixNano()
				case len(m.GetHistogram().GetDataPoints()) > 0:
					ns = m.GetHistogram().GetDataPoints()[0].GetTimeUnixNano()
				}
				if ns != 0 {
					return time.Unix(0, int64(ns))
				}
			}
		}
	}
	return time.Time{}
}

// lastMetrics returns the last push.
func (c *collector) lastMetrics() *collectormetricspb.ExportMetricsServiceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.metrics) == 0 {
		return nil
	}
	return c.metrics[len(c.metrics)-1]
}

// pushed is a metric found in a push, with the scope and resource it came
// under.
type pushed struct {
	metric   *metricspb.Metric
	scope    string
	resource *resourcepb.Resource
}

func findMetric(req *collectormetricspb.ExportMetricsServiceRequest, name string) (pushed, bool) {
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				if m.GetName() == name {
					return pushed{m, sm.GetScope().GetName(), rm.GetResource()}, true
				}
			}
		}
	}
	return pushed{}, false
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		if v, ok := kv.GetValue().GetValue().(*commonpb.AnyValue_IntValue); ok {
			m[kv.GetKey()] = fmt.Sprint(v.IntValue)
			continue
		}
		m[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return m
}

// waitDrained waits, within 30 s, for q's drain, already started, to
// finish: the spans are flushed by then. It asks the drainer in-process, as
// /wait-for-drain does: the admin port itself closes at the drain's end.
func waitDrained(t *testing.T, q *testQueue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := httptest.NewRecorder()
	q.app.drainer.ServeWaitForDrain(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/wait-for-drain", nil))
	if ctx.Err() != nil || rec.Code != http.StatusOK {
		t.Fatalf("the drain did not finish within 30 s (%d, %v)", rec.Code, ctx.Err())
	}
}

// knativeOTelEnv is the environment of a queue-proxy with
// OBSERVABILITY_CONFIG o.
func knativeOTelEnv(o string) map[string]string {
	return map[string]string{
		"SERVING_NAMESPACE": "ns", "SERVING_SERVICE": "svc", "SERVING_CONFIGURATION": "cfg",
		"SERVING_REVISION": "svc-00001", "SERVING_POD": "svc-00001-pod", "OBSERVABILITY_CONFIG": o,
	}
}

// TestMetricsPush: with requestMetrics over http/protobuf or grpc,
// kn.serving.invocation.duration, with its attribute and the revision's
// resource, reaches a real receiver in one of the first two pushes
// collected after a request was answered (the first may have read the
// recorder a moment before the request's own record), beside
// http.server.request.duration, kn.serving.queue.depth and the runtime
// metrics; the pushed histograms are the Prometheus port's. The pushes
// are told apart by the time their points carry, not by when they
// arrive, which a loaded machine delays.
func TestMetricsPush(t *testing.T) {
	t.Parallel()
	const interval = 500 * time.Millisecond
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			c := newCollector(t)
			endpoint := c.httpURL // the path /v1/metrics is added, as Knative does
			if protocol == "grpc" {
				endpoint = c.grpcURL
			}
			up := h1Upstream(t, http.HandlerFunc(echo))
			q := startQueueEnv(t, knativeOTelEnv(fmt.Sprintf(`{"requestMetrics":{"protocol":%q,"endpoint":%q,"exportInterval":%d}}`,
				protocol, endpoint, interval)), hostPort(up), "--concurrency", "2")
			cl, base := q.client(t, modeH1)
			if res, _ := get(t, cl, base+"/", nil); res.StatusCode != 200 {
				t.Fatalf("status %d", res.StatusCode)
			}
			served := time.Now()
			// Bounds the wait for a loaded machine; the rule is on the
			// pushes' own times below.
			deadline := time.NewTimer(20 * time.Second)
			defer deadline.Stop()
			var inv pushed
			var after []time.Time // the collection times of the pushes after the request
		wait:
			for seen := 0; ; {
				for _, req := range c.metricsSince(seen) {
					seen++
					at := pushTime(req)
					if at.IsZero() {
						t.Fatalf("push %d carries no data point", seen)
					}
					if !at.After(served) {
						continue // collected before the request was answered
					}
					after = append(after, at)
					if m, ok := findMetric(req, "kn.serving.invocation.duration"); ok && len(m.metric.GetHistogram().GetDataPoints()) > 0 {
						inv = m
						break wait
					}
					if len(after) == 2 {
						t.Fatalf("neither of the two pushes collected after the request (at %v) has kn.serving.invocation.duration", after)
					}
				}
				select {
				case <-c.got:
				case <-deadline.C:
					t.Fatalf("no push with kn.serving.invocation.duration within 20 s of the request (%d pushes after it)", len(after))
				}
			}
			t.Logf("pushed in push %d after the request, %v after it", len(after), time.Since(served))

			res := attrMap(inv.resource.GetAttributes())
			for k, want := range map[string]string{"service.name": "svc", "k8s.namespace.name": "ns", "k8s.pod.name": "svc-00001-pod",
				"service.instance.id": "svc-00001-pod", "k8s.container.name": "queue-proxy", "kn.service.name": "svc",
				"kn.configuration.name": "cfg", "kn.revision.name": "svc-00001"} {
				if res[k] != want {
					t.Errorf("resource %s = %q, want %q", k, res[k], want)
				}
			}
			if inv.scope != "knative.dev/serving/pkg/queue" || inv.metric.GetUnit() != "s" || inv.metric.GetDescription() != "The duration of task execution" {
				t.Errorf("kn.serving.invocation.duration: scope %q unit %q description %q", inv.scope, inv.metric.GetUnit(), inv.metric.GetDescription())
			}
			h := inv.metric.GetHistogram()
			if h.GetAggregationTemporality() != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
				t.Errorf("temporality %v, want cumulative", h.GetAggregationTemporality())
			}
			p := h.GetDataPoints()[0]
			if got := attrMap(p.GetAttributes()); len(got) != 1 || got["http.response.status_code"] != "200" {
				t.Errorf("attributes %v, want http.response.status_code 200 alone", got)
			}
			if p.GetCount() != 1 || len(p.GetExplicitBounds()) != len(stats.DurationBuckets) || p.GetStartTimeUnixNano() == 0 ||
				p.GetStartTimeUnixNano() > p.GetTimeUnixNano() {
				t.Errorf("point %v, want one request in Knative's buckets since the start", p)
			}

			server, ok := findMetric(c.lastMetrics(), "http.server.request.duration")
			if !ok || server.metric.GetUnit() != "s" || len(server.metric.GetHistogram().GetDataPoints()) != 1 {
				t.Fatalf("http.server.request.duration: %v", server.metric)
			}
			want := map[string]string{"http.request.method": "GET", "http.response.status_code": "200", "url.scheme": "http",
				"network.protocol.name": "http", "network.protocol.version": "1.1"}
			if got := attrMap(server.metric.GetHistogram().GetDataPoints()[0].GetAttributes()); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("http.server.request.duration attributes %v, want %v", got, want)
			}
			if depth, ok := findMetric(c.lastMetrics(), "kn.serving.queue.depth"); !ok || depth.metric.GetUnit() != "{request}" || depth.metric.GetGauge() == nil {
				t.Errorf("kn.serving.queue.depth: %v", depth.metric)
			}
			for name, monotonic := range map[string]bool{"go.goroutine.count": false, "go.memory.used": false, "go.memory.allocated": true,
				"go.memory.allocations": true, "go.memory.gc.goal": false, "go.processor.limit": false, "go.config.gogc": false} {
				m, ok := findMetric(c.lastMetrics(), name)
				if !ok || m.scope != "go.opentelemetry.io/contrib/instrumentation/runtime" || m.metric.GetSum() == nil ||
					m.metric.GetSum().GetIsMonotonic() != monotonic || len(m.metric.GetSum().GetDataPoints()) == 0 {
					t.Errorf("%s: %v (scope %q), want a sum, monotonic %t", name, m.metric, m.scope, monotonic)
				}
			}

			// The Prometheus port reads the same recorder: the same counts
			// in the same buckets.
			_, body := get(t, boundedClient, "http://"+q.addr.Metrics+"/metrics", nil)
			parser := expfmt.NewTextParser(model.UTF8Validation)
			prom, err := parser.TextToMetricFamilies(strings.NewReader(body))
			if err != nil {
				t.Fatalf("Prometheus cannot parse the exposition: %v\n%s", err, body)
			}
			if mf := prom["queue_otlp_dropped_total"]; mf == nil || len(mf.GetMetric()) != 1 ||
				labelMap(mf.GetMetric()[0].GetLabel())["signal"] != "metrics" || mf.GetMetric()[0].GetCounter().GetValue() != 0 {
				t.Errorf("queue_otlp_dropped_total: %v, want 0 for signal metrics", mf)
			}
			for _, pair := range []struct {
				family string
				point  *metricspb.HistogramDataPoint
			}{
				{"kn_serving_invocation_duration_seconds", p},
				{"http_server_request_duration_seconds", server.metric.GetHistogram().GetDataPoints()[0]},
			} {
				mf := prom[pair.family]
				if mf == nil || len(mf.GetMetric()) != 1 {
					t.Errorf("%s: %v, want one series", pair.family, mf)
					continue
				}
				ph := mf.GetMetric()[0].GetHistogram()
				var cum uint64
				for i, b := range ph.GetBucket()[:len(stats.DurationBuckets)] { // +Inf is the count
					cum += pair.point.GetBucketCounts()[i]
					if b.GetCumulativeCount() != cum || b.GetUpperBound() != pair.point.GetExplicitBounds()[i] {
						t.Errorf("%s bucket %v: %d, pushed %d under %v", pair.family, b.GetUpperBound(), b.GetCumulativeCount(), cum, pair.point.GetExplicitBounds()[i])
					}
				}
				if ph.GetSampleCount() != pair.point.GetCount() || ph.GetSampleSum() != pair.point.GetSum() {
					t.Errorf("%s: count %d sum %v, pushed %d and %v", pair.family, ph.GetSampleCount(), ph.GetSampleSum(), pair.point.GetCount(), pair.point.GetSum())
				}
			}
		})
	}
}

// TestMetricsPushOff: requestMetrics none serves no metrics port and
// starts no push.
func TestMetricsPushOff(t *testing.T) {
	t.Parallel()
	up := h1Upstream(t, http.HandlerFunc(echo))
	q := startQueueWith(t, knativeOTelEnv(`{"requestMetrics":{"protocol":"none"}}`),
		func(c *Config) { c.MetricsListen = "" }, hostPort(up)) // as without the test's --metrics-listen
	if q.addr.Metrics != "" || q.app.pushExporter != nil || q.app.pusher != nil {
		t.Errorf("metrics port %q, push %v %v; want none", q.addr.Metrics, q.app.pushExporter, q.app.pusher)
	}
	c, base := q.client(t, modeH1)
	if res, _ := get(t, c, base+"/", nil); res.StatusCode != 200 {
		t.Errorf("status %d", res.StatusCode)
	}
}

// TestTracingOTLP: with tracing over grpc or http/protobuf, the spans
// Knative's queue-proxy makes reach a real receiver: the server span,
// kn.queueproxy.proxy inside it, and under a concurrency limit
// kn.queueproxy.wait inside that, as long as the request waited for its
// slot.
func TestTracingOTLP(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			c := newCollector(t)
			endpoint := c.httpURL // /v1/traces is added
			if protocol == "grpc" {
				endpoint = c.grpcURL
			}
			held := make(chan struct{})
			release, releaseHold := testnet.Releaser(t)
			up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					close(held)
					select {
					case <-release:
					case <-r.Context().Done():
						return
					case <-time.After(30 * time.Second): // the bound, should the test never release it
						return
					}
				}
				w.Write([]byte("ok"))
			}))
			t.Cleanup(releaseHold) // before the upstream's Close, which waits for the handler
			q := startQueueEnv(t, knativeOTelEnv(fmt.Sprintf(`{"tracing":{"protocol":%q,"endpoint":%q,"samplingRate":1}}`,
				protocol, endpoint)), hostPort(up), "--concurrency", "1")
			cl, base := q.client(t, modeH1)
			// The requests run on their own goroutines: they report with
			// t.Errorf, not get's t.Fatalf.
			var wg sync.WaitGroup
			request := func(path string) {
				res, err := cl.Get(base + path)
				if err != nil {
					t.Errorf("GET %s: %v", path, err)
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					t.Errorf("GET %s = %d, want 200", path, res.StatusCode)
				}
			}
			wg.Go(func() { request("/hold") })
			select {
			case <-held:
			case <-time.After(10 * time.Second):
				t.Fatal("the first request did not reach the upstream within 10 s")
			}
			wg.Go(func() { request("/waits") })
			// The second request's wait is the limiter's state, with no
			// event to wait on: poll it, within a bound.
			for deadline := time.Now().Add(10 * time.Second); q.app.depth() != 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the second request never waited for a slot")
				}
			}
			const waited = 30 * time.Millisecond
			time.Sleep(waited) // not synchronisation: the wait the span measures, a lower bound below
			releaseHold()
			wg.Wait() // bounded by the client's timeout
			// A drain flushes the spans; /wait-for-drain answers once it
			// has.
			q.app.drainer.Start(true)
			waitDrained(t, q)
			c.mu.Lock()
			defer c.mu.Unlock()
			byID := map[string]*tracepb.Span{}
			count := map[string]int{}
			for _, s := range c.spans {
				byID[string(s.span.GetSpanId())] = s.span
				count[s.span.GetName()]++
				if got := attrMap(s.resource.GetAttributes()); got["service.name"] != "svc" || got["kn.revision.name"] != "svc-00001" {
					t.Errorf("span %s resource %v", s.span.GetName(), got)
				}
			}
			if count["GET"] != 2 || count["kn.queueproxy.proxy"] != 2 || count["kn.queueproxy.wait"] != 2 {
				t.Fatalf("spans %v, want GET, kn.queueproxy.proxy and kn.queueproxy.wait for each of 2 requests", count)
			}
			var longest time.Duration
			for _, s := range c.spans {
				parent := byID[string(s.span.GetParentSpanId())]
				switch s.span.GetName() {
				case "kn.queueproxy.proxy":
					if parent == nil || parent.GetName() != "GET" {
						t.Errorf("kn.queueproxy.proxy's parent is %v, want the server span", parent.GetName())
					}
				case "kn.queueproxy.wait":
					if parent == nil || parent.GetName() != "kn.queueproxy.proxy" {
						t.Errorf("kn.queueproxy.wait's parent is %v, want kn.queueproxy.proxy", parent.GetName())
					}
					longest = max(longest, time.Duration(s.span.GetEndTimeUnixNano()-s.span.GetStartTimeUnixNano()))
				}
			}
			if longest < waited {
				t.Errorf("the longest kn.queueproxy.wait is %v, want the %v the second request waited", longest, waited)
			}
		})
	}
}

// TestTracingStdout: Knative's tracing protocol stdout writes each span as
// a line of JSON, OpenTelemetry's stdout exporter's.
func TestTracingStdout(t *testing.T) {
	t.Parallel()
	var out testnet.SyncBuffer
	up := h1Upstream(t, http.HandlerFunc(echo))
	q := startQueueWith(t, knativeOTelEnv(`{"tracing":{"protocol":"stdout"}}`),
		func(c *Config) { c.TraceStdout = &out }, hostPort(up))
	c, base := q.client(t, modeH1)
	if res, _ := get(t, c, base+"/printed", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("GET /printed = %d, want 200", res.StatusCode)
	}
	q.app.drainer.Start(true)
	waitDrained(t, q)
	names := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var s struct {
			Name        string
			SpanContext struct{ TraceID, SpanID string }
		}
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if len(s.SpanContext.TraceID) != 32 {
			t.Errorf("span %s has trace id %q", s.Name, s.SpanContext.TraceID)
		}
		names[s.Name] = true
	}
	if !names["GET"] || !names["kn.queueproxy.proxy"] {
		t.Errorf("spans written %v, want GET and kn.queueproxy.proxy:\n%s", names, out.String())
	}
}
