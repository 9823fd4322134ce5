package otlp

import (
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of opentelemetry/proto/metrics/v1 and of
// ExportMetricsServiceRequest.
const (
	fieldRequestResourceMetrics protowire.Number = 1
	// ResourceMetrics
	fieldResourceMetricsResource protowire.Number = 1
	fieldResourceMetricsScopes   protowire.Number = 2
	// ScopeMetrics
	fieldScopeMetricsScope   protowire.Number = 1
	fieldScopeMetricsMetrics protowire.Number = 2
	// Metric
	fieldMetricName        protowire.Number = 1
	fieldMetricDescription protowire.Number = 2
	fieldMetricUnit        protowire.Number = 3
	fieldMetricGauge       protowire.Number = 5
	fieldMetricSum         protowire.Number = 7
	fieldMetricHistogram   protowire.Number = 9
	// Gauge, Sum and Histogram
	fieldDataPoints             protowire.Number = 1
	fieldAggregationTemporality protowire.Number = 2
	fieldSumIsMonotonic         protowire.Number = 3
	// NumberDataPoint
	fieldNumberStart      protowire.Number = 2
	fieldNumberTime       protowire.Number = 3
	fieldNumberAsDouble   protowire.Number = 4
	fieldNumberAsInt      protowire.Number = 6
	fieldNumberAttributes protowire.Number = 7
	// HistogramDataPoint
	fieldHistogramStart        protowire.Number = 2
	fieldHistogramTime         protowire.Number = 3
	fieldHistogramCount        protowire.Number = 4
	fieldHistogramSum          protowire.Number = 5
	fieldHistogramBucketCounts protowire.Number = 6
	fieldHistogramBounds       protowire.Number = 7
	fieldHistogramAttributes   protowire.Number = 9
)

// temporalityCumulative is AGGREGATION_TEMPORALITY_CUMULATIVE: every point
// counts from its start time, as OpenTelemetry's OTLP exporters report by
// default and Knative leaves them.
const temporalityCumulative = 2

// Attr is a data point's or a resource's attribute: a string, or with
// IsInt an integer.
type Attr struct {
	Key   string
	Str   string
	Int   int64
	IsInt bool
}

// String returns a string attribute.
func String(key, value string) Attr { return Attr{Key: key, Str: value} }

// Int returns an integer attribute.
func Int(key string, value int64) Attr { return Attr{Key: key, Int: value, IsInt: true} }

func appendAttr(b []byte, num protowire.Number, a Attr) []byte {
	if a.IsInt {
		return AppendIntAttribute(b, num, a.Key, a.Int)
	}
	return AppendStringAttribute(b, num, a.Key, a.Str)
}

// NumberPoint is a data point of a gauge or a sum: an integer, or with
// IsDouble a double.
type NumberPoint struct {
	Attrs []Attr
	// Start is the start of a cumulative sum; zero for a gauge.
	Start, Time time.Time
	Int         int64
	Double      float64
	IsDouble    bool
}

// HistogramPoint is a data point of an explicit-bucket histogram: Counts
// has one more element than Bounds (the last is past the last bound), and
// the counts are per bucket, not cumulative.
type HistogramPoint struct {
	Attrs       []Attr
	Start, Time time.Time
	Count       uint64
	Sum         float64
	Bounds      []float64
	Counts      []uint64
}

// MetricsRequest encodes an ExportMetricsServiceRequest of one resource,
// scope after scope, metric after metric, into one buffer. The zero value
// is not usable: start with NewMetricsRequest. It is not safe for
// concurrent use.
type MetricsRequest struct {
	b      []byte
	rm, sm int // the open ResourceMetrics and ScopeMetrics; sm < 0: none
}

// NewMetricsRequest starts a request for the resource with attributes
// resource, in the order given.
func NewMetricsRequest(resource []Attr) *MetricsRequest {
	r := &MetricsRequest{b: make([]byte, 0, 4096), sm: -1}
	r.b, r.rm = Open(r.b, fieldRequestResourceMetrics)
	var m int
	r.b, m = Open(r.b, fieldResourceMetricsResource)
	for _, a := range resource {
		r.b = appendAttr(r.b, FieldResourceAttributes, a)
	}
	r.b = Close(r.b, m)
	return r
}

// Scope starts the metrics of the instrumentation scope name (and
// version, "" for none); the previous scope ends.
func (r *MetricsRequest) Scope(name, version string) {
	if r.sm >= 0 {
		r.b = Close(r.b, r.sm)
	}
	r.b, r.sm = Open(r.b, fieldResourceMetricsScopes)
	var m int
	r.b, m = Open(r.b, fieldScopeMetricsScope)
	r.b = AppendString(r.b, FieldScopeName, name)
	r.b = AppendString(r.b, FieldScopeVersion, version)
	r.b = Close(r.b, m)
}

// metric opens a Metric and its data member; the caller closes both.
func (r *MetricsRequest) metric(name, description, unit string, data protowire.Number) (metric, member int) {
	r.b, metric = Open(r.b, fieldScopeMetricsMetrics)
	r.b = AppendString(r.b, fieldMetricName, name)
	r.b = AppendString(r.b, fieldMetricDescription, description)
	r.b = AppendString(r.b, fieldMetricUnit, unit)
	r.b, member = Open(r.b, data)
	return metric, member
}

// Gauge adds a gauge. A metric without points is left out.
func (r *MetricsRequest) Gauge(name, description, unit string, points ...NumberPoint) {
	if len(points) == 0 {
		return
	}
	m, g := r.metric(name, description, unit, fieldMetricGauge)
	for _, p := range points {
		r.appendNumber(p)
	}
	r.b = Close(Close(r.b, g), m)
}

// Sum adds a cumulative sum, monotonic (a counter) or not (an up-down
// counter). A metric without points is left out.
func (r *MetricsRequest) Sum(name, description, unit string, monotonic bool, points ...NumberPoint) {
	if len(points) == 0 {
		return
	}
	m, s := r.metric(name, description, unit, fieldMetricSum)
	for _, p := range points {
		r.appendNumber(p)
	}
	r.b = AppendUint(r.b, fieldAggregationTemporality, temporalityCumulative)
	if monotonic {
		r.b = AppendUint(r.b, fieldSumIsMonotonic, 1)
	}
	r.b = Close(Close(r.b, s), m)
}

// Histogram adds a cumulative explicit-bucket histogram. A metric without
// points is left out.
func (r *MetricsRequest) Histogram(name, description, unit string, points ...HistogramPoint) {
	if len(points) == 0 {
		return
	}
	m, h := r.metric(name, description, unit, fieldMetricHistogram)
	for _, p := range points {
		var d int
		r.b, d = Open(r.b, fieldDataPoints)
		for _, a := range p.Attrs {
			r.b = appendAttr(r.b, fieldHistogramAttributes, a)
		}
		r.b = AppendFixed64(r.b, fieldHistogramStart, unixNano(p.Start))
		r.b = AppendFixed64(r.b, fieldHistogramTime, unixNano(p.Time))
		r.b = AppendFixed64(r.b, fieldHistogramCount, p.Count)
		r.b = AppendDouble(r.b, fieldHistogramSum, p.Sum)
		// Packed repeated fixed64 and double, as proto3 writes them.
		r.b = protowire.AppendTag(r.b, fieldHistogramBucketCounts, protowire.BytesType)
		r.b = protowire.AppendVarint(r.b, uint64(8*len(p.Counts)))
		for _, c := range p.Counts {
			r.b = protowire.AppendFixed64(r.b, c)
		}
		r.b = protowire.AppendTag(r.b, fieldHistogramBounds, protowire.BytesType)
		r.b = protowire.AppendVarint(r.b, uint64(8*len(p.Bounds)))
		for _, v := range p.Bounds {
			r.b = protowire.AppendFixed64(r.b, math.Float64bits(v))
		}
		r.b = Close(r.b, d)
	}
	r.b = AppendUint(r.b, fieldAggregationTemporality, temporalityCumulative)
	r.b = Close(Close(r.b, h), m)
}

func (r *MetricsRequest) appendNumber(p NumberPoint) {
	var d int
	r.b, d = Open(r.b, fieldDataPoints)
	for _, a := range p.Attrs {
		r.b = appendAttr(r.b, fieldNumberAttributes, a)
	}
	r.b = AppendFixed64(r.b, fieldNumberStart, unixNano(p.Start))
	r.b = AppendFixed64(r.b, fieldNumberTime, unixNano(p.Time))
	// The value is a oneof: written even when 0.
	if p.IsDouble {
		r.b = AppendDouble(r.b, fieldNumberAsDouble, p.Double)
	} else {
		r.b = protowire.AppendTag(r.b, fieldNumberAsInt, protowire.Fixed64Type)
		r.b = protowire.AppendFixed64(r.b, uint64(p.Int))
	}
	r.b = Close(r.b, d)
}

// Bytes ends the request and returns it. The MetricsRequest is done.
func (r *MetricsRequest) Bytes() []byte {
	if r.sm >= 0 {
		r.b = Close(r.b, r.sm)
		r.sm = -1
	}
	return Close(r.b, r.rm)
}

// unixNano is t for a fixed64 *_unix_nano field; 0 means unknown.
func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(max(0, t.UnixNano()))
}
