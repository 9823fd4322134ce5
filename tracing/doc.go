// Package tracing makes queue a participant in distributed traces
// (docs/contract.md section 3, "Trace context"): for every proxied request it starts
// an OpenTelemetry server span as a child of the incoming trace context and,
// inside it, the span Knative's queue-proxy makes for a proxied request,
// kn.queueproxy.proxy (ProxySpanName); it rewrites the request's trace
// headers so that the upstream sees that span as its parent; under a
// concurrency limit the chain's limiter layer adds kn.queueproxy.wait
// (StartWait, EndWait) for the wait for a slot. Finished spans are exported
// over OTLP (package otlp: http/protobuf or grpc) or written to stdout.
//
// Configuration follows OpenTelemetry's own environment variables, read
// through Config.Getenv rather than the process environment, so that
// cmd/queue stays the only code that reads the environment and tests need no
// globals:
//
//   - OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none: tracing off.
//   - OTEL_TRACES_EXPORTER: a comma list of otlp and console (each span as
//     a line of JSON on Config.Stdout, as OpenTelemetry's stdout exporter
//     writes it). Unset, it is otlp when an endpoint is set.
//   - OTEL_EXPORTER_OTLP_ENDPOINT (a base URL: /v1/traces is appended for
//     http/protobuf) or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is):
//     with either set, tracing is on. With no endpoint and no exporter,
//     tracing is off: "no endpoint, no export" (docs/contract.md section
//     1.4).
//   - OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (http/protobuf, the default, or
//     grpc), _HEADERS, _TIMEOUT, _COMPRESSION (gzip or none), _CERTIFICATE,
//     _CLIENT_CERTIFICATE and _CLIENT_KEY: otlp.FromEnv.
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG; without them,
//     parentbased_traceidratio with Config.SampleRate.
//   - OTEL_PROPAGATORS: tracecontext, baggage, b3, b3multi, none.
//   - OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
//     (otlp.ResourceAttributes, which request metrics share).
//
// The exporter is queue's own (otlp.go encodes, package otlp sends), not
// OpenTelemetry's otlptracehttp or otlptracegrpc: their generated protobuf
// types link gRPC and grpc-gateway into queue, doubling the binary and
// pushing idle RSS past queue's budget (README, "Dependencies"). The SDK's
// batch processor batches spans and hands each batch to package otlp's
// queue, which never blocks it; only that processor still reads the
// process environment by itself (OTEL_BSP_*).
//
// When tracing is off, New returns a nil *Tracer and queue installs neither
// Tracer.Handler nor the wait span, so the request path pays nothing: W3C
// traceparent and tracestate, B3 and baggage headers then pass to the
// upstream unchanged, like any other end-to-end header. The nil *Tracer's methods are still safe
// to call: Handler returns next and Shutdown returns nil.
//
// What the package deliberately does not do:
//
//   - It touches no OpenTelemetry globals: no otel.SetTracerProvider, no
//     otel.SetTextMapPropagator, no otel.SetErrorHandler. Export failures are
//     logged to Config.Logger by package otlp once per change of state, as a
//     failing upstream is (docs/contract.md section 6).
//   - It does not wrap the http.ResponseWriter (the request path keeps to
//     one wrapper, docs/architecture.md, and it belongs to whoever needs it
//     most). The
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
