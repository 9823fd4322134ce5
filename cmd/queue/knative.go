package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/queue-dev/queue/ingress"
	"github.com/queue-dev/queue/otlp"
	"github.com/queue-dev/queue/probe"
	"github.com/queue-dev/queue/proxy"
)

// DefaultKnativeCertDir is where Knative Serving mounts the serving
// certificate pair when system-internal TLS is on.
const DefaultKnativeCertDir = "/var/lib/knative/certs"

// knativeProfilingListen is where Knative's queue-proxy serves
// /debug/pprof/ when config-observability turns runtime profiling on
// (knative.dev/pkg/observability/runtime's ProfilingDefaultPort).
const knativeProfilingListen = ":8008"

// knativeTLSMinVersion is Knative mode's TLS floor when
// QUEUE_PROXY_TLS_MIN_VERSION is unset: Knative's queue-proxy takes the
// default of knative.dev/pkg/network/tls (DefaultConfigFromEnv), TLS 1.3.
// Standalone the floor stays 1.2.
const knativeTLSMinVersion = tls.VersionTLS13

// knativeH2CPort is the serving port Knative gives revisions whose
// container port is named h2c.
const knativeH2CPort = "8013"

// applyKnative fills what no flag and no QUEUE_* variable set from the
// environment Knative Serving's reconciler gives its queue-proxy container
// (docs/contract.md section 1.3, "Knative environment"). given reports the flags that
// were set. Every malformed value is a ConfigError naming the variable.
func applyKnative(c *Config, given map[string]bool, getenv func(string) string) error {
	port := func(name string) (string, error) {
		v := getenv(name)
		if v == "" {
			return "", nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return "", configErrorf("invalid value %q for %s: want a port number from 1 to 65535", v, name)
		}
		return v, nil
	}
	seconds := func(name string, dst *time.Duration, flag string) error {
		v := getenv(name)
		if v == "" || given[flag] {
			return nil
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < 0 {
			return configErrorf("invalid value %q for %s: want whole seconds, 0 or more (0 means none)", v, name)
		}
		*dst = time.Duration(n * float64(time.Second))
		return nil
	}

	if p, err := port("USER_PORT"); err != nil {
		return err
	} else if p != "" && !given["upstream"] {
		c.Upstream = net.JoinHostPort("127.0.0.1", p)
	}
	servingPort, err := port("QUEUE_SERVING_PORT")
	if err != nil {
		return err
	}
	if servingPort != "" && !given["listen"] {
		c.Listen = ":" + servingPort
	}
	if servingPort == knativeH2CPort && !given["upstream-protocol"] {
		c.UpstreamProtocol = proxy.H2C
	}
	if p, err := port("QUEUE_SERVING_TLS_PORT"); err != nil {
		return err
	} else if p != "" && !given["tls-listen"] {
		c.TLSListen = ":" + p
	}
	if v := getenv("CONTAINER_CONCURRENCY"); v != "" && !given["concurrency"] {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return configErrorf("invalid value %q for CONTAINER_CONCURRENCY: want a whole number, 0 (unlimited) or more", v)
		}
		c.Concurrency = n
	}
	if err := seconds("REVISION_TIMEOUT_SECONDS", &c.Timeout, "timeout"); err != nil {
		return err
	}
	if err := seconds("REVISION_RESPONSE_START_TIMEOUT_SECONDS", &c.ResponseStartTimeout, "response-start-timeout"); err != nil {
		return err
	}
	if err := seconds("REVISION_IDLE_TIMEOUT_SECONDS", &c.IdleTimeout, "idle-timeout"); err != nil {
		return err
	}
	if v := getenv("SERVING_LOGGING_LEVEL"); v != "" && !given["log-level"] {
		var l zapLevel
		if err := l.UnmarshalText([]byte(v)); err != nil {
			return configErrorf("invalid value %q for SERVING_LOGGING_LEVEL: want debug, info, warn or error (or zap's dpanic, panic, fatal)", v)
		}
		c.LogLevel = logLevelOf(l)
	}
	switch v := getenv("QUEUE_PROXY_TLS_MIN_VERSION"); v {
	case "":
	case "1.2":
		c.TLSMinVersion = tls.VersionTLS12
	case "1.3":
		c.TLSMinVersion = tls.VersionTLS13
	default:
		return configErrorf("invalid value %q for QUEUE_PROXY_TLS_MIN_VERSION: want 1.2 or 1.3", v)
	}
	if err := applyKnativeRest(c, given, getenv); err != nil {
		return err
	}
	c.Labels = Labels{
		Namespace:     getenv("SERVING_NAMESPACE"),
		Service:       getenv("SERVING_SERVICE"),
		Configuration: getenv("SERVING_CONFIGURATION"),
		Revision:      getenv("SERVING_REVISION"),
		Pod:           getenv("SERVING_POD"),
	}
	c.PodIP = getenv("SERVING_POD_IP")

	if c.TLSCert == "" && c.TLSKey == "" {
		crt, key := filepath.Join(c.KnativeCertDir, "tls.crt"), filepath.Join(c.KnativeCertDir, "tls.key")
		if fileExists(crt) && fileExists(key) {
			c.TLSCert, c.TLSKey = crt, key
		}
	}

	if v := getenv("ENABLE_HTTP2_AUTO_DETECTION"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return configErrorf("invalid value %q for ENABLE_HTTP2_AUTO_DETECTION: want true or false", v)
		}
		c.DetectHTTP2 = b
	}
	if v := getenv("SERVING_READINESS_PROBE"); v != "" && !given["probe"] {
		multi, _ := strconv.ParseBool(getenv("ENABLE_MULTI_CONTAINER_PROBES"))
		if err := c.readinessFromJSON(v, multi, given["probe-period"]); err != nil {
			return err
		}
	}
	return nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// k8sProbe is the part of a Kubernetes corev1.Probe that queue reads. It
