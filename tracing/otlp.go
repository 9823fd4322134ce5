package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// This file is queue's OTLP/HTTP trace exporter. It replaces
// go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp, whose
// generated protobuf types (go.opentelemetry.io/proto/otlp) carry the
// collector's gRPC service stubs and so link google.golang.org/grpc and
// grpc-gateway into queue: 12 MB of binary and 5 MiB of idle RSS for a
// sidecar whose budget is 12 MiB. It writes the protobuf wire format by hand
// with protowire, by the field numbers of opentelemetry-proto v1
// (opentelemetry/proto/collector/trace/v1/trace_service.proto and the
// messages it uses), and speaks only http/protobuf.

// otlpConfig configures an otlpExporter; exporterConfig builds it from the
// OTEL_EXPORTER_OTLP_* variables.
type otlpConfig struct {
	// url is the full traces URL, e.g. http://collector:4318/v1/traces.
	url string
	// headers are sent with every export, e.g. Authorization.
	headers map[string]string
	// timeout bounds one export, retries included. It must be positive.
	timeout time.Duration
	// gzip compresses request bodies (Content-Encoding: gzip).
	gzip bool
	// tls configures https; nil means the system roots and no client
	// certificate.
	tls *tls.Config
}

// otlpExporter implements sdktrace.SpanExporter over OTLP/HTTP with
// protobuf bodies (OTLP specification, "OTLP/HTTP"). It is safe for
// concurrent use.
type otlpExporter struct {
	url     string
	header  http.Header
	timeout time.Duration
	gzip    bool
	client  *http.Client
	stopped atomic.Bool
}

// errExporterShutdown is ExportSpans's error after Shutdown.
var errExporterShutdown = errors.New("otlp exporter is shut down")

// Retry policy for the retryable answers of OTLP/HTTP ("Failures", "OTLP/HTTP
// Throttling"): at most maxAttempts requests per export, all within the
// export timeout, waiting Retry-After when the collector sends it and
// otherwise backoffBase, doubled per retry, with jitter so that many
// sidecars behind one collector do not retry in step.
const (
	maxAttempts = 3
	backoffBase = 500 * time.Millisecond
)

// newOTLPExporter returns an exporter for cfg. It does not connect.
func newOTLPExporter(cfg otlpConfig) *otlpExporter {
	h := make(http.Header, len(cfg.headers)+2)
	h.Set("User-Agent", "queue-otlp-exporter")
	for k, v := range cfg.headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/x-protobuf")
	if cfg.gzip {
		h.Set("Content-Encoding", "gzip")
	}
	transport := &http.Transport{
		// No proxy: the collector is an in-cluster neighbour, and the
		// HTTP(S)_PROXY meant for the application must not capture the
		// sidecar's telemetry (http.DefaultTransport would honour it).
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   cfg.timeout,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSClientConfig:     cfg.tls,
		TLSHandshakeTimeout: cfg.timeout,
		ForceAttemptHTTP2:   true,
		// Exports are sequential, one batch every few seconds: one idle
		// connection to the one collector is all that is reused.
		MaxIdleConns:        1,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     90 * time.Second,
	}
	return &otlpExporter{
		url:     cfg.url,
		header:  h,
		timeout: cfg.timeout,
		gzip:    cfg.gzip,
		// Our own client, not http.DefaultClient, which other code may
		// change. It follows 307 and 308 redirects with the body, as the
		// specification asks; the export's context bounds each request.
		client: &http.Client{Transport: transport},
	}
}

