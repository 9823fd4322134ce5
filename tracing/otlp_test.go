package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
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
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

var (
	testTraceID = trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	testSpanID  = trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	testParent  = trace.SpanID{0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	testLinked  = trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}
	testStart   = time.Unix(1700000000, 123456789)
	testNow     = time.Unix(1700000000, 0) // a whole second, as HTTP dates are
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
		line := rs.GetResource().GetAttributes()[0].GetValue().GetStringValue() + ":"
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

func TestEncodeLongMessage(t *testing.T) {
	t.Parallel()
	// Lengths of 128 bytes and more take a two-byte varint, 16 KiB three:
	// the backfilled length must shift the body correctly.
	for _, n := range []int{0, 1, 126, 127, 128, 129, 16383, 16384, 1 << 20} {
		stub := stubSpan("s", resource.Empty(), instrumentation.Scope{})
		stub.Attributes = []attribute.KeyValue{attribute.String("big", strings.Repeat("x", n))}
		got := decode(t, appendExportRequest(nil, []sdktrace.ReadOnlySpan{stub.Snapshot()}))
		attrs := got.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()[0].GetAttributes()
		if len(attrs) != 1 || len(attrs[0].GetValue().GetStringValue()) != n {
			t.Errorf("attribute of %d bytes did not survive the round trip", n)
		}
	}
}

// roundTripper is a stub collector: it answers request i with answers[i]
// (the last one for any later request) and records each request.
type roundTripper struct {
	answers []answer

	mu       sync.Mutex
	requests []recorded
}

type answer struct {
	status int
	header http.Header
	body   []byte
	err    error // a transport error instead of a response
}

type recorded struct {
	at     time.Time
	header http.Header
	body   []byte // as sent, before any gzip decoding
}

func (rt *roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	rt.mu.Lock()
	i := len(rt.requests)
	rt.requests = append(rt.requests, recorded{at: time.Now(), header: r.Header.Clone(), body: body})
	rt.mu.Unlock()
	a := rt.answers[min(i, len(rt.answers)-1)]
	if a.err != nil {
		return nil, a.err
	}
	h := a.header
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{
		StatusCode: a.status,
		Status:     http.StatusText(a.status),
		Header:     h,
		Body:       io.NopCloser(bytes.NewReader(a.body)),
		Request:    r,
	}, nil
}

func (rt *roundTripper) got() []recorded {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.requests
}

// testExporter returns an exporter for cfg that sends to rt.
func testExporter(cfg otlpConfig, rt http.RoundTripper) *otlpExporter {
	if cfg.url == "" {
		cfg.url = "http://collector.test:4318/v1/traces"
	}
	if cfg.timeout == 0 {
		cfg.timeout = 10 * time.Second
	}
	e := newOTLPExporter(cfg)
	e.client.Transport = rt
	return e
}

func oneSpan() []sdktrace.ReadOnlySpan {
	return []sdktrace.ReadOnlySpan{stubSpan("GET", resource.Empty(), instrumentation.Scope{Name: "s"}).Snapshot()}
}

// rpcStatus encodes a google.rpc.Status with message msg, the body of an
// OTLP/HTTP error response.
func rpcStatus(msg string) []byte {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 3)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendString(b, msg)
}

