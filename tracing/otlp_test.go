package tracing

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

var (
	testTraceID = trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	testSpanID  = trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	testParent  = trace.SpanID{0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	testLinked  = trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}
	testStart   = time.Unix(1700000000, 123456789)
)

// Helpers that build the expected OTLP messages.

func strValue(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}

func boolValue(b bool) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: b}}
}

func intValue(i int64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: i}}
}

func doubleValue(f float64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: f}}
}

func arrayValue(vs ...*commonpb.AnyValue) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
}

func kv(k string, v *commonpb.AnyValue) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: v}
}

// stubSpan is a finished span as the SDK hands it to an exporter.
func stubSpan(name string, res *resource.Resource, scope instrumentation.Scope) tracetest.SpanStub {
	return tracetest.SpanStub{
		Name: name,
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: testTraceID, SpanID: testSpanID, TraceFlags: trace.FlagsSampled,
		}),
		SpanKind:             trace.SpanKindServer,
		StartTime:            testStart,
		EndTime:              testStart.Add(time.Millisecond),
		Resource:             res,
		InstrumentationScope: scope,
	}
}

// decode parses an encoded request with the real OTLP types.
func decode(t *testing.T, b []byte) *collectortracepb.ExportTraceServiceRequest {
	t.Helper()
	var req collectortracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		t.Fatalf("proto.Unmarshal: %v", err)
	}
	return &req
}

