package tracing

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/queue-dev/queue/otlp"
	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The OpenTelemetry environment variables that New reads, as named by the
// OpenTelemetry specification ("Environment Variable Specification"). The
// exporter's own OTEL_EXPORTER_OTLP_* variables and the resource's are
// package otlp's (otlp.FromEnv, otlp.ResourceAttributes).
const (
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
	envSampler        = "OTEL_TRACES_SAMPLER"
	envSamplerArg     = "OTEL_TRACES_SAMPLER_ARG"
	envPropagators    = "OTEL_PROPAGATORS"
)

// exporters is what OTEL_TRACES_EXPORTER asks for.
type exporters struct {
	otlp    bool // OTLP, over the protocol of OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL
	console bool // the console (stdout) exporter
}

func (e exporters) any() bool { return e.otlp || e.console }

// exportersWanted reads OTEL_TRACES_EXPORTER: a comma list of otlp,
// console and none. Unset, it means otlp when an OTLP endpoint is set,
// else nothing.
func exportersWanted(getenv func(string) string) (exporters, error) {
	var e exporters
	if strings.EqualFold(strings.TrimSpace(getenv(envSDKDisabled)), "true") {
		return e, nil
	}
	if v := strings.TrimSpace(getenv(envTracesExporter)); v != "" {
		for _, name := range strings.Split(v, ",") {
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "otlp":
				e.otlp = true
			case "console":
				e.console = true
			case "none", "":
			default:
				return exporters{}, fmt.Errorf("%s %q: want otlp, console or none", envTracesExporter, v)
			}
		}
		return e, nil
	}
	e.otlp = strings.TrimSpace(getenv(otlp.Traces.EnvName("ENDPOINT", true))) != "" ||
		strings.TrimSpace(getenv(otlp.Traces.EnvName("ENDPOINT", false))) != ""
	return e, nil
}

// newSampler builds the sampler from OTEL_TRACES_SAMPLER (specification
// "General SDK Configuration"); without it, the root decision is rate and a
// parent's decision is kept.
func newSampler(getenv func(string) string, rate float64) (sdktrace.Sampler, error) {
	if math.IsNaN(rate) || rate < 0 || rate > 1 {
		return nil, fmt.Errorf("sample rate %v: want a number from 0 to 1", rate)
	}
	name := strings.ToLower(strings.TrimSpace(getenv(envSampler)))
	if name == "" {
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(rate)), nil
	}
	ratio := func() (sdktrace.Sampler, error) {
		arg := strings.TrimSpace(getenv(envSamplerArg))
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil // the specification's default
		}
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
			return nil, fmt.Errorf("%s %q: want a number from 0 to 1", envSamplerArg, arg)
		}
		return sdktrace.TraceIDRatioBased(f), nil
	}
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return ratio()
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		s, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(s), nil
	}
	return nil, fmt.Errorf("%s %q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", envSampler, getenv(envSampler))
}

// Header names written by the propagators, canonical as http.Header keeps
// them.
const (
	hTraceparent    = "Traceparent"
	hTracestate     = "Tracestate"
	hB3             = "B3"
	hB3TraceID      = "X-B3-Traceid"
	hB3SpanID       = "X-B3-Spanid"
	hB3ParentSpanID = "X-B3-Parentspanid"
	hB3Sampled      = "X-B3-Sampled"
	hB3Flags        = "X-B3-Flags"
)

// propagators holds what OTEL_PROPAGATORS asks for.
type propagators struct {
	prop propagation.TextMapPropagator
	// stale lists the headers that Handler deletes before it injects: the
	// incoming context they carry has been replaced by queue's span, and a
	// header the injector does not overwrite (X-B3-ParentSpanId, or the B3
	// encoding not injected) would otherwise reach the upstream with the old
	// parent.
	stale []string
	names string // for the startup log line
}

// newPropagators parses OTEL_PROPAGATORS. Baggage is accepted but needs no
// propagator: queue never changes baggage, so the incoming header is passed
// through as it came (a decode and re-encode could change its bytes).
func newPropagators(getenv func(string) string) (propagators, error) {
	v := strings.TrimSpace(getenv(envPropagators))
	if v == "" {
		v = "tracecontext,baggage"
	}
	var w3c, none bool
	var enc b3.Encoding
	for _, name := range strings.Split(v, ",") {
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "tracecontext":
			w3c = true
		case "baggage", "":
		case "b3":
			enc |= b3.B3SingleHeader
		case "b3multi":
			enc |= b3.B3MultipleHeader
		case "none":
			none = true
		default:
			return propagators{}, fmt.Errorf("%s %q: want a comma list of tracecontext, baggage, b3, b3multi, or none", envPropagators, v)
		}
	}
	p := propagators{names: v}
	if none {
		if w3c || enc != 0 {
			return propagators{}, fmt.Errorf("%s %q: none excludes every other propagator", envPropagators, v)
		}
		p.prop = propagation.NewCompositeTextMapPropagator()
		return p, nil
	}
	var list []propagation.TextMapPropagator
	if w3c {
		list = append(list, propagation.TraceContext{})
		p.stale = append(p.stale, hTraceparent, hTracestate)
	}
	if enc != 0 {
		// One B3 propagator reads both encodings and writes those asked for.
		list = append(list, b3.New(b3.WithInjectEncoding(enc)))
		p.stale = append(p.stale, hB3, hB3TraceID, hB3SpanID, hB3ParentSpanID, hB3Sampled, hB3Flags)
	}
	p.prop = propagation.NewCompositeTextMapPropagator(list...)
	return p, nil
}
