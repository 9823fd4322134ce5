package main

import (
	"encoding/json"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// noEnv is an empty environment.
func noEnv(string) string { return "" }

// FuzzParseConfig feeds fuzzed values to a few flags. parseConfig must
// never panic; when it accepts them the values are valid, and parsing the
// Config's own forms of them again gives the same Config (a round trip).
func FuzzParseConfig(f *testing.F) {
	f.Add(":8080", "30s", "10.0.0.0/8,::1", "tcp", "0")
	f.Add("[::1]:9000", "1h2m3.5s", "none", "http:/healthz?x=1", "4")
	f.Add("localhost:81", "0", "192.168.1.7, ::ffff:10.0.0.0/104,fe80::1%eth0", "grpc", "9223372036854775807")
	f.Fuzz(func(t *testing.T, upstream, timeout, trusted, probeSpec, concurrency string) {
		args := []string{
			"--upstream", upstream,
			"--timeout", timeout,
			"--trusted-proxies", trusted,
			"--probe", probeSpec,
			"--concurrency", concurrency,
		}
		c, err := parseConfig(args, noEnv)
		if err != nil {
			return
		}
		_, port, err := net.SplitHostPort(c.Upstream)
		if err != nil {
			t.Fatalf("Upstream %q from %q: %v", c.Upstream, upstream, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			t.Errorf("Upstream %q from %q: port %q is not 1 to 65535", c.Upstream, upstream, port)
		}
		if c.Timeout < 0 || c.DrainTimeout < 0 || c.Concurrency < 0 {
			t.Errorf("negative value: timeout %v, drain timeout %v, concurrency %d", c.Timeout, c.DrainTimeout, c.Concurrency)
		}
		if c.DrainTimeout != c.Timeout {
			t.Errorf("DrainTimeout %v, want --timeout %v", c.DrainTimeout, c.Timeout)
		}
		// Beyond MaxInt32 newApp refuses the concurrency (limit.New), so
		// the derived depth is checked only below it.
		if c.Concurrency <= math.MaxInt32 && c.QueueDepth != 10*c.Concurrency {
			t.Errorf("QueueDepth %d, want 10*concurrency %d", c.QueueDepth, c.Concurrency)
		}
		switch {
		case c.Probe == "tcp", c.Probe == "none", c.Probe == "grpc", strings.HasPrefix(c.Probe, "http:/"):
		default:
			t.Errorf("Probe %q accepted", c.Probe)
		}

		again := []string{
			"--upstream", c.Upstream,
			"--timeout", c.Timeout.String(),
			"--trusted-proxies", c.TrustedProxies.String(),
			"--probe", c.Probe,
			"--concurrency", strconv.Itoa(c.Concurrency),
		}
		c2, err := parseConfig(again, noEnv)
		if err != nil {
			t.Fatalf("parseConfig(%q) accepted, its own forms %q refused: %v", args, again, err)
		}
		if c2.Upstream != c.Upstream || c2.Timeout != c.Timeout || c2.DrainTimeout != c.DrainTimeout ||
			c2.Probe != c.Probe || c2.Concurrency != c.Concurrency || c2.QueueDepth != c.QueueDepth ||
			c2.TrustedProxies.String() != c.TrustedProxies.String() {
			t.Errorf("round trip of %q through %q changed the config:\n%+v\n%+v", args, again, c, c2)
		}
	})
}

// FuzzKnativeProbe feeds SERVING_READINESS_PROBE to parseConfig with
// USER_PORT=8080, as Knative's reconciler would: it must never panic, and a
// probe it accepts becomes a Prober.
func FuzzKnativeProbe(f *testing.F) {
	f.Add(`{"tcpSocket":{"port":8080,"host":"127.0.0.1"},"successThreshold":1}`, false)
	f.Add(`{"httpGet":{"path":"/healthz","port":"8080","scheme":"HTTP","httpHeaders":[{"name":"Host","value":"x"},{"name":"K","value":"v"}]},"periodSeconds":2,"timeoutSeconds":3}`, false)
	f.Add(`[{"grpc":{"port":9000,"service":"s"}},{"tcpSocket":{"port":0}},{"exec":{"command":["true"]}}]`, true)
	f.Fuzz(func(t *testing.T, js string, multi bool) {
		env := map[string]string{
			"USER_PORT":                     "8080",
			"SERVING_READINESS_PROBE":       js,
			"ENABLE_MULTI_CONTAINER_PROBES": strconv.FormatBool(multi),
		}
		c, err := parseConfig(nil, func(k string) string { return env[k] })
		if err != nil {
			return
		}
		if c.Upstream != "127.0.0.1:8080" {
			t.Errorf("Upstream = %q, want 127.0.0.1:8080", c.Upstream)
		}
		if js == "" {
			return // not set: the --probe default
		}
		if c.Prober == nil {
			t.Errorf("SERVING_READINESS_PROBE %q accepted without a Prober", js)
		}
		if c.Probe != "knative" {
			t.Errorf("Probe = %q, want knative", c.Probe)
		}
	})
}

// replaceInvalid is the reference for appendJSONString's repair: each byte
// that does not start a valid UTF-8 sequence becomes U+FFFD, as
// encoding/json and range-over-string do. (strings.ToValidUTF8 would fold a
// run of bad bytes into one U+FFFD: a different, also valid, choice.)
func replaceInvalid(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r) // an invalid byte ranges as utf8.RuneError, one byte at a time
	}
	return b.String()
}

