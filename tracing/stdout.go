package tracing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// stdoutExporter is the console exporter (OTEL_TRACES_EXPORTER=console,
// Knative's tracing protocol stdout): each span as one line of JSON, what
// OpenTelemetry's stdouttrace exporter writes with its defaults (no
// indentation, timestamps kept): the SDK's tracetest.SpanStub encoded with
// encoding/json. stdouttrace itself is not linked for this: it brings the
// SDK's metric instrumentation of exporters along.
type stdoutExporter struct {
	mu      sync.Mutex
	enc     *json.Encoder // guarded by mu
	stopped bool          // guarded by mu
}

func newStdoutExporter(w io.Writer) *stdoutExporter {
	return &stdoutExporter{enc: json.NewEncoder(w)}
}

// ExportSpans implements sdktrace.SpanExporter: one Write per span, so that
// lines of other writers to the same stream (the access log) do not
// interleave with a span's.
func (e *stdoutExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return nil
	}
	var errs []error
	for i, stub := range tracetest.SpanStubsFromReadOnlySpans(spans) {
		if err := e.enc.Encode(stub); err != nil {
			errs = append(errs, fmt.Errorf("trace export: span %d to stdout: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// Shutdown implements sdktrace.SpanExporter: later spans are not written.
func (e *stdoutExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	e.stopped = true
	e.mu.Unlock()
	return nil
}

var _ sdktrace.SpanExporter = (*stdoutExporter)(nil)
