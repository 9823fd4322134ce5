// Package tracing makes queue a participant in distributed traces
// (docs/contract.md section 3, "Trace context"): for every proxied request it starts
// an OpenTelemetry server span as a child of the incoming trace context,
// rewrites the request's trace headers so that the upstream sees that span as
// its parent, and exports finished spans over OTLP/HTTP with protobuf
// bodies.
//
// Configuration follows OpenTelemetry's own environment variables, read
// through Config.Getenv rather than the process environment, so that
// cmd/queue stays the only code that reads the environment and tests need no
// globals:
//
//   - OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none: tracing off.
//   - OTEL_EXPORTER_OTLP_ENDPOINT (base URL; /v1/traces is appended) or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is): with either set, or
//     with OTEL_TRACES_EXPORTER=otlp, tracing is on. With none of them set,
//     tracing is off: "no endpoint, no export" (docs/contract.md section 1.4).
//   - OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, _TIMEOUT, _COMPRESSION (gzip or
//     none), _PROTOCOL: only http/protobuf, the default, is supported;
//     http/json and grpc are refused with an error that names the variable.
//   - OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE, _CLIENT_CERTIFICATE and
//     _CLIENT_KEY: PEM files for an https collector.
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG; without them,
//     parentbased_traceidratio with Config.SampleRate.
//   - OTEL_PROPAGATORS: tracecontext, baggage, b3, b3multi, none.
//   - OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
//
// The exporter is the package's own (otlp.go), not OpenTelemetry's
// otlptracehttp: that one's generated protobuf types link gRPC and
// grpc-gateway into queue, doubling the binary and pushing idle RSS past
// queue's budget. It POSTs ExportTraceServiceRequest protobuf with its own
// http.Client, which ignores HTTP_PROXY and HTTPS_PROXY: those are meant for
// the application, and the collector is reached directly. A collector's
// 429, 502, 503 or 504, or a failed connection, is retried within the export
// timeout, 3 attempts at most, honouring Retry-After; any other non-2xx
// answer fails the export. Only the SDK's batch processor still reads the
// process environment by itself (OTEL_BSP_*).
//
// When tracing is off, New returns a nil *Tracer and queue does not install
// Tracer.Handler at all, so the request path pays nothing: W3C traceparent
// and tracestate, B3 and baggage headers then pass to the upstream unchanged,
// like any other end-to-end header. The nil *Tracer's methods are still safe
// to call: Handler returns next and Shutdown returns nil.
//
// What the package deliberately does not do:
//
//   - It touches no OpenTelemetry globals: no otel.SetTracerProvider, no
//     otel.SetTextMapPropagator, no otel.SetErrorHandler. Export failures are
//     logged to Config.Logger once per change of state, as a failing upstream
//     is (docs/contract.md section 6).
//   - It does not wrap the http.ResponseWriter (STYLE section 2 allows one
//     wrapper on the hot path, and it belongs to whoever needs it most). The
//     span records http.response.status_code only when the ResponseWriter that
//     Handler receives, or one it unwraps to, implements StatusReporter:
//     queue's HTTP/1.1 engine's own writer does, as does stats' wrapper of
//     an HTTP/2 one.
//   - It does not rewrite baggage: queue never changes it, so the incoming
//     baggage header is already the right outgoing one, byte for byte.
//   - It does not trace probes or admin endpoints: install Handler inside the
//     probe/drain layer.
//
// Concurrency: a *Tracer is safe for concurrent use; its Handler serves any
// number of requests at once. Shutdown may be called once the servers that
// use Handler have stopped; spans that end after Shutdown are dropped.
package tracing