// FuzzAppendJSONString: the output appends to what was there, is valid
// JSON, and decodes to the input (repaired when it is not valid UTF-8),
// and to what encoding/json's own encoding decodes to.
func FuzzAppendJSONString(f *testing.F) {
	f.Add("GET")
	f.Add("/path with \"quotes\" and \\ and \x00\x1f\x7f and \u2028")
	f.Add("bad \xff\xfe utf-8 \xed\xa0\x80 and a real \uFFFD and é")
	f.Fuzz(func(t *testing.T, s string) {
		out := appendJSONString([]byte("x"), s)
		if out[0] != 'x' {
			t.Fatalf("prefix overwritten: %q", out)
		}
		enc := out[1:]
		if !json.Valid(enc) {
			t.Fatalf("appendJSONString(%q) = %s: not valid JSON", s, enc)
		}
		var got string
		if err := json.Unmarshal(enc, &got); err != nil {
			t.Fatalf("appendJSONString(%q) = %s: %v", s, enc, err)
		}
		want := s
		if !utf8.ValidString(s) {
			want = replaceInvalid(s)
		}
		if got != want {
			t.Errorf("appendJSONString(%q) decodes to %q, want %q", s, got, want)
		}
		std, _ := json.Marshal(s)
		var stdGot string
		if err := json.Unmarshal(std, &stdGot); err != nil {
			t.Fatal(err)
		}
		if got != stdGot {
			t.Errorf("appendJSONString(%q) decodes to %q, encoding/json's to %q", s, got, stdGot)
		}
	})
}

// isLowerHex reports whether s is all of 0-9a-f.
func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// FuzzTraceID: traceID never panics; what it returns is the 32 lowercase
// hex digits of the traceparent's trace-id field; a well-formed version-00
// traceparent with a valid (not all-zero) trace id always gives it.
func FuzzTraceID(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	f.Add("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "x")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e473", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Fuzz(func(t *testing.T, first, second string) {
		r := &http.Request{Header: http.Header{"Traceparent": {first, second}}}
		id := traceID(r)
		if id == "" {
			wellFormed := len(first) == 55 && first[:3] == "00-" && first[35] == '-' && first[52] == '-' &&
				isLowerHex(first[3:35]) && isLowerHex(first[36:52]) && isLowerHex(first[53:]) &&
				first[3:35] != strings.Repeat("0", 32) // the all-zero trace id is invalid (W3C)
			if wellFormed {
				t.Errorf("traceID of well-formed %q is empty", first)
			}
			return
		}
		if len(id) != 32 || !isLowerHex(id) {
			t.Errorf("traceID(%q) = %q: want 32 lowercase hex digits", first, id)
		}
		if len(first) < 35 || first[3:35] != id {
			t.Errorf("traceID(%q) = %q: not the trace-id field of the first value", first, id)
		}
	})
}