// TestEncodeSpan: a span with every field the OTLP trace proto has (ids,
// trace state, parent, attributes of every value type, events, links,
// dropped counts, status, flags) decodes, with the proto's own types, to
// the message the OTLP specification gives for it.
func TestEncodeSpan(t *testing.T) {
	t.Parallel()
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.43.0",
		attribute.String("service.name", "queue"), attribute.Int("k8s.pod.uid", 7))
	scope := instrumentation.Scope{
		Name: instrumentationName, Version: "v1.2.3", SchemaURL: "https://example.com/scope",
		Attributes: attribute.NewSet(attribute.Bool("scope.attr", true)),
	}
	stub := stubSpan("GET", res, scope)
	stub.SpanContext = stub.SpanContext.WithTraceState(ts)
	stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: testTraceID, SpanID: testParent, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	stub.Attributes = []attribute.KeyValue{
		attribute.String("str", "s"),
		attribute.String("empty", ""),
		attribute.Bool("bool", true),
		attribute.Bool("false", false),
		attribute.Int64("int", -42),
		attribute.Int64("zero", 0),
		attribute.Float64("double", 1.5),
		attribute.Float64("inf", math.Inf(-1)),
		attribute.StringSlice("strs", []string{"a", ""}),
		attribute.BoolSlice("bools", []bool{true, false}),
		attribute.Int64Slice("ints", []int64{1, math.MinInt64}),
		attribute.Float64Slice("doubles", []float64{0.25, -3}),
		attribute.ByteSlice("bytes", []byte{0, 1, 2}),
		attribute.Slice("mixed", attribute.StringValue("x"), attribute.IntValue(2)),
		attribute.Map("map", attribute.String("k", "v")),
	}
	stub.DroppedAttributes = 3
	stub.Events = []sdktrace.Event{{
		Name:                  "retry",
		Time:                  testStart.Add(500 * time.Microsecond),
		Attributes:            []attribute.KeyValue{attribute.Int("attempt", 2)},
		DroppedAttributeCount: 1,
	}}
	stub.Links = []sdktrace.Link{{
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: testTraceID, SpanID: testLinked, TraceState: ts,
		}),
		Attributes: []attribute.KeyValue{attribute.String("link", "l")},
	}}
	stub.DroppedEvents, stub.DroppedLinks = 4, 5
	stub.Status = sdktrace.Status{Code: codes.Error, Description: "upstream refused"}

	got := decode(t, appendExportRequest(nil, []sdktrace.ReadOnlySpan{stub.Snapshot()}))

	want := &collectortracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
			kv("k8s.pod.uid", intValue(7)), // resource attributes come sorted
			kv("service.name", strValue("queue")),
		}},
		SchemaUrl: "https://opentelemetry.io/schemas/1.43.0",
		ScopeSpans: []*tracepb.ScopeSpans{{
			Scope: &commonpb.InstrumentationScope{
				Name: instrumentationName, Version: "v1.2.3",
				Attributes: []*commonpb.KeyValue{kv("scope.attr", boolValue(true))},
			},
			SchemaUrl: "https://example.com/scope",
			Spans: []*tracepb.Span{{
				TraceId:           testTraceID[:],
				SpanId:            testSpanID[:],
				TraceState:        "vendor=abc",
				ParentSpanId:      testParent[:],
				Name:              "GET",
				Kind:              tracepb.Span_SPAN_KIND_SERVER,
				StartTimeUnixNano: uint64(testStart.UnixNano()),
				EndTimeUnixNano:   uint64(testStart.Add(time.Millisecond).UnixNano()),
				Attributes: []*commonpb.KeyValue{
					kv("str", strValue("s")),
					kv("empty", strValue("")),
					kv("bool", boolValue(true)),
					kv("false", boolValue(false)),
					kv("int", intValue(-42)),
					kv("zero", intValue(0)),
					kv("double", doubleValue(1.5)),
					kv("inf", doubleValue(math.Inf(-1))),
					kv("strs", arrayValue(strValue("a"), strValue(""))),
					kv("bools", arrayValue(boolValue(true), boolValue(false))),
					kv("ints", arrayValue(intValue(1), intValue(math.MinInt64))),
					kv("doubles", arrayValue(doubleValue(0.25), doubleValue(-3))),
					kv("bytes", &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1, 2}}}),
					kv("mixed", arrayValue(strValue("x"), intValue(2))),
					kv("map", &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{
						Values: []*commonpb.KeyValue{kv("k", strValue("v"))},
					}}}),
				},
				DroppedAttributesCount: 3,
				Events: []*tracepb.Span_Event{{
					TimeUnixNano:           uint64(testStart.Add(500 * time.Microsecond).UnixNano()),
					Name:                   "retry",
					Attributes:             []*commonpb.KeyValue{kv("attempt", intValue(2))},
					DroppedAttributesCount: 1,
				}},
				DroppedEventsCount: 4,
				Links: []*tracepb.Span_Link{{
					TraceId:    testTraceID[:],
					SpanId:     testLinked[:],
					TraceState: "vendor=abc",
					Attributes: []*commonpb.KeyValue{kv("link", strValue("l"))},
					Flags:      uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK),
				}},
				DroppedLinksCount: 5,
				Status:            &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "upstream refused"},
				Flags: 0x01 | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK) |
					uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK),
			}},
		}},
	}}}

	// Field by field, so that a failure names the field.
	rs := got.GetResourceSpans()
	if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
		t.Fatalf("decoded request:\n%s\nwant one resource, scope and span", prototext.Format(got))
	}
	gs, ws := rs[0].GetScopeSpans()[0].GetSpans()[0], want.ResourceSpans[0].ScopeSpans[0].Spans[0]
	type check struct {
		field     string
		got, want proto.Message
	}
	checks := []check{
		{"resource", rs[0].GetResource(), want.ResourceSpans[0].Resource},
		{"scope", rs[0].GetScopeSpans()[0].GetScope(), want.ResourceSpans[0].ScopeSpans[0].Scope},
		{"status", gs.GetStatus(), ws.Status},
	}
	for i, a := range ws.Attributes {
		var g proto.Message = (*commonpb.KeyValue)(nil)
		if i < len(gs.GetAttributes()) {
			g = gs.GetAttributes()[i]
		}
		checks = append(checks, check{"attribute " + a.Key, g, a})
	}
	for i, e := range ws.Events {
		var g proto.Message = (*tracepb.Span_Event)(nil)
		if i < len(gs.GetEvents()) {
			g = gs.GetEvents()[i]
		}
		checks = append(checks, check{"event " + e.Name, g, e})
	}
	for i, l := range ws.Links {
		var g proto.Message = (*tracepb.Span_Link)(nil)
		if i < len(gs.GetLinks()) {
			g = gs.GetLinks()[i]
		}
		checks = append(checks, check{"link", g, l})
	}
	for _, c := range checks {
		if !proto.Equal(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.field, prototext.Format(c.got), prototext.Format(c.want))
		}
	}
	if got, want := len(gs.GetAttributes()), len(ws.Attributes); got != want {
		t.Errorf("%d attributes, want %d", got, want)
	}
	if got, want := gs.GetTraceId(), ws.TraceId; !bytes.Equal(got, want) {
		t.Errorf("trace_id = %x, want %x", got, want)
	}
	if got, want := gs.GetSpanId(), ws.SpanId; !bytes.Equal(got, want) {
		t.Errorf("span_id = %x, want %x", got, want)
	}
	if got, want := gs.GetParentSpanId(), ws.ParentSpanId; !bytes.Equal(got, want) {
		t.Errorf("parent_span_id = %x, want %x", got, want)
	}
	if got, want := gs.GetTraceState(), ws.TraceState; got != want {
		t.Errorf("trace_state = %q, want %q", got, want)
	}
	if got, want := gs.GetName(), ws.Name; got != want {
		t.Errorf("name = %q, want %q", got, want)
	}
	if got, want := gs.GetKind(), ws.Kind; got != want {
		t.Errorf("kind = %v, want %v", got, want)
	}
	if got, want := gs.GetStartTimeUnixNano(), ws.StartTimeUnixNano; got != want {
		t.Errorf("start_time_unix_nano = %d, want %d", got, want)
	}
	if got, want := gs.GetEndTimeUnixNano(), ws.EndTimeUnixNano; got != want {
		t.Errorf("end_time_unix_nano = %d, want %d", got, want)
	}
	if got, want := gs.GetFlags(), ws.Flags; got != want {
		t.Errorf("flags = %#x, want %#x", got, want)
	}
	// And the whole message, which also catches a field the checks above
	// miss.
	if !proto.Equal(got, want) {
		t.Errorf("decoded request:\n%s\nwant:\n%s", prototext.Format(got), prototext.Format(want))
	}
}