// ExportSpans implements sdktrace.SpanExporter: it sends spans in one
// ExportTraceServiceRequest, retrying a throttled or unavailable collector
// and a failed connection, maxAttempts requests at most, within the export
// timeout. A 2xx answer is success whatever its body (a partial success
// is not reported). Other answers are errors, a *statusError.
func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.stopped.Load() {
		return errExporterShutdown
	}
	if len(spans) == 0 {
		return nil
	}
	body := appendExportRequest(nil, spans)
	if e.gzip {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(body) // a bytes.Buffer does not fail
		if err := zw.Close(); err != nil {
			return fmt.Errorf("otlp export: gzip: %w", err)
		}
		body = buf.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		retry, wait, err := e.send(ctx, body)
		if err == nil {
			return nil
		}
		if !retry || attempt == maxAttempts {
			return err
		}
		if wait <= 0 {
			d := backoffBase << (attempt - 1)
			wait = d/2 + rand.N(d/2)
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return fmt.Errorf("%w (retry in %v is past the export timeout)", err, wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// send makes one request. It reports whether a failure may be retried and,
// if the collector said so in Retry-After, after how long.
func (e *otlpExporter) send(ctx context.Context, body []byte) (retry bool, wait time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return false, 0, fmt.Errorf("otlp export: %w", err)
	}
	req.Header = e.header.Clone()
	resp, err := e.client.Do(req)
	if err != nil {
		// The collector could not be reached, or did not answer: retry
		// (specification, "Failures"), unless the export's time is up.
		return ctx.Err() == nil, 0, fmt.Errorf("otlp export: %w", err)
	}
	defer resp.Body.Close()
	// Read a bounded amount, so that the connection can be reused and an
	// error can quote the collector; a larger body is abandoned.
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return false, 0, nil
	}
	serr := &statusError{code: resp.StatusCode, msg: errorMessage(resp.Header.Get("Content-Type"), b)}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true, retryAfter(resp.Header.Get("Retry-After")), serr
	}
	return false, 0, serr
}

// Shutdown implements sdktrace.SpanExporter: later exports fail with
// errExporterShutdown, and idle connections are closed. An export in
// flight runs on to its end or its timeout.
func (e *otlpExporter) Shutdown(context.Context) error {
	e.stopped.Store(true)
	e.client.CloseIdleConnections()
	return nil
}

var _ sdktrace.SpanExporter = (*otlpExporter)(nil)

// statusError is an export that the collector answered with a status other
// than 2xx.
type statusError struct {
	code int
	msg  string // the collector's explanation; "" if none
}

func (e *statusError) Error() string {
	s := "otlp export: collector answered " + strconv.Itoa(e.code) + " " + http.StatusText(e.code)
	if e.msg != "" {
		s += ": " + e.msg
	}
	return s
}

// errorMessage extracts the collector's explanation from an error body:
// google.rpc.Status.message (field 2) of a protobuf body, as OTLP/HTTP
// specifies, or the text of a text/plain one, which many proxies send. It
// is cut to one short line for the log.
func errorMessage(contentType string, body []byte) string {
	mt, _, _ := mime.ParseMediaType(contentType)
	var msg string
	switch mt {
	case "application/x-protobuf":
		for b := body; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				return ""
			}
			b = b[n:]
			if num == 2 && typ == protowire.BytesType {
				v, n := protowire.ConsumeBytes(b)
				if n < 0 {
					return ""
				}
				msg = string(v)
				b = b[n:]
				continue
			}
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return ""
			}
			b = b[n:]
		}
	case "text/plain":
		msg = string(body)
	default:
		return ""
	}
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) > 200 {
		msg = msg[:200]
		for !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
		msg += "…"
	}
	return msg
}

// retryAfter parses Retry-After (RFC 9110 section 10.2.3): seconds or an
// HTTP date. It returns 0 when absent or malformed.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// Field numbers of opentelemetry-proto v1.
const (
	// ExportTraceServiceRequest
	fieldRequestResourceSpans protowire.Number = 1
	// ResourceSpans
	fieldResourceSpansResource   protowire.Number = 1
	fieldResourceSpansScopeSpans protowire.Number = 2
	fieldResourceSpansSchemaURL  protowire.Number = 3
	// Resource
	fieldResourceAttributes protowire.Number = 1
	// ScopeSpans
	fieldScopeSpansScope     protowire.Number = 1
	fieldScopeSpansSpans     protowire.Number = 2
	fieldScopeSpansSchemaURL protowire.Number = 3
	// InstrumentationScope
	fieldScopeName       protowire.Number = 1
	fieldScopeVersion    protowire.Number = 2
	fieldScopeAttributes protowire.Number = 3
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
	// KeyValue
	fieldKeyValueKey   protowire.Number = 1
	fieldKeyValueValue protowire.Number = 2
	// AnyValue, a oneof
	fieldAnyString protowire.Number = 1
	fieldAnyBool   protowire.Number = 2
	fieldAnyInt    protowire.Number = 3
	fieldAnyDouble protowire.Number = 4
	fieldAnyArray  protowire.Number = 5
	fieldAnyKVList protowire.Number = 6
	fieldAnyBytes  protowire.Number = 7
	// ArrayValue and KeyValueList
	fieldListValues protowire.Number = 1
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

// openMessage appends the tag of the length-delimited field num and returns
// the offset at which the message's body starts; closeMessage then puts
// the body's length in front of it. Backfilling the length like this
// encodes the whole request into one growing buffer, with neither a buffer
// per nested message nor a pass to size each one first; the cost is a copy
// of each body within the buffer (BenchmarkAppendExportRequest).
func openMessage(b []byte, num protowire.Number) ([]byte, int) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return b, len(b)
}

