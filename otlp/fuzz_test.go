package otlp

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// encodeKeyValues is ParseKeyValues's inverse: every value byte that is not
// a letter or digit is percent-encoded.
func encodeKeyValues(kv map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(kv)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		for _, c := range []byte(kv[k]) {
			if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
	}
	return b.String()
}

// FuzzKeyValues checks the round trip of the OTEL_EXPORTER_OTLP_HEADERS and
// OTEL_RESOURCE_ATTRIBUTES format: what parses, re-encoded, parses to the
// same map. Seeds are in testdata/fuzz/FuzzKeyValues.
func FuzzKeyValues(f *testing.F) {
	f.Add("api-key=abc,tenant=a%2Cb")
	f.Fuzz(func(t *testing.T, s string) {
		kv, err := ParseKeyValues(s)
		if err != nil {
			return
		}
		for k := range kv {
			if k == "" || strings.ContainsAny(k, ",=") || strings.TrimSpace(k) != k {
				t.Fatalf("ParseKeyValues(%q) has key %q", s, k)
			}
		}
		enc := encodeKeyValues(kv)
		again, err := ParseKeyValues(enc)
		if err != nil {
			t.Fatalf("ParseKeyValues(%q) (re-encoded from %q) = %v", enc, s, err)
		}
		if !maps.Equal(kv, again) {
			t.Fatalf("round trip of %q: %q -> %v, want %v", s, enc, again, kv)
		}
	})
}
