// Package otlp sends OpenTelemetry data to a collector: the one OTLP
// transport that queue's traces (package tracing) and request metrics
// (cmd/queue) share, and the protobuf wire helpers both encoders use.
//
// An [Exporter] sends encoded export requests (ExportTraceServiceRequest
// or ExportMetricsServiceRequest, which the caller encodes) over either
// protocol of the OTLP specification:
//
//   - http/protobuf: a POST of the message to the signal's URL
//     (/v1/traces, /v1/metrics), over HTTP/1.1 or HTTP/2 (ALPN);
//   - grpc: the collector service's unary Export call, made as gRPC makes
//     it on the wire (an HTTP/2 POST to
//     /opentelemetry.proto.collector.<signal>.v1.<Service>/Export,
//     Content-Type application/grpc, the message behind gRPC's 5-byte
//     prefix, the status in the grpc-status and grpc-message trailers or,
//     for a trailers-only answer, headers) with net/http's client: HTTP/2
//     with prior knowledge for an http:// endpoint, HTTP/2 over TLS for
//     an https:// one. No gRPC library is linked: grpc-go and the
//     generated OTLP stubs it needs would add megabytes to the binary and
//     to idle RSS for one unary call every few seconds (README,
//     "Dependencies").
//
// [Exporter.Enqueue] never blocks: it puts a request in a queue bounded in
// bytes that one goroutine empties in order. When the queue is full (the
// collector is down or slow) the oldest requests waiting are dropped and
// counted ([Exporter.Dropped]): for cumulative metrics the newest request
// holds everything the dropped ones did. A request is retried, within the
// export timeout and at most 3 times, when the collector answers with what
// the specification calls retryable: HTTP 429, 502, 503 or 504 (after
// Retry-After when given), gRPC UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED,
// ABORTED, OUT_OF_RANGE or DATA_LOSS, and RESOURCE_EXHAUSTED when the
// status carries a RetryInfo (after its delay), or when the connection
// failed. Failures are logged once per change of state (failing,
// recovered), as a failing upstream is (docs/contract.md section 6).
//
// [FromEnv] reads the OTEL_EXPORTER_OTLP_* variables of a signal, through
// a getenv function rather than the process environment, so that cmd/queue
// stays the only code that reads the environment. The client ignores
// HTTP_PROXY and HTTPS_PROXY: those are meant for the application, and the
// collector is reached directly.
//
// What the package deliberately does not do: encode spans or metric
// values (its callers do, with its wire helpers), batch or time exports
// (its callers decide when), or follow a collector's partial success
// other than by reporting it as an error that is not retried.
//
// Concurrency: an Exporter is safe for concurrent use. Its goroutine
// starts in New and waits on a channel: at rest it wakes for nothing.
// Shutdown sends what is queued, within its context, and stops it.
package otlp