func closeMessage(b []byte, start int) []byte {
	n := uint64(len(b) - start)
	k := protowire.SizeVarint(n)
	b = append(b, make([]byte, k)...)
	copy(b[start+k:], b[start:len(b)-k])
	protowire.AppendVarint(b[start:start], n)
	return b
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b // proto3 default: not on the wire
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}

func appendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, v)
}

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
		b, rs = openMessage(b, fieldRequestResourceSpans)
		if rg.res.Len() > 0 {
			b, m = openMessage(b, fieldResourceSpansResource)
			for it := rg.res.Iter(); it.Next(); {
				b = appendKeyValue(b, fieldResourceAttributes, it.Attribute())
			}
			b = closeMessage(b, m)
		}
		for _, sg := range rg.scopes {
			var ss int
			b, ss = openMessage(b, fieldResourceSpansScopeSpans)
			b, m = openMessage(b, fieldScopeSpansScope)
			b = appendString(b, fieldScopeName, sg.scope.Name)
			b = appendString(b, fieldScopeVersion, sg.scope.Version)
			for it := sg.scope.Attributes.Iter(); it.Next(); {
				b = appendKeyValue(b, fieldScopeAttributes, it.Attribute())
			}
			b = closeMessage(b, m)
			for _, s := range sg.spans {
				b = appendSpan(b, fieldScopeSpansSpans, s)
			}
			b = appendString(b, fieldScopeSpansSchemaURL, sg.scope.SchemaURL)
			b = closeMessage(b, ss)
		}
		b = appendString(b, fieldResourceSpansSchemaURL, rg.res.SchemaURL())
		b = closeMessage(b, rs)
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
	b, start := openMessage(b, num)
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = protowire.AppendTag(b, fieldSpanTraceID, protowire.BytesType)
	b = protowire.AppendBytes(b, tid[:])
	b = protowire.AppendTag(b, fieldSpanSpanID, protowire.BytesType)
	b = protowire.AppendBytes(b, sid[:])
	b = appendString(b, fieldSpanTraceState, sc.TraceState().String())
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = protowire.AppendTag(b, fieldSpanParentSpanID, protowire.BytesType)
		b = protowire.AppendBytes(b, psid[:])
	}
	b = appendString(b, fieldSpanName, s.Name())
	// trace.SpanKind and Span.SpanKind agree on 1 (internal) to 5
	// (consumer); anything else is SPAN_KIND_UNSPECIFIED, 0.
	if k := s.SpanKind(); k >= trace.SpanKindInternal && k <= trace.SpanKindConsumer {
		b = appendUint(b, fieldSpanKind, uint64(k))
	}
	b = appendFixed64(b, fieldSpanStartTime, unixNano(s.StartTime()))
	b = appendFixed64(b, fieldSpanEndTime, unixNano(s.EndTime()))
	for _, kv := range s.Attributes() {
		b = appendKeyValue(b, fieldSpanAttributes, kv)
	}
	b = appendUint(b, fieldSpanDroppedAttributes, count(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		var m int
		b, m = openMessage(b, fieldSpanEvents)
		b = appendFixed64(b, fieldEventTime, unixNano(ev.Time))
		b = appendString(b, fieldEventName, ev.Name)
		for _, kv := range ev.Attributes {
			b = appendKeyValue(b, fieldEventAttributes, kv)
		}
		b = appendUint(b, fieldEventDroppedAttributes, count(ev.DroppedAttributeCount))
		b = closeMessage(b, m)
	}
	b = appendUint(b, fieldSpanDroppedEvents, count(s.DroppedEvents()))
	for _, l := range s.Links() {
		var m int
		b, m = openMessage(b, fieldSpanLinks)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = protowire.AppendTag(b, fieldLinkTraceID, protowire.BytesType)
		b = protowire.AppendBytes(b, ltid[:])
		b = protowire.AppendTag(b, fieldLinkSpanID, protowire.BytesType)
		b = protowire.AppendBytes(b, lsid[:])
		b = appendString(b, fieldLinkTraceState, l.SpanContext.TraceState().String())
		for _, kv := range l.Attributes {
			b = appendKeyValue(b, fieldLinkAttributes, kv)
		}
		b = appendUint(b, fieldLinkDroppedAttributes, count(l.DroppedAttributeCount))
		b = appendFixed32(b, fieldLinkFlags, flags(l.SpanContext, l.SpanContext.IsRemote()))
		b = closeMessage(b, m)
	}
	b = appendUint(b, fieldSpanDroppedLinks, count(s.DroppedLinks()))
	if st := s.Status(); st.Code != codes.Unset || st.Description != "" {
		var m int
		b, m = openMessage(b, fieldSpanStatus)
		b = appendString(b, fieldStatusMessage, st.Description)
		switch st.Code {
		case codes.Ok:
			b = appendUint(b, fieldStatusCode, statusCodeOK)
		case codes.Error:
			b = appendUint(b, fieldStatusCode, statusCodeError)
		}
		b = closeMessage(b, m)
	}
	b = appendFixed32(b, fieldSpanFlags, flags(sc, parent.IsRemote()))
	return closeMessage(b, start)
}

