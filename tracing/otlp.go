package tracing

import (
	"context"
	"fmt"
	"time"

	"github.com/queue-dev/queue/otlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// This file encodes spans as OTLP's ExportTraceServiceRequest, by the
// field numbers of opentelemetry-proto v1
// (opentelemetry/proto/collector/trace/v1/trace_service.proto and the
// messages it uses), with package otlp's wire helpers; package otlp sends
// it. OpenTelemetry's own exporters would link the generated OTLP types
// and gRPC (README, "Dependencies").

// spanExporter implements sdktrace.SpanExporter on an otlp.Exporter: it
// encodes a batch and queues it, never waiting for the collector (the
// batch processor that calls it would otherwise hold its spans, and
// drop new ones, while a collector is slow). Failures are the
// otlp.Exporter's to log.
type spanExporter struct {
	e *otlp.Exporter
}

// ExportSpans implements sdktrace.SpanExporter.
func (x spanExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	x.e.Enqueue(appendExportRequest(nil, spans))
	return nil
}

// Shutdown implements sdktrace.SpanExporter: it sends what is queued
// within ctx and returns the last export's error.
func (x spanExporter) Shutdown(ctx context.Context) error {
	if err := x.e.Shutdown(ctx); err != nil {
		return fmt.Errorf("trace export: %w", err)
	}
	return nil
}

var _ sdktrace.SpanExporter = spanExporter{}

// Field numbers of opentelemetry-proto v1.
const (
	// ExportTraceServiceRequest
	fieldRequestResourceSpans protowire.Number = 1
	// ResourceSpans
	fieldResourceSpansResource   protowire.Number = 1
	fieldResourceSpansScopeSpans protowire.Number = 2
	fieldResourceSpansSchemaURL  protowire.Number = 3
	// ScopeSpans
	fieldScopeSpansScope     protowire.Number = 1
	fieldScopeSpansSpans     protowire.Number = 2
	fieldScopeSpansSchemaURL protowire.Number = 3
	// Span
	fieldSpanTraceID           protowire.Number = 1
	fieldSpanSpanID            protowire.Number = 2
	fieldSpanTraceState        protowire.Number = 3
	fieldSpanParentSpanID      protowire.Number = 4
	fieldSpanName              protowire.Number = 5
	fieldSpanKind              protowire.Number = 6
	fieldSpanStartTime         protowire.Number = 7
	fieldSpanEndTime           protowire.Number = 8
	fieldSpanAttributes        protowire.Number = 9
	fieldSpanDroppedAttributes protowire.Number = 10
	fieldSpanEvents            protowire.Number = 11
	fieldSpanDroppedEvents     protowire.Number = 12
	fieldSpanLinks             protowire.Number = 13
	fieldSpanDroppedLinks      protowire.Number = 14
	fieldSpanStatus            protowire.Number = 15
	fieldSpanFlags             protowire.Number = 16
	// Span.Event
	fieldEventTime              protowire.Number = 1
	fieldEventName              protowire.Number = 2
	fieldEventAttributes        protowire.Number = 3
	fieldEventDroppedAttributes protowire.Number = 4
	// Span.Link
	fieldLinkTraceID           protowire.Number = 1
	fieldLinkSpanID            protowire.Number = 2
	fieldLinkTraceState        protowire.Number = 3
	fieldLinkAttributes        protowire.Number = 4
	fieldLinkDroppedAttributes protowire.Number = 5
	fieldLinkFlags             protowire.Number = 6
	// Status
	fieldStatusMessage protowire.Number = 2
	fieldStatusCode    protowire.Number = 3
)

// Status.StatusCode values.
const (
	statusCodeOK    = 1
	statusCodeError = 2
)

// SpanFlags bits above the W3C trace flags: the span's parent is known to
// be remote or not (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK), and it is
// (SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK).
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// unixNano is t for a fixed64 *_unix_nano field; 0 means unknown.
func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(max(0, t.UnixNano()))
}

