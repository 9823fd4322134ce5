package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
// resource, reaches a real receiver within two export intervals of a
// request, beside http.server.request.duration, kn.serving.queue.depth and
// the runtime metrics; the pushed histograms are the Prometheus port's.
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
			deadline := time.NewTimer(2 * interval)
			defer deadline.Stop()
			var inv pushed
			for {
				if req := c.lastMetrics(); req != nil {
					if m, ok := findMetric(req, "kn.serving.invocation.duration"); ok && len(m.metric.GetHistogram().GetDataPoints()) > 0 {
						inv = m
						break
					}
				}
				select {
				case <-c.got:
				case <-deadline.C:
					t.Fatalf("no kn.serving.invocation.duration within two export intervals (%v) of the request", 2*interval)
				}
			}
			t.Logf("pushed %v after the request", time.Since(served))

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
			scrape, err := http.Get("http://" + q.addr.Metrics + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(scrape.Body)
			scrape.Body.Close()
			parser := expfmt.NewTextParser(model.UTF8Validation)
			prom, err := parser.TextToMetricFamilies(bytes.NewReader(body))
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
			release := make(chan struct{})
			up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					close(held)
					<-release
				}
				w.Write([]byte("ok"))
			}))
			q := startQueueEnv(t, knativeOTelEnv(fmt.Sprintf(`{"tracing":{"protocol":%q,"endpoint":%q,"samplingRate":1}}`,
				protocol, endpoint)), hostPort(up), "--concurrency", "1")
			cl, base := q.client(t, modeH1)
			var wg sync.WaitGroup
			wg.Go(func() { get(t, cl, base+"/hold", nil) })
			<-held
			wg.Go(func() { get(t, cl, base+"/waits", nil) })
			// The second request's wait is the limiter's state, with no
			// event to wait on: poll it, within a bound.
			for deadline := time.Now().Add(5 * time.Second); q.app.depth() != 1; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the second request never waited for a slot")
				}
			}
			const waited = 30 * time.Millisecond
			time.Sleep(waited) // the wait its span measures
			close(release)
			wg.Wait()
			// A drain flushes the spans; /wait-for-drain answers once it
			// has.
			q.app.drainer.Start(true)
			if res, err := http.Get("http://" + q.addr.Admin + "/wait-for-drain"); err == nil {
				res.Body.Close()
			}
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
	get(t, c, base+"/printed", nil)
	q.app.drainer.Start(true)
	if res, err := http.Get("http://" + q.addr.Admin + "/wait-for-drain"); err == nil {
		res.Body.Close()
	}
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