// appendKeyValue appends kv as the KeyValue field num.
func appendKeyValue(b []byte, num protowire.Number, kv attribute.KeyValue) []byte {
	b, start := openMessage(b, num)
	b = appendString(b, fieldKeyValueKey, string(kv.Key))
	b = appendAnyValue(b, fieldKeyValueValue, kv.Value)
	return closeMessage(b, start)
}

// appendAnyValue appends v as the AnyValue field num. The oneof member is
// written even when it holds its zero value, so that false, 0 and "" stay
// distinct from an empty value.
func appendAnyValue(b []byte, num protowire.Number, v attribute.Value) []byte {
	b, start := openMessage(b, num)
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
		b = protowire.AppendTag(b, fieldAnyBytes, protowire.BytesType)
		b = protowire.AppendBytes(b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		b, m = openMessage(b, fieldAnyArray)
		for _, x := range v.AsBoolSlice() {
			b, e = openMessage(b, fieldListValues)
			b = appendBool(b, x)
			b = closeMessage(b, e)
		}
		return closeMessage(closeMessage(b, m), start)
	case attribute.INT64SLICE:
		b, m = openMessage(b, fieldAnyArray)
		for _, x := range v.AsInt64Slice() {
			b, e = openMessage(b, fieldListValues)
			b = appendInt(b, x)
			b = closeMessage(b, e)
		}
		return closeMessage(closeMessage(b, m), start)
	case attribute.FLOAT64SLICE:
		b, m = openMessage(b, fieldAnyArray)
		for _, x := range v.AsFloat64Slice() {
			b, e = openMessage(b, fieldListValues)
			b = appendDouble(b, x)
			b = closeMessage(b, e)
		}
		return closeMessage(closeMessage(b, m), start)
	case attribute.STRINGSLICE:
		b, m = openMessage(b, fieldAnyArray)
		for _, x := range v.AsStringSlice() {
			b, e = openMessage(b, fieldListValues)
			b = appendAnyString(b, x)
			b = closeMessage(b, e)
		}
		return closeMessage(closeMessage(b, m), start)
	case attribute.SLICE:
		b, m = openMessage(b, fieldAnyArray)
		for _, x := range v.AsSlice() {
			b = appendAnyValue(b, fieldListValues, x)
		}
		return closeMessage(closeMessage(b, m), start)
	case attribute.MAP:
		b, m = openMessage(b, fieldAnyKVList)
		for _, kv := range v.AsMap() {
			b = appendKeyValue(b, fieldListValues, kv)
		}
		return closeMessage(closeMessage(b, m), start)
	case attribute.EMPTY:
		// An AnyValue with no member is the empty value.
	default:
		b = appendAnyString(b, "INVALID") // as otlptracehttp does
	}
	return closeMessage(b, start)
}

func appendBool(b []byte, v bool) []byte {
	b = protowire.AppendTag(b, fieldAnyBool, protowire.VarintType)
	return protowire.AppendVarint(b, protowire.EncodeBool(v))
}

func appendInt(b []byte, v int64) []byte {
	b = protowire.AppendTag(b, fieldAnyInt, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

func appendDouble(b []byte, v float64) []byte {
	b = protowire.AppendTag(b, fieldAnyDouble, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

func appendAnyString(b []byte, v string) []byte {
	b = protowire.AppendTag(b, fieldAnyString, protowire.BytesType)
	return protowire.AppendString(b, v)
}
