package main

import (
	"math"
	rtmetrics "runtime/metrics"
	"strconv"
	"time"

	"github.com/queue-dev/queue/otlp"
	"github.com/queue-dev/queue/stats"
)

// The instrumentation scopes Knative's queue-proxy records its metrics
// under: its own (pkg/queue/request_metric.go), otelhttp's around the
// serving handler (pkg/queue/sharedmain/handlers.go) and the runtime
// instrumentation's (pkg/queue/sharedmain/otel.go). A collector that
// routes or labels by scope sees the same ones.
const (
	scopeQueue   = "knative.dev/serving/pkg/queue"
	scopeHTTP    = "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	scopeRuntime = "go.opentelemetry.io/contrib/instrumentation/runtime"
)

// otlpMetrics encodes, at now, the ExportMetricsServiceRequest that the
// metrics push sends: what Knative's queue-proxy pushes, under its names,
// units, instrument kinds and attributes, cumulative from the process's
// start as its OTLP exporters report by default. The histograms are read
// from the same recorder as the Prometheus text (metricsHandler), so that
// the two agree:
//
//   - kn.serving.invocation.duration (histogram, s), by
//     http.response.status_code;
//   - kn.serving.queue.depth (gauge, {request}), with --concurrency only:
//     the requests in flight, waiting or proxied (kn_serving_queue_depth);
//   - http.server.request.duration (histogram, s), by http.request.method,
//     http.response.status_code, network.protocol.name and .version and
//     url.scheme (otelhttp's attributes, but for server.address and
//     server.port: a client picks the Host, and a revision has one);
//   - the Go runtime's go.memory.used (by go.memory.type), go.memory.limit
//     (when set), go.memory.allocated, go.memory.allocations,
//     go.memory.gc.goal, go.goroutine.count, go.processor.limit and
//     go.config.gogc, as the runtime instrumentation registers them.
//
// It runs once per push interval, on the pusher's goroutine.
func (a *app) otlpMetrics(now time.Time) []byte {
	start := a.stats.Start()
	series := a.stats.Durations()
	r := otlp.NewMetricsRequest(a.resource)

	r.Scope(scopeQueue, "")
	r.Histogram("kn.serving.invocation.duration", "The duration of task execution", "s",
		durationPoints(stats.ByStatus(series), start, now)...)
	if a.depth != nil {
		r.Gauge("kn.serving.queue.depth", "Number of current requests in the queue", "{request}",
			otlp.NumberPoint{Time: now, Int: int64(a.stats.Active())})
	}

	r.Scope(scopeHTTP, "")
	r.Histogram("http.server.request.duration", "Duration of HTTP server requests.", "s",
		durationPoints(series, start, now)...)

	r.Scope(scopeRuntime, "")
	appendRuntimeOTLP(r, start, now)
	return r.Bytes()
}

// durationPoints turns duration series into histogram points: the status
// code alone for a stats.ByStatus series, otelhttp's attributes else.
func durationPoints(series []stats.DurationSeries, start, now time.Time) []otlp.HistogramPoint {
	points := make([]otlp.HistogramPoint, len(series))
	for i := range series {
		d := &series[i]
		var attrs []otlp.Attr
		if d.Method != "" {
			attrs = []otlp.Attr{otlp.String("http.request.method", d.Method)}
		}
		attrs = append(attrs, otlp.Int("http.response.status_code", int64(d.Status)))
		if d.Method != "" {
			attrs = append(attrs, otlp.String("network.protocol.name", "http"),
				otlp.String("network.protocol.version", d.ProtocolVersion), otlp.String("url.scheme", d.Scheme))
		}
		points[i] = otlp.HistogramPoint{Attrs: attrs, Start: start, Time: now, Count: d.Count(), Sum: d.Sum,
			Bounds: stats.DurationBuckets[:], Counts: d.Counts[:]}
	}
	return points
}

// runtimeSamples are the runtime/metrics the runtime instrumentation reads.
var runtimeSamples = [...]string{
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/gc/gomemlimit:bytes",
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
	"/gc/heap/goal:bytes",
	"/sched/goroutines:goroutines",
	"/sched/gomaxprocs:threads",
	"/gc/gogc:percent",
}

// appendRuntimeOTLP adds the Go runtime metrics that Knative's queue-proxy
// pushes (go.opentelemetry.io/contrib/instrumentation/runtime with the
// semantic conventions' go.* names; its deprecated runtime.go.* names are
// off by default and not sent): up-down counters are non-monotonic sums,
// counters monotonic ones, all cumulative from start.
func appendRuntimeOTLP(r *otlp.MetricsRequest, start, now time.Time) {
	samples := make([]rtmetrics.Sample, len(runtimeSamples))
	for i, name := range runtimeSamples {
		samples[i].Name = name
	}
	rtmetrics.Read(samples)
	v := func(i int) int64 {
		if samples[i].Value.Kind() != rtmetrics.KindUint64 {
			return 0
		}
		return int64(min(samples[i].Value.Uint64(), math.MaxInt64))
	}
	point := func(n int64, attrs ...otlp.Attr) otlp.NumberPoint {
		return otlp.NumberPoint{Attrs: attrs, Start: start, Time: now, Int: n}
	}
	stack := v(2)
	r.Sum("go.memory.used", "Memory used by the Go runtime.", "By", false,
		point(stack, otlp.String("go.memory.type", "stack")),
		point(v(0)-v(1)-stack, otlp.String("go.memory.type", "other")))
	if limit := v(3); limit != math.MaxInt64 {
		r.Sum("go.memory.limit", "Go runtime memory limit configured by the user, if a limit exists.", "By", false, point(limit))
	}
	r.Sum("go.memory.allocated", "Memory allocated to the heap by the application.", "By", true, point(v(4)))
	r.Sum("go.memory.allocations", "Count of allocations to the heap by the application.", "{allocation}", true, point(v(5)))
	r.Sum("go.memory.gc.goal", "Heap size target for the end of the GC cycle.", "By", false, point(v(6)))
	r.Sum("go.goroutine.count", "Count of live goroutines.", "{goroutine}", false, point(v(7)))
	r.Sum("go.processor.limit", "The number of OS threads that can execute user-level Go code simultaneously.", "{thread}", false, point(v(8)))
	r.Sum("go.config.gogc", "Heap size target percentage configured by the user, otherwise 100.", "%", false, point(v(9)))
}

// pushDescription is the startup line's account of the push.
func pushDescription(p MetricsPush, endpoint string) string {
	return string(p.Protocol) + " " + endpoint + " every " + strconv.FormatFloat(p.Interval.Seconds(), 'g', -1, 64) + "s"
}
