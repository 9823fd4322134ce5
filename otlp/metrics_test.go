package otlp

import (
	"strings"
	"testing"
	"time"

	collectormetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/proto"
)

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func num(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

// TestMetricsRequest: what MetricsRequest writes decodes, with the
// generated OTLP types, to the message it means.
func TestMetricsRequest(t *testing.T) {
	t.Parallel()
	start, now := time.Unix(1700000000, 5), time.Unix(1700000060, 7)
	r := NewMetricsRequest([]Attr{String("service.name", "hello"), String("empty", "")})
	r.Scope("knative.dev/serving/pkg/queue", "")
	r.Histogram("kn.serving.invocation.duration", "The duration of task execution", "s",
		HistogramPoint{Attrs: []Attr{Int("http.response.status_code", 200)}, Start: start, Time: now,
			Count: 3, Sum: 0.5, Bounds: []float64{0.1, 1}, Counts: []uint64{1, 2, 0}},
		HistogramPoint{Attrs: []Attr{Int("http.response.status_code", 503)}, Start: start, Time: now,
			Count: 0, Sum: 0, Bounds: []float64{0.1, 1}, Counts: []uint64{0, 0, 0}})
	r.Gauge("kn.serving.queue.depth", "Number of current requests in the queue", "{request}",
		NumberPoint{Time: now, Int: 0})
	r.Gauge("left.out", "", "")
	r.Scope("go.opentelemetry.io/contrib/instrumentation/runtime", "v1")
	r.Sum("go.memory.allocated", "Memory allocated to the heap by the application.", "By", true,
		NumberPoint{Start: start, Time: now, Int: 1 << 40})
	r.Sum("go.memory.used", "", "By", false,
		NumberPoint{Attrs: []Attr{String("go.memory.type", "stack")}, Start: start, Time: now, Int: -1},
		NumberPoint{Start: start, Time: now, Double: 2.5, IsDouble: true})

	want := &collectormetricspb.ExportMetricsServiceRequest{ResourceMetrics: []*metricspb.ResourceMetrics{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "hello"), str("empty", "")}},
		ScopeMetrics: []*metricspb.ScopeMetrics{
			{
				Scope: &commonpb.InstrumentationScope{Name: "knative.dev/serving/pkg/queue"},
				Metrics: []*metricspb.Metric{
					{Name: "kn.serving.invocation.duration", Description: "The duration of task execution", Unit: "s",
						Data: &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{
							AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
							DataPoints: []*metricspb.HistogramDataPoint{
								{Attributes: []*commonpb.KeyValue{num("http.response.status_code", 200)},
									StartTimeUnixNano: uint64(start.UnixNano()), TimeUnixNano: uint64(now.UnixNano()),
									Count: 3, Sum: proto.Float64(0.5), ExplicitBounds: []float64{0.1, 1}, BucketCounts: []uint64{1, 2, 0}},
								{Attributes: []*commonpb.KeyValue{num("http.response.status_code", 503)},
									StartTimeUnixNano: uint64(start.UnixNano()), TimeUnixNano: uint64(now.UnixNano()),
									Sum: proto.Float64(0), ExplicitBounds: []float64{0.1, 1}, BucketCounts: []uint64{0, 0, 0}},
							}}}},
					{Name: "kn.serving.queue.depth", Description: "Number of current requests in the queue", Unit: "{request}",
						Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{
							{TimeUnixNano: uint64(now.UnixNano()), Value: &metricspb.NumberDataPoint_AsInt{AsInt: 0}}}}}},
				},
			},
			{
				Scope: &commonpb.InstrumentationScope{Name: "go.opentelemetry.io/contrib/instrumentation/runtime", Version: "v1"},
				Metrics: []*metricspb.Metric{
					{Name: "go.memory.allocated", Description: "Memory allocated to the heap by the application.", Unit: "By",
						Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{IsMonotonic: true,
							AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
							DataPoints: []*metricspb.NumberDataPoint{{StartTimeUnixNano: uint64(start.UnixNano()), TimeUnixNano: uint64(now.UnixNano()),
								Value: &metricspb.NumberDataPoint_AsInt{AsInt: 1 << 40}}}}}},
					{Name: "go.memory.used", Unit: "By",
						Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{
							AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
							DataPoints: []*metricspb.NumberDataPoint{
								{Attributes: []*commonpb.KeyValue{str("go.memory.type", "stack")},
									StartTimeUnixNano: uint64(start.UnixNano()), TimeUnixNano: uint64(now.UnixNano()),
									Value: &metricspb.NumberDataPoint_AsInt{AsInt: -1}},
								{StartTimeUnixNano: uint64(start.UnixNano()), TimeUnixNano: uint64(now.UnixNano()),
									Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: 2.5}},
							}}}},
				},
			},
		},
	}}}
	var got collectormetricspb.ExportMetricsServiceRequest
	if err := proto.Unmarshal(r.Bytes(), &got); err != nil {
		t.Fatalf("proto.Unmarshal: %v", err)
	}
	if !proto.Equal(&got, want) {
		t.Errorf("decoded\n%v\nwant\n%v", &got, want)
	}
}

// TestMetricsRequestLarge: lengths that take multi-byte varints survive
// the backfilled lengths.
func TestMetricsRequestLarge(t *testing.T) {
	t.Parallel()
	for _, n := range []int{127, 128, 16383, 16384, 1 << 20} {
		r := NewMetricsRequest([]Attr{String("big", strings.Repeat("x", n))})
		r.Scope("s", "")
		r.Gauge("g", strings.Repeat("d", n), "", NumberPoint{Int: 1})
		var got collectormetricspb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(r.Bytes(), &got); err != nil {
			t.Fatalf("%d: proto.Unmarshal: %v", n, err)
		}
		rms := got.GetResourceMetrics()
		if len(rms) != 1 || len(rms[0].GetResource().GetAttributes()) != 1 ||
			len(rms[0].GetScopeMetrics()) != 1 || len(rms[0].GetScopeMetrics()[0].GetMetrics()) != 1 {
			t.Fatalf("%d: decoded %v, want one resource with one attribute and one metric", n, &got)
		}
		rm := rms[0]
		if len(rm.GetResource().GetAttributes()[0].GetValue().GetStringValue()) != n ||
			len(rm.GetScopeMetrics()[0].GetMetrics()[0].GetDescription()) != n {
			t.Errorf("%d bytes did not survive the round trip", n)
		}
	}
}