func TestExportRetry(t *testing.T) {
	t.Parallel()
	pb := http.Header{"Content-Type": {"application/x-protobuf"}}
	tests := []struct {
		name     string
		answers  []answer
		timeout  time.Duration
		wantErr  string // "" means success
		attempts int
		waits    []time.Duration // minimum wait before each retry
	}{
		{
			name:     "503 then success",
			answers:  []answer{{status: 503}, {status: 200}},
			attempts: 2, waits: []time.Duration{backoffBase / 2},
		},
		{
			name:     "429 with Retry-After",
			answers:  []answer{{status: 429, header: http.Header{"Retry-After": {"3"}}}, {status: 200}},
			attempts: 2, waits: []time.Duration{3 * time.Second},
		},
		{
			name: "Retry-After as an HTTP date",
			answers: []answer{
				{status: 503, header: http.Header{"Retry-After": {testNow.Add(4 * time.Second).UTC().Format(http.TimeFormat)}}},
				{status: 200},
			},
			attempts: 2, waits: []time.Duration{4 * time.Second},
		},
		{
			name:     "502 and 504 then success",
			answers:  []answer{{status: 502}, {status: 504}, {status: 204}},
			attempts: 3, waits: []time.Duration{backoffBase / 2, backoffBase},
		},
		{
			name:     "connection failure then success",
			answers:  []answer{{err: errors.New("connection refused")}, {status: 200}},
			attempts: 2, waits: []time.Duration{backoffBase / 2},
		},
		{
			name:     "gives up after three attempts",
			answers:  []answer{{status: 503, header: pb, body: rpcStatus("overloaded")}},
			attempts: 3, waits: []time.Duration{backoffBase / 2, backoffBase},
			wantErr: "503 Service Unavailable: overloaded",
		},
		{
			name:     "Retry-After past the timeout",
			answers:  []answer{{status: 429, header: http.Header{"Retry-After": {"60"}}}, {status: 200}},
			timeout:  5 * time.Second,
			attempts: 1,
			wantErr:  "429",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				// The bubble's clock starts at 2000-01-01; move it to
				// testNow so that HTTP dates are in the future.
				time.Sleep(time.Until(testNow))
				rt := &roundTripper{answers: tt.answers}
				e := testExporter(otlpConfig{timeout: tt.timeout}, rt)
				err := e.ExportSpans(t.Context(), oneSpan())
				switch {
				case tt.wantErr == "" && err != nil:
					t.Errorf("ExportSpans = %v, want success", err)
				case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
					t.Errorf("ExportSpans = %v, want an error with %q", err, tt.wantErr)
				}
				reqs := rt.got()
				if got, want := len(reqs), tt.attempts; got != want {
					t.Fatalf("%d requests, want %d", got, want)
				}
				for i := 1; i < len(reqs); i++ {
					if got, want := reqs[i].at.Sub(reqs[i-1].at), tt.waits[i-1]; got < want {
						t.Errorf("retry %d after %v, want at least %v", i, got, want)
					}
					if !bytes.Equal(reqs[i].body, reqs[0].body) {
						t.Errorf("retry %d sent another body", i)
					}
				}
				if len(reqs) > 0 {
					if got, max := reqs[len(reqs)-1].at.Sub(reqs[0].at), e.timeout; got > max {
						t.Errorf("retries took %v, past the export timeout %v", got, max)
					}
				}
			})
		})
	}
}

func TestExportStatusError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		answer  answer
		wantErr string
	}{
		{name: "400 protobuf status", answer: answer{status: 400,
			header: http.Header{"Content-Type": {"application/x-protobuf"}}, body: rpcStatus("bad span")},
			wantErr: "collector answered 400 Bad Request: bad span"},
		{name: "401 text", answer: answer{status: 401,
			header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, body: []byte("no token\n")},
			wantErr: "collector answered 401 Unauthorized: no token"},
		{name: "404 html ignored", answer: answer{status: 404,
			header: http.Header{"Content-Type": {"text/html"}}, body: []byte("<h1>nope</h1>")},
			wantErr: "collector answered 404 Not Found"},
		{name: "500 not retried", answer: answer{status: 500}, wantErr: "collector answered 500 Internal Server Error"},
		{name: "redirect not followed without Location", answer: answer{status: 302}, wantErr: "collector answered 302 Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt := &roundTripper{answers: []answer{tt.answer, {status: 200}}}
			err := testExporter(otlpConfig{}, rt).ExportSpans(t.Context(), oneSpan())
			if err == nil || !strings.HasSuffix(err.Error(), tt.wantErr) {
				t.Errorf("ExportSpans = %v, want an error ending %q", err, tt.wantErr)
			}
			var serr *statusError
			if !errors.As(err, &serr) || serr.code != tt.answer.status {
				t.Errorf("ExportSpans = %#v, want a *statusError with code %d", err, tt.answer.status)
			}
			if got := len(rt.got()); got != 1 {
				t.Errorf("%d requests, want 1: %d is not retryable", got, tt.answer.status)
			}
		})
	}
}

func TestExportRequestHeaders(t *testing.T) {
	t.Parallel()
	for _, gz := range []bool{false, true} {
		name := "identity"
		if gz {
			name = "gzip"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rt := &roundTripper{answers: []answer{{status: 200, body: []byte("ignored")}}}
			e := testExporter(otlpConfig{
				gzip:    gz,
				headers: map[string]string{"authorization": "Bearer x", "Content-Type": "text/plain"},
			}, rt)
			spans := oneSpan()
			if err := e.ExportSpans(t.Context(), spans); err != nil {
				t.Fatalf("ExportSpans: %v", err)
			}
			reqs := rt.got()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			h := reqs[0].header
			wantEncoding := ""
			if gz {
				wantEncoding = "gzip"
			}
			for k, want := range map[string]string{
				"Content-Type":     "application/x-protobuf", // ours wins over the configured one
				"Content-Encoding": wantEncoding,
				"Authorization":    "Bearer x",
			} {
				if got := h.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
			body := reqs[0].body
			if gz {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatalf("gzip: %v", err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatalf("gunzip: %v", err)
				}
			}
			if want := appendExportRequest(nil, spans); !bytes.Equal(body, want) {
				t.Errorf("body differs from the encoded spans")
			}
			if got := decode(t, body).GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()[0].GetName(); got != "GET" {
				t.Errorf("decoded span name %q, want GET", got)
			}
		})
	}
}