// count is a dropped_*_count, a uint32.
func count(n int) uint64 {
	return uint64(min(max(n, 0), 1<<32-1))
}

// scopeSpans is the spans of one instrumentation scope within a resource.
type scopeSpans struct {
	scope instrumentation.Scope
	spans []sdktrace.ReadOnlySpan
}

// resourceSpans is the spans of one resource, by scope.
type resourceSpans struct {
	res    *resource.Resource
	scopes []*scopeSpans
}

// groupSpans groups spans by resource, then by instrumentation scope, as
// ExportTraceServiceRequest nests them, in the order of first appearance.
func groupSpans(spans []sdktrace.ReadOnlySpan) []*resourceSpans {
	type scopeKey struct {
		res   attribute.Distinct
		scope instrumentation.Scope
	}
	var groups []*resourceSpans
	byRes := map[attribute.Distinct]*resourceSpans{}
	byScope := map[scopeKey]*scopeSpans{}
	for _, s := range spans {
		if s == nil {
			continue
		}
		res := s.Resource()
		rk := res.Equivalent()
		rg := byRes[rk]
		if rg == nil {
			rg = &resourceSpans{res: res}
			byRes[rk] = rg
			groups = append(groups, rg)
		}
		sk := scopeKey{res: rk, scope: s.InstrumentationScope()}
		sg := byScope[sk]
		if sg == nil {
			sg = &scopeSpans{scope: sk.scope}
			byScope[sk] = sg
			rg.scopes = append(rg.scopes, sg)
		}
		sg.spans = append(sg.spans, s)
	}
	return groups
}

// appendExportRequest appends spans encoded as an ExportTraceServiceRequest.
func appendExportRequest(b []byte, spans []sdktrace.ReadOnlySpan) []byte {
	for _, rg := range groupSpans(spans) {
		var rs, m int
		b, rs = otlp.Open(b, fieldRequestResourceSpans)
		if rg.res.Len() > 0 {
			b, m = otlp.Open(b, fieldResourceSpansResource)
			for it := rg.res.Iter(); it.Next(); {
				b = appendKeyValue(b, otlp.FieldResourceAttributes, it.Attribute())
			}
			b = otlp.Close(b, m)
		}
		for _, sg := range rg.scopes {
			var ss int
			b, ss = otlp.Open(b, fieldResourceSpansScopeSpans)
			b, m = otlp.Open(b, fieldScopeSpansScope)
			b = otlp.AppendString(b, otlp.FieldScopeName, sg.scope.Name)
			b = otlp.AppendString(b, otlp.FieldScopeVersion, sg.scope.Version)
			for it := sg.scope.Attributes.Iter(); it.Next(); {
				b = appendKeyValue(b, otlp.FieldScopeAttributes, it.Attribute())
			}
			b = otlp.Close(b, m)
			for _, s := range sg.spans {
				b = appendSpan(b, fieldScopeSpansSpans, s)
			}
			b = otlp.AppendString(b, fieldScopeSpansSchemaURL, sg.scope.SchemaURL)
			b = otlp.Close(b, ss)
		}
		b = otlp.AppendString(b, fieldResourceSpansSchemaURL, rg.res.SchemaURL())
		b = otlp.Close(b, rs)
	}
	return b
}

// flags is a Span's or Link's flags: the W3C trace flags and whether the
// parent (or linked span) is remote.
func flags(sc trace.SpanContext, remote bool) uint32 {
	f := uint32(sc.TraceFlags()) | flagHasIsRemote
	if remote {
		f |= flagIsRemote
	}
	return f
}