// is our own struct so that the binary carries no Kubernetes API module.
type k8sProbe struct {
	Exec      json.RawMessage `json:"exec"`
	TCPSocket *struct {
		Host string    `json:"host"`
		Port intOrName `json:"port"`
	} `json:"tcpSocket"`
	HTTPGet *struct {
		Host        string    `json:"host"`
		Path        string    `json:"path"`
		Port        intOrName `json:"port"`
		Scheme      string    `json:"scheme"`
		HTTPHeaders []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"httpHeaders"`
	} `json:"httpGet"`
	GRPC *struct {
		Port    int     `json:"port"`
		Service *string `json:"service"`
	} `json:"grpc"`
	TimeoutSeconds   int `json:"timeoutSeconds"`
	PeriodSeconds    int `json:"periodSeconds"`
	SuccessThreshold int `json:"successThreshold"`
	FailureThreshold int `json:"failureThreshold"`
}

// intOrName is Kubernetes' IntOrString for a port: a number, or a numeric
// string. Knative resolves named ports before it writes the probe.
type intOrName int

func (p *intOrName) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		b = []byte(s)
	}
	n, err := strconv.Atoi(string(b))
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %s: want a number from 1 to 65535", b)
	}
	*p = intOrName(n)
	return nil
}

// readinessFromJSON reads SERVING_READINESS_PROBE: one corev1.Probe, or
// with ENABLE_MULTI_CONTAINER_PROBES an array of them (ready when all are).
func (c *Config) readinessFromJSON(v string, multi, periodGiven bool) error {
	var probes []k8sProbe
	trimmed := strings.TrimSpace(v)
	var err error
	if strings.HasPrefix(trimmed, "[") {
		err = json.Unmarshal([]byte(trimmed), &probes)
	} else {
		var p k8sProbe
		err = json.Unmarshal([]byte(trimmed), &p)
		probes = []k8sProbe{p}
	}
	if err != nil {
		return configErrorf("invalid SERVING_READINESS_PROBE: %v: want the JSON of a Kubernetes Probe (an array of them with ENABLE_MULTI_CONTAINER_PROBES)", err)
	}
	if len(probes) > 1 && !multi {
		return configErrorf("invalid SERVING_READINESS_PROBE: %d probes but ENABLE_MULTI_CONTAINER_PROBES is not true: want one Probe", len(probes))
	}
	var all probe.All
	for i, p := range probes {
		pr, err := c.proberOf(p)
		if err != nil {
			return configErrorf("invalid SERVING_READINESS_PROBE (probe %d): %v", i+1, err)
		}
		all = append(all, pr)
		if i == 0 {
			c.FailureThreshold, c.SuccessThreshold = p.FailureThreshold, p.SuccessThreshold
			if !periodGiven {
				c.ProbePeriod = time.Duration(p.PeriodSeconds) * time.Second
			}
		} else if !periodGiven && p.PeriodSeconds == 0 {
			c.ProbePeriod = 0 // any aggressive probe makes the whole check aggressive
		}
	}
	if len(all) == 1 {
		c.Prober = all[0]
	} else {
		c.Prober = all
	}
	c.Probe = "knative"
	return nil
}

func (c *Config) proberOf(p k8sProbe) (probe.Prober, error) {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	_, userPort, _ := net.SplitHostPort(c.Upstream)
	addr := func(host string, port int) string {
		if host == "" {
			host = "127.0.0.1"
		}
		ps := userPort
		if port != 0 {
			ps = strconv.Itoa(port)
		}
		return net.JoinHostPort(host, ps)
	}
	switch {
	case len(p.Exec) > 0 && string(p.Exec) != "null":
		return nil, fmt.Errorf("exec probes cannot run in queue's container: want tcpSocket, httpGet or grpc")
	case p.HTTPGet != nil:
		h := p.HTTPGet
		scheme := strings.ToLower(h.Scheme)
		if scheme == "" {
			scheme = "http"
		}
		if scheme != "http" && scheme != "https" {
			return nil, fmt.Errorf("httpGet scheme %q: want HTTP or HTTPS", h.Scheme)
		}
		path := h.Path
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		hp := &probe.HTTP{URL: scheme + "://" + addr(h.Host, int(h.Port)) + path, Timeout: timeout, Header: http.Header{},
			DetectHTTP2: c.DetectHTTP2 && scheme == "http"}
		for _, kv := range h.HTTPHeaders {
			if strings.EqualFold(kv.Name, "Host") {
				hp.Host = kv.Value
				continue
			}
			hp.Header.Add(kv.Name, kv.Value)
		}
		if scheme == "https" {
			// As the kubelet does: an HTTPS probe does not verify the
			// certificate.
			hp.Client = &http.Client{
				Transport:     &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			}
		}
		return hp, nil
	case p.GRPC != nil:
		g := &probe.GRPC{Addr: addr("", p.GRPC.Port), Timeout: timeout}
		if p.GRPC.Service != nil {
			g.Service = *p.GRPC.Service
		}
		return g, nil
	case p.TCPSocket != nil:
		return probe.TCP{Addr: addr(p.TCPSocket.Host, int(p.TCPSocket.Port)), Timeout: timeout}, nil
	}
	return probe.TCP{Addr: addr("", 0), Timeout: timeout}, nil
}

// knativeEnv lists the 27 variables Knative Serving's reconciler gives its
// queue-proxy container (makeQueueContainer in
// pkg/reconciler/revision/resources/queue.go, v0.50), in its order, each
// with what queue does with it. docs/contract.md section 9 says the
// same (TestKnativeVarsDocumented), the startup line "knative environment"
// lists the ones set, and knativetest/ checks the list against Knative's
// own reconciler.
var knativeEnv = [...]struct{ name, use string }{
	{"SERVING_NAMESPACE", "revision label namespace (queue_* metrics, json and text logs; knative.dev/key in zap logs); k8s_namespace_name on kn_* metrics and target_info"},
	{"SERVING_SERVICE", "revision label service; kn_service_name; the default service.name of traces, pushed metrics and target_info"},
	{"SERVING_CONFIGURATION", "revision label configuration; kn_configuration_name"},
	{"SERVING_REVISION", "revision label revision; knative.dev/key; kn_revision_name; .Revision.Name in the request log template; set, it selects Knative mode's defaults"},
	{"QUEUE_SERVING_PORT", "--listen :PORT; 8013 also means --upstream-protocol h2c"},
	{"QUEUE_SERVING_TLS_PORT", "--tls-listen :PORT"},
	{"CONTAINER_CONCURRENCY", "--concurrency (queue depth 10 times it, as Knative's breaker)"},
	{"REVISION_TIMEOUT_SECONDS", "--timeout, and so the default --drain-timeout; 0 means none"},
	{"REVISION_RESPONSE_START_TIMEOUT_SECONDS", "--response-start-timeout"},
	{"REVISION_IDLE_TIMEOUT_SECONDS", "--idle-timeout"},
	{"SERVING_POD", "revision label pod; knative.dev/pod; k8s_pod_name; pod_name of the autoscaler's Stat"},
	{"SERVING_POD_IP", "pod_ip on json and text log lines; .Revision.PodIP in the request log template"},
	{"SERVING_LOGGING_CONFIG", "zap's JSON configuration, over Knative's defaults: in Knative mode (--log-format zap) queue's log is written as zap would (encoding, encoder keys and encoders, level, outputs, sampling, initialFields), its lines with commit, knative.dev/key and knative.dev/pod; one zap would refuse gives Knative's defaults and a warning. With --log-format json or text, its level and encoding only"},
	{"SERVING_LOGGING_LEVEL", "the log level, over SERVING_LOGGING_CONFIG's, as in Knative (--log-level wins); zap's dpanic, panic and fatal leave nothing logged in the zap format and mean error in the others"},
	{"USER_PORT", "--upstream 127.0.0.1:PORT"},
	{"SYSTEM_NAMESPACE", "ignored: the namespace of Knative's control plane, where its ConfigMaps live; queue reads none"},
	{"SERVING_READINESS_PROBE", "the readiness probe (tcpSocket, httpGet, grpc); exec is refused"},
	{"HOST_IP", "ignored: the node's address; Knative's queue-proxy reads it nowhere either (it is there for extensions and node agents)"},
	{"ENABLE_HTTP2_AUTO_DETECTION", "true: an http readiness probe tries h2c, then HTTP/1.1, and keeps to the one that answered ready; false: HTTP/1.1 only"},
	{"ENABLE_HTTP_FULL_DUPLEX", "checked to be true or false, else ignored: queue's HTTP/1.1 path is always full duplex (request body and response stream at once)"},
	{"ROOT_CA", "ignored: the CA Knative's queue-proxy extensions (QPOptions) trust; queue has no extensions, and its OTLP exporter takes OTEL_EXPORTER_OTLP_CERTIFICATE"},
	{"QUEUE_PROXY_TLS_MIN_VERSION", "TLS floor, 1.2 or 1.3; unset: 1.3 in Knative mode, as Knative's queue-proxy (1.2 under a QUEUE_PROXY_TLS_MAX_VERSION of 1.2), 1.2 standalone"},
	{"QUEUE_PROXY_TLS_MAX_VERSION", "TLS ceiling, 1.2 or 1.3"},
	{"QUEUE_PROXY_TLS_CIPHER_SUITES", "TLS 1.2 cipher suites allowed, Go's names, comma-separated"},
	{"QUEUE_PROXY_TLS_CURVE_PREFERENCES", "key exchanges allowed, in order: X25519MLKEM768, X25519, CurveP256 (P-256), CurveP384 (P-384), CurveP521 (P-521)"},
	{"ENABLE_MULTI_CONTAINER_PROBES", "SERVING_READINESS_PROBE may be an array of probes, all of which must pass"},
	{"OBSERVABILITY_CONFIG", "the request log switch and template, probe request log, tracing (http/protobuf or grpc endpoint, stdout, sampling rate), request metrics (prometheus port, OTLP push over http/protobuf or grpc and its interval, none), runtime profiling (--pprof-listen :8008); see below for what is not supported"},
}

// Knative holds what the Knative environment sets beyond queue's flags.
type Knative struct {
	// TLSMaxVersion, TLSCipherSuites and TLSCurves narrow the TLS server
	// (QUEUE_PROXY_TLS_*).
	TLSMaxVersion   uint16
	TLSCipherSuites []uint16
	TLSCurves       []tls.CurveID
	// RequestLog, when set, shapes each access log line: Knative's
	// request-log template from OBSERVABILITY_CONFIG.
	RequestLog *template.Template
	// MetricsPush, when its Protocol is set, pushes the request metrics
	// over OTLP (OBSERVABILITY_CONFIG's requestMetrics).
	MetricsPush MetricsPush
	// ProbeRequestLog puts the probes that queue answers itself in the
	// access log too, when it is on (OBSERVABILITY_CONFIG's
	// enableProbeRequestLog).
	ProbeRequestLog bool
	// Notes are settings queue accepts but cannot honour, logged at
	// startup as warnings.
	Notes []string
}

// MetricsPush is a push of the request metrics over OTLP. The exporter's
// endpoint and the rest of its settings come from the OTLP variables
// (otlp.FromEnv), which Config.Getenv serves with Knative's endpoint and
// protocol under them.
type MetricsPush struct {
	// Protocol is otlp.GRPC or otlp.HTTPProtobuf; "" means no push.
	Protocol otlp.Protocol
	// Interval is the time between two pushes.
	Interval time.Duration
}

// tlsOptions is the TLS server policy that flags and Knative set.
func (c Config) tlsOptions() ingress.TLSOptions {
	return ingress.TLSOptions{MinVersion: c.TLSMinVersion, MaxVersion: c.Knative.TLSMaxVersion,
		CipherSuites: c.Knative.TLSCipherSuites, CurvePreferences: c.Knative.TLSCurves}
}

// logKnative writes the line that says which Knative variables were set
// and what queue did with them, then a warning per setting queue cannot
// honour. Without any Knative variable it writes nothing.
func logKnative(log *slog.Logger, c Config) {
	getenv := c.Getenv
	if getenv == nil {
		return
	}
	var attrs []slog.Attr
	for _, v := range knativeEnv {
		if getenv(v.name) != "" {
			attrs = append(attrs, slog.String(v.name, v.use))
		}
	}
	if len(attrs) == 0 {
		return
	}
	log.LogAttrs(context.Background(), slog.LevelInfo, "knative environment", attrs...)
	for _, n := range c.Knative.Notes {
		log.LogAttrs(context.Background(), slog.LevelWarn, n)
	}
}

// logLevelOf maps a zap level onto --log-level: zap's levels above error
// mean error.
func logLevelOf(l zapLevel) string {
	switch l {
	case zapDebug:
		return "debug"
	case zapInfo:
		return "info"
	case zapWarn:
		return "warn"
	}
	return "error"
}

// applyKnativeRest reads the variables that applyKnative's first part does
// not: logging configuration, TLS policy and OBSERVABILITY_CONFIG.
func applyKnativeRest(c *Config, given map[string]bool, getenv func(string) string) error {
	if c.LogFormat == "zap" {
		applyZapLog(c, given, getenv)
	} else if v := getenv("SERVING_LOGGING_CONFIG"); v != "" {
		// Queue's own formats take the configuration's level and its
		// encoding; SERVING_LOGGING_LEVEL, when set, wins over the level,
		// as in Knative.
		var zc struct {
			Level    *zapLevel `json:"level"`
			Encoding string    `json:"encoding"`
		}
		if err := json.Unmarshal([]byte(v), &zc); err != nil {
			return configErrorf("invalid SERVING_LOGGING_CONFIG: %v: want zap's JSON configuration", err)
		}
		if zc.Level != nil && !given["log-level"] && getenv("SERVING_LOGGING_LEVEL") == "" {
			c.LogLevel = logLevelOf(*zc.Level)
		}
		if !given["log-format"] {
			switch zc.Encoding {
			case "json":
				c.LogFormat = "json"
			case "console":
				c.LogFormat = "text"
			}
		}
	}
	if v := getenv("ENABLE_HTTP_FULL_DUPLEX"); v != "" {
		if _, err := strconv.ParseBool(v); err != nil {
			return configErrorf("invalid value %q for ENABLE_HTTP_FULL_DUPLEX: want true or false", v)
		}
	}
	if err := applyKnativeTLS(c, getenv); err != nil {
		return err
	}
	if v := getenv("OBSERVABILITY_CONFIG"); v != "" {
		if err := applyObservability(c, given, getenv, v); err != nil {
			return err
		}
	}
	return nil
}

// applyZapLog reads the configuration of --log-format zap as Knative's
// queue-proxy reads its own (knative.dev/pkg/logging.NewLogger):
// SERVING_LOGGING_CONFIG over Knative's defaults, its level overridden by
// SERVING_LOGGING_LEVEL (and here by --log-level), and a configuration zap
// would refuse replaced by Knative's defaults rather than refused: the
// reconciler passes config-logging on unchecked, and refusing it would
// crash-loop every revision. The lines carry, as Knative's, the commit,
// knative.dev/key (namespace/revision) and knative.dev/pod.
func applyZapLog(c *Config, given map[string]bool, getenv func(string) string) {
	zc, err := parseZapConfig(getenv("SERVING_LOGGING_CONFIG"))
	zl := zapLog{Config: zc, Err: err}
	var l zapLevel
	switch v := getenv("SERVING_LOGGING_LEVEL"); {
	case given["log-level"]:
		l.UnmarshalText([]byte(c.LogLevel))
		zl.Override = &l
	case v != "" && l.UnmarshalText([]byte(v)) == nil:
		zl.Override = &l
	}
	if commit := knativeCommit(); commit != "" {
		zl.Fields = append(zl.Fields, slog.String("commit", commit))
	}
	zl.Fields = append(zl.Fields,
		slog.String("knative.dev/key", getenv("SERVING_NAMESPACE")+"/"+getenv("SERVING_REVISION")),
		slog.String("knative.dev/pod", getenv("SERVING_POD")))
	c.ZapLog = zl
}

// tlsCurves are the names QUEUE_PROXY_TLS_CURVE_PREFERENCES takes: Go's
// constant names and the NIST names, as Knative accepts.
var tlsCurves = map[string]tls.CurveID{
	"X25519MLKEM768": tls.X25519MLKEM768, "X25519": tls.X25519,
	"CurveP256": tls.CurveP256, "CurveP384": tls.CurveP384, "CurveP521": tls.CurveP521,
	"P-256": tls.CurveP256, "P-384": tls.CurveP384, "P-521": tls.CurveP521,
}

func applyKnativeTLS(c *Config, getenv func(string) string) error {
	switch v := getenv("QUEUE_PROXY_TLS_MAX_VERSION"); v {
	case "":
	case "1.2":
		c.Knative.TLSMaxVersion = tls.VersionTLS12
	case "1.3":
		c.Knative.TLSMaxVersion = tls.VersionTLS13
	default:
		return configErrorf("invalid value %q for QUEUE_PROXY_TLS_MAX_VERSION: want 1.2 or 1.3", v)
	}
	if getenv("QUEUE_PROXY_TLS_MIN_VERSION") == "" && c.KnativeMode {
		c.TLSMinVersion = knativeTLSMinVersion
		if max := c.Knative.TLSMaxVersion; max != 0 && max < c.TLSMinVersion {
			// Knative's queue-proxy would then accept no handshake at all:
			// a ceiling of 1.2 alone asks for 1.2.
			c.TLSMinVersion = max
		}
	}
	if c.Knative.TLSMaxVersion != 0 && c.Knative.TLSMaxVersion < c.TLSMinVersion {
		return configErrorf("QUEUE_PROXY_TLS_MAX_VERSION %q is below QUEUE_PROXY_TLS_MIN_VERSION %q: want max at least min",
			getenv("QUEUE_PROXY_TLS_MAX_VERSION"), getenv("QUEUE_PROXY_TLS_MIN_VERSION"))
	}
	if v := getenv("QUEUE_PROXY_TLS_CIPHER_SUITES"); v != "" {
		byName := map[string]uint16{}
		for _, cs := range tls.CipherSuites() { // the secure ones only
			byName[cs.Name] = cs.ID
		}
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name == "" {
				continue
			}
			id, ok := byName[name]
			if !ok {
				return configErrorf("invalid QUEUE_PROXY_TLS_CIPHER_SUITES: unknown or insecure cipher suite %q: want Go's names, such as TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", name)
			}
			c.Knative.TLSCipherSuites = append(c.Knative.TLSCipherSuites, id)
		}
	}
	if v := getenv("QUEUE_PROXY_TLS_CURVE_PREFERENCES"); v != "" {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name == "" {
				continue
			}
			id, ok := tlsCurves[name]
			if !ok {
				return configErrorf("invalid QUEUE_PROXY_TLS_CURVE_PREFERENCES: unknown curve %q: want X25519MLKEM768, X25519, CurveP256, CurveP384 or CurveP521", name)
			}
			c.Knative.TLSCurves = append(c.Knative.TLSCurves, id)
		}
	}
	return nil
}

// knativeObservability is the part of Knative's config-observability that
// the reconciler serialises into OBSERVABILITY_CONFIG and queue reads
// (knative.dev/serving/pkg/observability.Config).
type knativeObservability struct {
	Tracing struct {
		Protocol     string  `json:"protocol"`
		Endpoint     string  `json:"endpoint"`
		SamplingRate float64 `json:"samplingRate"`
	} `json:"tracing"`
	Runtime struct {
		Profiling string `json:"profiling"`
	} `json:"runtime"`
	RequestMetrics struct {
		Protocol       string       `json:"protocol"`
		Endpoint       string       `json:"endpoint"`
		ExportInterval jsonDuration `json:"exportInterval"`
	} `json:"requestMetrics"`
	EnableRequestLog      bool   `json:"enableRequestLog"`
	RequestLogTemplate    string `json:"requestLogTemplate"`
	EnableProbeRequestLog bool   `json:"enableProbeRequestLog"`
}

// knativeDefaultRequestLogTemplate is the request-log format Knative uses
// when its ConfigMap turns the request log on without a template of its own.
const knativeDefaultRequestLogTemplate = `{"httpRequest": {"requestMethod": "{{.Request.Method}}", "requestUrl": "{{js .Request.RequestURI}}", "requestSize": "{{.Request.ContentLength}}", "status": {{.Response.Code}}, "responseSize": "{{.Response.Size}}", "userAgent": "{{js .Request.UserAgent}}", "remoteIp": "{{js .Request.RemoteAddr}}", "serverIp": "{{.Revision.PodIP}}", "referer": "{{js .Request.Referer}}", "latency": "{{.Response.Latency}}s", "protocol": "{{.Request.Proto}}"}, "traceId": "{{.TraceID}}"}`

// applyObservability reads OBSERVABILITY_CONFIG, the JSON of Knative's
// config-observability ConfigMap.
func applyObservability(c *Config, given map[string]bool, getenv func(string) string, v string) error {
	var o knativeObservability
	if err := json.Unmarshal([]byte(v), &o); err != nil {
		return configErrorf("invalid OBSERVABILITY_CONFIG: %v: want the JSON of Knative's config-observability", err)
	}
	// The request log: Knative's switch, and its template (Knative's
	// default one when the switch is on without a template).
	if o.EnableRequestLog && !given["access-log"] {
		c.AccessLog = true
	}
	if tmpl := o.RequestLogTemplate; tmpl != "" || o.EnableRequestLog {
		if tmpl == "" {
			tmpl = knativeDefaultRequestLogTemplate
		}
		t, err := parseRequestLogTemplate(tmpl)
		if err != nil {
			return configErrorf("invalid requestLogTemplate in OBSERVABILITY_CONFIG: %v: want a Go text/template", err)
		}
		c.Knative.RequestLog = t
	}
	// Probes in the request log, as Knative's queue-proxy puts them there
	// when asked (and only when the request log is on).
	c.Knative.ProbeRequestLog = o.EnableProbeRequestLog

	// Tracing, mapped onto the OpenTelemetry variables that the tracing
	// package reads. As in Knative, OTEL_* variables set in the container
	// win.
	overlay := map[string]string{}
	switch p := o.Tracing.Protocol; p {
	case "", "none":
	case "http/protobuf", "grpc":
		u, err := knativeOTLPURL(o.Tracing.Endpoint, otlp.Traces, otlp.Protocol(p))
		if err != nil {
			return configErrorf("invalid tracing endpoint %q in OBSERVABILITY_CONFIG: %v", o.Tracing.Endpoint, err)
		}
		overlay["OTEL_TRACES_EXPORTER"] = "otlp"
		// Knative's protocol picks the exporter whatever the general
		// OTEL_EXPORTER_OTLP_PROTOCOL says; the traces variable is more
		// specific, and a container that sets it has asked for it.
		overlay[otlp.Traces.EnvName("PROTOCOL", true)] = p
		if getenv(otlp.Traces.EnvName("ENDPOINT", false)) == "" {
			overlay[otlp.Traces.EnvName("ENDPOINT", true)] = u
		}
		if r := o.Tracing.SamplingRate; r < 0 || r > 1 {
			return configErrorf("invalid tracing samplingRate %v in OBSERVABILITY_CONFIG: want a number from 0 to 1", r)
		}
		if !given["trace-sample-rate"] {
			c.TraceSampleRate = o.Tracing.SamplingRate
		}
	case "stdout":
		// OpenTelemetry's console exporter; Knative samples every new
		// trace for it whatever samplingRate says.
		overlay["OTEL_TRACES_EXPORTER"] = "console"
		if !given["trace-sample-rate"] {
			c.TraceSampleRate = 1
		}
	default:
		return configErrorf("invalid tracing protocol %q in OBSERVABILITY_CONFIG: want http/protobuf, grpc, stdout or none", p)
	}
	// Request metrics, as Knative's queue-proxy has them: none at all, a
	// Prometheus port, or a push over OTLP (which leaves queue's Prometheus
	// port as it is). A flag or QUEUE_* variable for the port wins.
	switch p := o.RequestMetrics.Protocol; p {
	case "":
	case "none":
		if !given["metrics-listen"] {
			c.MetricsListen = ""
		}
	case "prometheus":
		if ep := o.RequestMetrics.Endpoint; ep != "" && !given["metrics-listen"] {
			if _, port, err := net.SplitHostPort(ep); err != nil || port == "" {
				return configErrorf("invalid requestMetrics endpoint %q in OBSERVABILITY_CONFIG: want host:port, such as :9091", ep)
			}
			c.MetricsListen = ep
		}
	case "grpc", "http/protobuf":
		// As Knative's exporters, the OTLP variables' endpoint wins over
		// the ConfigMap's; Knative's protocol picks the exporter.
		ep := o.RequestMetrics.Endpoint
		if getenv(otlp.Metrics.EnvName("ENDPOINT", false)) == "" && getenv(otlp.Metrics.EnvName("ENDPOINT", true)) == "" {
			u, err := knativeOTLPURL(ep, otlp.Metrics, otlp.Protocol(p))
			if err != nil {
				return configErrorf("invalid requestMetrics endpoint %q in OBSERVABILITY_CONFIG: %v", ep, err)
			}
			overlay[otlp.Metrics.EnvName("ENDPOINT", true)] = u
		}
		overlay[otlp.Metrics.EnvName("PROTOCOL", true)] = p
		interval, err := metricsInterval(getenv, time.Duration(o.RequestMetrics.ExportInterval))
		if err != nil {
			return err
		}
		c.Knative.MetricsPush = MetricsPush{Protocol: otlp.Protocol(p), Interval: interval}
	default:
		return configErrorf("invalid requestMetrics protocol %q in OBSERVABILITY_CONFIG: want prometheus, grpc, http/protobuf or none", p)
	}

	if base := c.Getenv; base != nil {
		c.Getenv = func(k string) string {
			if v := base(k); v != "" {
				return v
			}
			return overlay[k]
		}
	}

	// Runtime profiling: Knative's queue-proxy serves it on a port of its
	// own, which the reconciler declares on the container (profiling-port)
	// when the switch is on; the admin port keeps it only with --pprof.
	if o.Runtime.Profiling == "enabled" && !given["pprof-listen"] {
		c.PProfListen = knativeProfilingListen
	}
	return nil
}

// knativeOTLPURL reads an OTLP endpoint of config-observability as
// Knative's exporters do (knative.dev/pkg/observability's endpointFor): an
// endpoint without a scheme (collector:4317) is https; for http/protobuf an
// endpoint without a path gets the signal's (/v1/traces, /v1/metrics),
// for grpc the path is not used.
func knativeOTLPURL(ep string, s otlp.Signal, p otlp.Protocol) (string, error) {
	if ep == "" {
		return "", fmt.Errorf("%s needs an endpoint", p)
	}
	u, err := url.Parse(ep)
	if err == nil && u.Opaque != "" || err == nil && u.Scheme == "" {
		u, err = url.Parse("https://" + ep)
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("want an http:// or https:// URL, or host:port")
	}
	if p == otlp.HTTPProtobuf && (u.Path == "" || u.Path == "/") {
		u.Path = s.HTTPPath()
	}
	return u.String(), nil
}

// defaultMetricsInterval is OpenTelemetry's periodic reader's interval,
// which Knative keeps when config-observability gives none
// (request-metrics-export-interval).
const defaultMetricsInterval = 60 * time.Second

// metricsInterval is the push interval: OTEL_METRIC_EXPORT_INTERVAL
// (milliseconds) when set, as in Knative, else the ConfigMap's when
// positive, else defaultMetricsInterval.
func metricsInterval(getenv func(string) string, fromConfig time.Duration) (time.Duration, error) {
	if v := strings.TrimSpace(getenv("OTEL_METRIC_EXPORT_INTERVAL")); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > int64(24*time.Hour/time.Millisecond) {
			return 0, configErrorf("invalid value %q for OTEL_METRIC_EXPORT_INTERVAL: want a positive number of milliseconds", v)
		}
		return time.Duration(ms) * time.Millisecond, nil
	}
	if fromConfig > 0 {
		return fromConfig, nil
	}
	return defaultMetricsInterval, nil
}

// jsonDuration is a time.Duration in OBSERVABILITY_CONFIG: the reconciler
// writes Go's time.Duration as encoding/json does, a number of
// nanoseconds; a Go duration string is read too.
type jsonDuration time.Duration

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case float64:
		*d = jsonDuration(x)
	case string:
		p, err := time.ParseDuration(x)
		if err != nil {
			return fmt.Errorf("duration %q: want nanoseconds or a Go duration such as 60s", x)
		}
		*d = jsonDuration(p)
	case nil:
	default:
		return fmt.Errorf("duration %s: want nanoseconds or a Go duration such as 60s", b)
	}
	return nil
}