func TestExporterClient(t *testing.T) {
	t.Parallel()
	e := newOTLPExporter(otlpConfig{url: "http://127.0.0.1:1/v1/traces", timeout: time.Second})
	if e.client == http.DefaultClient {
		t.Error("exporter uses http.DefaultClient")
	}
	tr, ok := e.client.Transport.(*http.Transport)
	if !ok || tr == http.DefaultTransport {
		t.Fatalf("transport = %T, want an *http.Transport of its own", e.client.Transport)
	}
	if tr.Proxy != nil {
		t.Error("transport has a Proxy; want none, not even from the environment")
	}
}

func TestExporterShutdown(t *testing.T) {
	t.Parallel()
	rt := &roundTripper{answers: []answer{{status: 200}}}
	e := testExporter(otlpConfig{}, rt)
	if err := e.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := e.ExportSpans(t.Context(), oneSpan()); !errors.Is(err, errExporterShutdown) {
		t.Errorf("ExportSpans after Shutdown = %v, want %v", err, errExporterShutdown)
	}
	if n := len(rt.got()); n != 0 {
		t.Errorf("%d requests after Shutdown, want 0", n)
	}
}

func TestExportTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		block := http.RoundTripper(roundTripFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}))
		e := testExporter(otlpConfig{timeout: 2 * time.Second}, block)
		start := time.Now()
		err := e.ExportSpans(context.Background(), oneSpan())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ExportSpans = %v, want the deadline", err)
		}
		if got, want := time.Since(start), 2*time.Second; got != want {
			t.Errorf("export took %v, want the timeout %v", got, want)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestExportTLS: OTEL_EXPORTER_OTLP_CERTIFICATE names the CA that an https
// collector's certificate is checked against.
func TestExportTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req collectortracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}))
	// The untrusted case makes the server log a handshake error.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		env     map[string]string
		wantErr bool
	}{
		{name: "trusted", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_EXPORTER_OTLP_CERTIFICATE": ca}},
		{name: "traces certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": ca}},
		{name: "untrusted", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_EXPORTER_OTLP_TIMEOUT": "200"}, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, _, err := exporterConfig(func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatalf("exporterConfig: %v", err)
			}
			e := newOTLPExporter(cfg)
			defer e.Shutdown(t.Context())
			err = e.ExportSpans(t.Context(), oneSpan())
			if (err != nil) != tt.wantErr {
				t.Errorf("ExportSpans = %v, want error %t", err, tt.wantErr)
			}
		})
	}
}

func TestExporterConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want otlpConfig
		log  string
	}{
		{
			name: "defaults",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			want: otlpConfig{url: "http://c:4318/v1/traces", headers: map[string]string{}, timeout: 10 * time.Second},
			log:  "http://c:4318/v1/traces",
		},
		{
			name: "traces variables win",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT":           "http://c:4318",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":    "https://u:p@t:443/custom?k=secret",
				"OTEL_EXPORTER_OTLP_TIMEOUT":            "100",
				"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT":     "2500",
				"OTEL_EXPORTER_OTLP_COMPRESSION":        "none",
				"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "GZIP",
				"OTEL_EXPORTER_OTLP_PROTOCOL":           "grpc",
				"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL":    "http/protobuf",
			},
			want: otlpConfig{url: "https://u:p@t:443/custom?k=secret", headers: map[string]string{},
				timeout: 2500 * time.Millisecond, gzip: true},
			log: "https://t:443/custom",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, log, err := exporterConfig(func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatalf("exporterConfig: %v", err)
			}
			if got.url != tt.want.url || got.timeout != tt.want.timeout || got.gzip != tt.want.gzip ||
				len(got.headers) != len(tt.want.headers) || got.tls != nil {
				t.Errorf("exporterConfig = %+v, want %+v", got, tt.want)
			}
			if log != tt.log {
				t.Errorf("logged endpoint = %q, want %q", log, tt.log)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	long := "a" + strings.Repeat("é", 150) // 301 bytes: byte 200 is mid-rune
	tests := []struct {
		name, contentType string
		body              []byte
		want              string
	}{
		{"protobuf", "application/x-protobuf", rpcStatus("quota\nexceeded"), "quota exceeded"},
		{"protobuf malformed", "application/x-protobuf", []byte{0x12, 0x7f, 'a'}, ""},
		{"text", "text/plain", []byte("  busy  \r\n"), "busy"},
		{"text cut on a rune", "text/plain", []byte(long), "a" + strings.Repeat("é", 99) + "…"},
		{"json ignored", "application/json", []byte(`{"message":"x"}`), ""},
		{"none", "", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := errorMessage(tt.contentType, tt.body); got != tt.want {
				t.Errorf("errorMessage = %q, want %q", got, tt.want)
			}
		})
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