func appendSpan(b []byte, num protowire.Number, s sdktrace.ReadOnlySpan) []byte {
	b, start := otlp.Open(b, num)
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = protowire.AppendTag(b, fieldSpanTraceID, protowire.BytesType)
	b = protowire.AppendBytes(b, tid[:])
	b = protowire.AppendTag(b, fieldSpanSpanID, protowire.BytesType)
	b = protowire.AppendBytes(b, sid[:])
	b = otlp.AppendString(b, fieldSpanTraceState, sc.TraceState().String())
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = protowire.AppendTag(b, fieldSpanParentSpanID, protowire.BytesType)
		b = protowire.AppendBytes(b, psid[:])
	}
	b = otlp.AppendString(b, fieldSpanName, s.Name())
	// trace.SpanKind and Span.SpanKind agree on 1 (internal) to 5
	// (consumer); anything else is SPAN_KIND_UNSPECIFIED, 0.
	if k := s.SpanKind(); k >= trace.SpanKindInternal && k <= trace.SpanKindConsumer {
		b = otlp.AppendUint(b, fieldSpanKind, uint64(k))
	}
	b = otlp.AppendFixed64(b, fieldSpanStartTime, unixNano(s.StartTime()))
	b = otlp.AppendFixed64(b, fieldSpanEndTime, unixNano(s.EndTime()))
	for _, kv := range s.Attributes() {
		b = appendKeyValue(b, fieldSpanAttributes, kv)
	}
	b = otlp.AppendUint(b, fieldSpanDroppedAttributes, count(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		var m int
		b, m = otlp.Open(b, fieldSpanEvents)
		b = otlp.AppendFixed64(b, fieldEventTime, unixNano(ev.Time))
		b = otlp.AppendString(b, fieldEventName, ev.Name)
		for _, kv := range ev.Attributes {
			b = appendKeyValue(b, fieldEventAttributes, kv)
		}
		b = otlp.AppendUint(b, fieldEventDroppedAttributes, count(ev.DroppedAttributeCount))
		b = otlp.Close(b, m)
	}
	b = otlp.AppendUint(b, fieldSpanDroppedEvents, count(s.DroppedEvents()))
	for _, l := range s.Links() {
		var m int
		b, m = otlp.Open(b, fieldSpanLinks)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = protowire.AppendTag(b, fieldLinkTraceID, protowire.BytesType)
		b = protowire.AppendBytes(b, ltid[:])
		b = protowire.AppendTag(b, fieldLinkSpanID, protowire.BytesType)
		b = protowire.AppendBytes(b, lsid[:])
		b = otlp.AppendString(b, fieldLinkTraceState, l.SpanContext.TraceState().String())
		for _, kv := range l.Attributes {
			b = appendKeyValue(b, fieldLinkAttributes, kv)
		}
		b = otlp.AppendUint(b, fieldLinkDroppedAttributes, count(l.DroppedAttributeCount))
		b = otlp.AppendFixed32(b, fieldLinkFlags, flags(l.SpanContext, l.SpanContext.IsRemote()))
		b = otlp.Close(b, m)
	}
	b = otlp.AppendUint(b, fieldSpanDroppedLinks, count(s.DroppedLinks()))
	if st := s.Status(); st.Code != codes.Unset || st.Description != "" {
		var m int
		b, m = otlp.Open(b, fieldSpanStatus)
		b = otlp.AppendString(b, fieldStatusMessage, st.Description)
		switch st.Code {
		case codes.Ok:
			b = otlp.AppendUint(b, fieldStatusCode, statusCodeOK)
		case codes.Error:
			b = otlp.AppendUint(b, fieldStatusCode, statusCodeError)
		}
		b = otlp.Close(b, m)
	}
	b = otlp.AppendFixed32(b, fieldSpanFlags, flags(sc, parent.IsRemote()))
	return otlp.Close(b, start)
}

// appendKeyValue appends kv as the KeyValue field num.
func appendKeyValue(b []byte, num protowire.Number, kv attribute.KeyValue) []byte {
	b, start := otlp.Open(b, num)
	b = otlp.AppendString(b, otlp.FieldKeyValueKey, string(kv.Key))
	b = appendAnyValue(b, otlp.FieldKeyValueValue, kv.Value)
	return otlp.Close(b, start)
}

