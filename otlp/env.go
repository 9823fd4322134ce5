package otlp

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

	"golang.org/x/net/http/httpguts"
)

// The OTLP exporter variables, as the OpenTelemetry specification names
// them ("OTLP Exporter Configuration"). Each has a signal-specific form,
// OTEL_EXPORTER_OTLP_TRACES_* or _METRICS_*, which wins over the general
// one.
const (
	envPrefix            = "OTEL_EXPORTER_OTLP_"
	envEndpoint          = "ENDPOINT"
	envHeaders           = "HEADERS"
	envTimeout           = "TIMEOUT"
	envCompression       = "COMPRESSION"
	envProtocol          = "PROTOCOL"
	envCertificate       = "CERTIFICATE"
	envClientCertificate = "CLIENT_CERTIFICATE"
	envClientKey         = "CLIENT_KEY"
)

// EnvName returns the name of an OTLP exporter variable: the general one
// ("ENDPOINT" -> OTEL_EXPORTER_OTLP_ENDPOINT) or, with specific, the
// signal's own (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
func (s Signal) EnvName(suffix string, specific bool) string {
	if !specific {
		return envPrefix + suffix
	}
	return envPrefix + strings.ToUpper(s.String()) + "_" + suffix
}

// lookup returns the value of the signal's variable if it is set, else
// that of the general one, and the name of the variable it came from.
func (s Signal) lookup(getenv func(string) string, suffix string) (value, name string) {
	if n := s.EnvName(suffix, true); strings.TrimSpace(getenv(n)) != "" {
		return strings.TrimSpace(getenv(n)), n
	}
	n := s.EnvName(suffix, false)
	return strings.TrimSpace(getenv(n)), n
}

// Default endpoints of the specification, for an exporter asked for
// without one.
const (
	defaultHTTPEndpoint = "http://localhost:4318"
	defaultGRPCEndpoint = "http://localhost:4317"
)

// FromEnv reads the signal's OTLP exporter variables through getenv (nil
// means none is set): _PROTOCOL (http/protobuf, the default, or grpc;
// http/json is refused), _ENDPOINT, _HEADERS, _TIMEOUT (milliseconds),
// _COMPRESSION (gzip or none), _CERTIFICATE, _CLIENT_CERTIFICATE and
// _CLIENT_KEY (PEM files). For http/protobuf the signal's endpoint is the
// URL as it is and the general one a base to which the signal's path
// (/v1/traces) is appended; for grpc either is the collector's address.
// Without an endpoint it is the specification's default, localhost. It
// also returns the endpoint without credentials or query, for a log line.
// Every error names the variable and never quotes a header value, which
// may be a secret.
func FromEnv(getenv func(string) string, s Signal) (Config, string, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	cfg := Config{Signal: s}
	switch v, n := s.lookup(getenv, envProtocol); strings.ToLower(v) {
	case "", string(HTTPProtobuf):
		cfg.Protocol = HTTPProtobuf
	case string(GRPC):
		cfg.Protocol = GRPC
	default:
		return cfg, "", fmt.Errorf("%s %q: want http/protobuf or grpc", n, v)
	}

	endpoint, name := s.lookup(getenv, envEndpoint)
	general := name == s.EnvName(envEndpoint, false)
	if endpoint == "" {
		endpoint, general = defaultHTTPEndpoint, true
		if cfg.Protocol == GRPC {
			endpoint = defaultGRPCEndpoint
		}
	}
	u, err := parseURL(endpoint)
	if err != nil {
		return cfg, "", fmt.Errorf("%s %q: want an http:// or https:// URL", name, endpoint)
	}
	if general && cfg.Protocol == HTTPProtobuf {
		// The general endpoint is a base URL; each signal appends its
		// path ("Endpoint URLs for OTLP/HTTP").
		u.Path = strings.TrimSuffix(u.Path, "/") + s.HTTPPath()
		u.RawPath = ""
	}
	cfg.URL = u.String()

	cfg.Headers = map[string]string{}
	for _, n := range []string{s.EnvName(envHeaders, false), s.EnvName(envHeaders, true)} {
		// The signal's variable adds to the general one and wins per key.
		kv, err := ParseKeyValues(getenv(n))
		if err != nil {
			return cfg, "", fmt.Errorf("%s: %w", n, err)
		}
		for k, v := range kv {
			if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
				// The value may be a secret: name the key only.
				return cfg, "", fmt.Errorf("%s: header %q: want a valid HTTP header name and value", n, k)
			}
			cfg.Headers[k] = v
		}
	}

	cfg.Timeout = DefaultTimeout
	if v, n := s.lookup(getenv, envTimeout); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
			return cfg, "", fmt.Errorf("%s %q: want a positive number of milliseconds", n, v)
		}
		cfg.Timeout = time.Duration(ms) * time.Millisecond
	}

	switch v, n := s.lookup(getenv, envCompression); strings.ToLower(v) {
	case "", "none":
	case "gzip":
		cfg.Gzip = true
	default:
		return cfg, "", fmt.Errorf("%s %q: want gzip or none", n, v)
	}

	if cfg.TLS, err = s.tlsConfig(getenv); err != nil {
		return cfg, "", err
	}

	u.User = nil // the log line must not carry credentials
	u.RawQuery = ""
	if cfg.Protocol == GRPC {
		u.Path, u.RawPath = "", ""
	}
	return cfg, u.String(), nil
}

// tlsConfig reads the certificate files that the signal's _CERTIFICATE,
// _CLIENT_CERTIFICATE and _CLIENT_KEY name (PEM). It returns nil, the
// system roots and no client certificate, when none is set.
func (s Signal) tlsConfig(getenv func(string) string) (*tls.Config, error) {
	ca, caName := s.lookup(getenv, envCertificate)
	cert, certName := s.lookup(getenv, envClientCertificate)
	key, keyName := s.lookup(getenv, envClientKey)
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

// ParseKeyValues parses the list format of OTEL_EXPORTER_OTLP_HEADERS and
// OTEL_RESOURCE_ATTRIBUTES: comma-separated key=value members, values
// percent-encoded (W3C Baggage's format, without properties). Empty
// members are skipped; a later key wins. Errors never quote a value,
// which may be a secret.
func ParseKeyValues(s string) (map[string]string, error) {
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

// The resource variables of the specification ("General SDK
// Configuration").
const (
	envServiceName        = "OTEL_SERVICE_NAME"
	envResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES"
)

// ResourceAttributes returns the attributes of the resource that describes
// this process, the same for every signal: base, then
// OTEL_RESOURCE_ATTRIBUTES, which wins per key, then service.name from
// OTEL_SERVICE_NAME, else the resource's own, else service, else "queue".
// The map is the caller's.
func ResourceAttributes(getenv func(string) string, base map[string]string, service string) (map[string]string, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	kv := make(map[string]string, len(base)+1)
	for k, v := range base {
		kv[k] = v
	}
	fromEnv, err := ParseKeyValues(getenv(envResourceAttributes))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envResourceAttributes, err)
	}
	for k, v := range fromEnv {
		kv[k] = v
	}
	name := strings.TrimSpace(getenv(envServiceName))
	if name == "" {
		name = kv["service.name"]
	}
	if name == "" {
		name = service
	}
	if name == "" {
		name = "queue"
	}
	kv["service.name"] = name
	return kv, nil
}
