package tracing

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/net/http/httpguts"
)

// The OpenTelemetry environment variables that New reads, as named by the
// OpenTelemetry specification ("Environment Variable Specification" and
// "OTLP Exporter Configuration").
const (
	envSDKDisabled             = "OTEL_SDK_DISABLED"
	envTracesExporter          = "OTEL_TRACES_EXPORTER"
	envEndpoint                = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint          = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envHeaders                 = "OTEL_EXPORTER_OTLP_HEADERS"
	envTracesHeaders           = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	envTimeout                 = "OTEL_EXPORTER_OTLP_TIMEOUT"
	envTracesTimeout           = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
	envCompression             = "OTEL_EXPORTER_OTLP_COMPRESSION"
	envTracesCompression       = "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"
	envProtocol                = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol          = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envCertificate             = "OTEL_EXPORTER_OTLP_CERTIFICATE"
	envTracesCertificate       = "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"
	envClientCertificate       = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
	envTracesClientCertificate = "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE"
	envClientKey               = "OTEL_EXPORTER_OTLP_CLIENT_KEY"
	envTracesClientKey         = "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY"
	envSampler                 = "OTEL_TRACES_SAMPLER"
	envSamplerArg              = "OTEL_TRACES_SAMPLER_ARG"
	envPropagators             = "OTEL_PROPAGATORS"
	envServiceName             = "OTEL_SERVICE_NAME"
	envResourceAttributes      = "OTEL_RESOURCE_ATTRIBUTES"
)

// defaultEndpoint is the OTLP/HTTP receiver the specification names when
// OTEL_TRACES_EXPORTER=otlp comes without an endpoint.
const defaultEndpoint = "http://localhost:4318/v1/traces"

// lookup returns the value of the signal-specific variable if it is set,
// else that of the general one, and the name of the variable it came from.
func lookup(getenv func(string) string, specific, general string) (value, name string) {
	if v := strings.TrimSpace(getenv(specific)); v != "" {
		return v, specific
	}
	return strings.TrimSpace(getenv(general)), general
}

// exporterWanted reports whether the environment asks for a trace exporter:
// OTEL_TRACES_EXPORTER names otlp, or is unset and an endpoint is set.
func exporterWanted(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv(envSDKDisabled)), "true") {
		return false, nil
	}
	otlp := false
	if v := strings.TrimSpace(getenv(envTracesExporter)); v != "" {
		for _, name := range strings.Split(v, ",") {
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "otlp":
				otlp = true
			case "none", "":
			default:
				return false, fmt.Errorf("%s %q: want otlp or none", envTracesExporter, v)
			}
		}
		return otlp, nil
	}
	endpoint, _ := lookup(getenv, envTracesEndpoint, envEndpoint)
	return endpoint != "", nil
}

// exporterConfig turns the OTLP variables into the exporter's
// configuration; getenv, not the process environment, decides. It also
// returns the traces URL, without credentials, for the startup log line.
func exporterConfig(getenv func(string) string) (otlpConfig, string, error) {
	var cfg otlpConfig
	// Only http/protobuf is implemented (see otlp.go): http/json would need
	// a second encoder and grpc the gRPC stack this package exists to keep
	// out of the binary.
	switch v, n := lookup(getenv, envTracesProtocol, envProtocol); strings.ToLower(v) {
	case "", "http/protobuf":
	default:
		return cfg, "", fmt.Errorf("%s %q: only http/protobuf is supported", n, v)
	}

	endpoint, name := lookup(getenv, envTracesEndpoint, envEndpoint)
	if endpoint == "" {
		endpoint, name = defaultEndpoint, envTracesEndpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cfg, "", fmt.Errorf("%s %q: want an http:// or https:// URL", name, endpoint)
	}
	if name == envEndpoint {
		// The general endpoint is a base URL; each signal appends its
		// path (OTLP Exporter Configuration, "Endpoint URLs for OTLP/HTTP").
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		u.RawPath = ""
	}
	cfg.url = u.String()

	cfg.headers = map[string]string{}
	for _, n := range []string{envHeaders, envTracesHeaders} {
		// The specific variable adds to the general one and wins per key.
		kv, err := parseKeyValues(getenv(n))
		if err != nil {
			return cfg, "", fmt.Errorf("%s: %w", n, err)
		}
		for k, v := range kv {
			if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
				// The value may be a secret: name the key only.
				return cfg, "", fmt.Errorf("%s: header %q: want a valid HTTP header name and value", n, k)
			}
			cfg.headers[k] = v
		}
	}

	cfg.timeout = 10 * time.Second // the specification's default
	if v, n := lookup(getenv, envTracesTimeout, envTimeout); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
			return cfg, "", fmt.Errorf("%s %q: want a positive number of milliseconds", n, v)
		}
		cfg.timeout = time.Duration(ms) * time.Millisecond
	}

	switch v, n := lookup(getenv, envTracesCompression, envCompression); strings.ToLower(v) {
	case "", "none":
	case "gzip":
		cfg.gzip = true
	default:
		return cfg, "", fmt.Errorf("%s %q: want gzip or none", n, v)
	}

	if cfg.tls, err = tlsConfig(getenv); err != nil {
		return cfg, "", err
	}

	u.User = nil // the log line must not carry credentials
	u.RawQuery = ""
	return cfg, u.String(), nil
}

// tlsConfig reads the certificate files that OTEL_EXPORTER_OTLP_[TRACES_]
// CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY name (PEM). It returns
// nil, the system roots and no client certificate, when none is set.
func tlsConfig(getenv func(string) string) (*tls.Config, error) {
	ca, caName := lookup(getenv, envTracesCertificate, envCertificate)
	cert, certName := lookup(getenv, envTracesClientCertificate, envClientCertificate)
	key, keyName := lookup(getenv, envTracesClientKey, envClientKey)
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caName, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %q: no PEM certificate in the file", caName, ca)
		}
	}
	switch {
	case cert == "" && key == "":
	case cert == "":
		return nil, fmt.Errorf("%s is set without %s", keyName, certName)
	case key == "":
		return nil, fmt.Errorf("%s is set without %s", certName, keyName)
	default:
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			// The error names files, never the key's bytes.
			return nil, fmt.Errorf("%s, %s: %w", certName, keyName, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
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

// parseKeyValues parses the list format of OTEL_EXPORTER_OTLP_HEADERS and
// OTEL_RESOURCE_ATTRIBUTES: comma-separated key=value members, values
// percent-encoded (W3C Baggage's format, without properties). Empty members
// are skipped; a later key wins. Errors never quote a value, which may be a
// secret.
func parseKeyValues(s string) (map[string]string, error) {
	kv := map[string]string{}
	for i, member := range strings.Split(s, ",") {
		if strings.TrimSpace(member) == "" {
			continue
		}
		k, v, ok := strings.Cut(member, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("member %d: want key=value", i+1)
		}
		v, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("member %d (%s): bad percent-encoding in the value", i+1, k)
		}
		kv[k] = v
	}
	return kv, nil
}