// appendAnyValue appends v as the AnyValue field num. The oneof member is
// written even when it holds its zero value, so that false, 0 and "" stay
// distinct from an empty value.
func appendAnyValue(b []byte, num protowire.Number, v attribute.Value) []byte {
	b, start := otlp.Open(b, num)
	var m, e int // the array's or list's start, an element's
	switch v.Type() {
	case attribute.BOOL:
		b = appendBool(b, v.AsBool())
	case attribute.INT64:
		b = appendInt(b, v.AsInt64())
	case attribute.FLOAT64:
		b = appendDouble(b, v.AsFloat64())
	case attribute.STRING:
		b = appendAnyString(b, v.AsString())
	case attribute.BYTESLICE:
		b = protowire.AppendTag(b, otlp.FieldAnyBytes, protowire.BytesType)
		b = protowire.AppendBytes(b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		b, m = otlp.Open(b, otlp.FieldAnyArray)
		for _, x := range v.AsBoolSlice() {
			b, e = otlp.Open(b, otlp.FieldListValues)
			b = appendBool(b, x)
			b = otlp.Close(b, e)
		}
		return otlp.Close(otlp.Close(b, m), start)
	case attribute.INT64SLICE:
		b, m = otlp.Open(b, otlp.FieldAnyArray)
		for _, x := range v.AsInt64Slice() {
			b, e = otlp.Open(b, otlp.FieldListValues)
			b = appendInt(b, x)
			b = otlp.Close(b, e)
		}
		return otlp.Close(otlp.Close(b, m), start)
	case attribute.FLOAT64SLICE:
		b, m = otlp.Open(b, otlp.FieldAnyArray)
		for _, x := range v.AsFloat64Slice() {
			b, e = otlp.Open(b, otlp.FieldListValues)
			b = appendDouble(b, x)
			b = otlp.Close(b, e)
		}
		return otlp.Close(otlp.Close(b, m), start)
	case attribute.STRINGSLICE:
		b, m = otlp.Open(b, otlp.FieldAnyArray)
		for _, x := range v.AsStringSlice() {
			b, e = otlp.Open(b, otlp.FieldListValues)
			b = appendAnyString(b, x)
			b = otlp.Close(b, e)
		}
		return otlp.Close(otlp.Close(b, m), start)
	case attribute.SLICE:
		b, m = otlp.Open(b, otlp.FieldAnyArray)
		for _, x := range v.AsSlice() {
			b = appendAnyValue(b, otlp.FieldListValues, x)
		}
		return otlp.Close(otlp.Close(b, m), start)
	case attribute.MAP:
		b, m = otlp.Open(b, otlp.FieldAnyKVList)
		for _, kv := range v.AsMap() {
			b = appendKeyValue(b, otlp.FieldListValues, kv)
		}
		return otlp.Close(otlp.Close(b, m), start)
	case attribute.EMPTY:
		// An AnyValue with no member is the empty value.
	default:
		b = appendAnyString(b, "INVALID") // as otlptracehttp does
	}
	return otlp.Close(b, start)
}

func appendBool(b []byte, v bool) []byte {
	b = protowire.AppendTag(b, otlp.FieldAnyBool, protowire.VarintType)
	return protowire.AppendVarint(b, protowire.EncodeBool(v))
}

func appendInt(b []byte, v int64) []byte {
	b = protowire.AppendTag(b, otlp.FieldAnyInt, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

func appendDouble(b []byte, v float64) []byte {
	return otlp.AppendDouble(b, otlp.FieldAnyDouble, v)
}

func appendAnyString(b []byte, v string) []byte {
	b = protowire.AppendTag(b, otlp.FieldAnyString, protowire.BytesType)
	return protowire.AppendString(b, v)
}
