package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/queue-dev/queue/probe"
	"github.com/queue-dev/queue/proxy"
)

// DefaultKnativeCertDir is where Knative Serving mounts the serving
// certificate pair when system-internal TLS is on.
const DefaultKnativeCertDir = "/var/lib/knative/certs"

// knativeH2CPort is the serving port Knative gives revisions whose
// container port is named h2c.
const knativeH2CPort = "8013"

// applyKnative fills what no flag and no QUEUE_* variable set from the
// environment Knative Serving's reconciler gives its queue-proxy container
// (CONTRACT section 1, "Knative environment"). given reports the flags that
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
		switch strings.ToLower(v) {
		case "debug", "info", "warn", "error":
			c.LogLevel = strings.ToLower(v)
		case "dpanic", "panic", "fatal": // zap's levels above error
			c.LogLevel = "error"
		default:
			return configErrorf("invalid value %q for SERVING_LOGGING_LEVEL: want debug, info, warn or error", v)
		}
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
		hp := &probe.HTTP{URL: scheme + "://" + addr(h.Host, int(h.Port)) + path, Timeout: timeout, Header: http.Header{}}
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