// TestEncodeGroups: spans are grouped by resource (equal resources being
// one) and, within it, by instrumentation scope, in the order each group
// first appears; a nil span is skipped.
func TestEncodeGroups(t *testing.T) {
	t.Parallel()
	resA := resource.NewSchemaless(attribute.String("service.name", "a"))
	resB := resource.NewSchemaless(attribute.String("service.name", "b"))
	scope1 := instrumentation.Scope{Name: "one"}
	scope2 := instrumentation.Scope{Name: "two"}
	var spans []sdktrace.ReadOnlySpan
	for _, s := range []struct {
		name  string
		res   *resource.Resource
		scope instrumentation.Scope
	}{
		{"a1-x", resA, scope1}, {"b1-x", resB, scope1}, {"a2-x", resA, scope2}, {"a1-y", resA, scope1},
		// An equal resource that is another *Resource joins the group.
		{"a2-y", resource.NewSchemaless(attribute.String("service.name", "a")), scope2},
	} {
		spans = append(spans, stubSpan(s.name, s.res, s.scope).Snapshot())
	}
	spans = append(spans, nil) // skipped
	got := decode(t, appendExportRequest(nil, spans))

	// service.name -> scope name -> span names
	var layout []string
	for _, rs := range got.GetResourceSpans() {
		attrs := rs.GetResource().GetAttributes()
		if len(attrs) == 0 {
			t.Fatalf("a resource without its attributes:\n%s", prototext.Format(got))
		}
		line := attrs[0].GetValue().GetStringValue() + ":"
		for _, ss := range rs.GetScopeSpans() {
			line += " " + ss.GetScope().GetName() + "["
			for i, s := range ss.GetSpans() {
				if i > 0 {
					line += ","
				}
				line += s.GetName()
			}
			line += "]"
		}
		layout = append(layout, line)
	}
	if got, want := strings.Join(layout, "; "), "a: one[a1-x,a1-y] two[a2-x,a2-y]; b: one[b1-x]"; got != want {
		t.Errorf("grouping = %q, want %q", got, want)
	}
}

// TestEncodeLongMessage: a message whose length needs a varint of one,
// two, three or more bytes decodes whole.
func TestEncodeLongMessage(t *testing.T) {
	t.Parallel()
	// Lengths of 128 bytes and more take a two-byte varint, 16 KiB three:
	// the backfilled length must shift the body correctly.
	for _, n := range []int{0, 1, 126, 127, 128, 129, 16383, 16384, 1 << 20} {
		stub := stubSpan("s", resource.Empty(), instrumentation.Scope{})
		stub.Attributes = []attribute.KeyValue{attribute.String("big", strings.Repeat("x", n))}
		got := decode(t, appendExportRequest(nil, []sdktrace.ReadOnlySpan{stub.Snapshot()}))
		rs := got.GetResourceSpans()
		if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
			t.Errorf("attribute of %d bytes: want one resource, scope and span, got %d resources", n, len(rs))
			continue
		}
		attrs := rs[0].GetScopeSpans()[0].GetSpans()[0].GetAttributes()
		if len(attrs) != 1 || len(attrs[0].GetValue().GetStringValue()) != n {
			t.Errorf("attribute of %d bytes did not survive the round trip", n)
		}
	}
}

func BenchmarkAppendExportRequest(b *testing.B) {
	res := resource.NewSchemaless(attribute.String("service.name", "queue"), attribute.String("k8s.pod.name", "p"))
	spans := make([]sdktrace.ReadOnlySpan, 512) // the batch processor's default batch
	for i := range spans {
		stub := stubSpan("GET", res, instrumentation.Scope{Name: instrumentationName})
		stub.Attributes = []attribute.KeyValue{
			attribute.String("http.request.method", "GET"), attribute.String("url.path", "/api/v1/items"),
			attribute.String("url.scheme", "http"), attribute.String("server.address", "example.com"),
			attribute.Int("server.port", 8080), attribute.String("network.protocol.version", "1.1"),
			attribute.String("client.address", "10.0.0.1"), attribute.Int("client.port", 54321),
			attribute.Int("http.response.status_code", 200),
		}
		spans[i] = stub.Snapshot()
	}
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf = appendExportRequest(buf[:0], spans)
	}
	b.SetBytes(int64(len(buf)))
}
