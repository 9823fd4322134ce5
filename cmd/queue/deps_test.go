package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestDependencyDirection enforces the layers of docs/architecture.md:
// which of our packages may import which. Every package must appear below.
func TestDependencyDirection(t *testing.T) {
	t.Parallel()
	const mod = "github.com/queue-dev/queue/"
	// allowed lists, per package, the module's own packages it may use and
	// whether anything outside the standard library is allowed.
	allowed := map[string]struct {
		own      []string
		external []string // import path prefixes
	}{
		"cmd/queue": {own: []string{"chain", "ingress", "h1", "h2", "proxy", "headers", "probe", "stats", "limit", "drain", "tracing", "otlp", "internal/gostack", "internal/panics"}, external: []string{""}},
		// chain composes the request path from the layers and the proxy;
		// cmd/queue, the tests and bench/ use it. Through tracing it may
		// depend on OpenTelemetry, and through proxy on x/net and x/text.
		"chain": {own: []string{"proxy", "h1", "headers", "stats", "limit", "drain", "tracing", "otlp", "internal/gostack", "internal/panics"}, external: []string{""}},
		// tracing adapts OpenTelemetry; only cmd/queue and chain import it,
		// and only when tracing is configured is its handler on the request
		// path. It exports through otlp.
		"tracing": {own: []string{"otlp"}, external: []string{""}},
		// otlp is the OTLP transport (http/protobuf and gRPC on net/http)
		// and wire encoding that traces and metrics share: no gRPC library,
		// no generated OTLP types, protowire alone.
		"otlp": {external: []string{"golang.org/x/net/", "golang.org/x/text/", "google.golang.org/protobuf/encoding/protowire", "google.golang.org/protobuf/internal/"}},
		// cmd/image builds the container image; go-containerregistry is
		// linked there alone (TestImage checks queue's build info).
		"cmd/image": {external: []string{"github.com/google/go-containerregistry/", "github.com/klauspost/compress", "github.com/opencontainers/", "golang.org/x/sync/errgroup"}},
		// ingress serves the chain to clients: the HTTP/1.1 engine, with
		// HTTP/2 handed to the HTTP/2 engine.
		"ingress": {own: []string{"h1", "h2", "proxy", "headers", "internal/gostack", "internal/panics"}, external: []string{"golang.org/x/net/", "golang.org/x/text/", "github.com/valyala/bytebufferpool"}},
		// h1 is the HTTP/1.1 wire code and serving engine: standard
		// library only, and the leaf that grows goroutine stacks.
		"h1": {own: []string{"internal/gostack", "internal/panics"}},
		// h2 is the HTTP/2 serving engine, on x/net's Framer and HPACK; it
		// shares the target, Date and peer handling of h1.
		"h2":               {own: []string{"h1", "internal/gostack", "internal/panics"}, external: []string{"golang.org/x/net/", "golang.org/x/text/"}},
		"internal/gostack": {},
		// panics logs a handler's panic with its stack, for both engines.
		"internal/panics": {},
		// testnet is the tests' network helpers; only tests import it.
		"internal/testnet": {},
		"proxy":            {own: []string{"headers", "h1", "internal/gostack", "internal/panics"}, external: []string{"golang.org/x/net/", "golang.org/x/text/", "github.com/valyala/bytebufferpool"}},
		"headers":          {external: []string{"golang.org/x/net/http/httpguts", "golang.org/x/net/idna", "golang.org/x/text/"}},
		"probe":            {external: []string{"golang.org/x/net/http/httpguts"}},
		"stats":            {external: []string{"golang.org/x/net/http/httpguts"}},
		"limit":            {external: []string{"golang.org/x/net/http/httpguts"}},
		"drain":            {external: []string{"golang.org/x/net/http/httpguts"}},
	}
	out, err := exec.Command("go", "list", "-json=ImportPath,Deps,Standard", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(p.ImportPath, mod)
		if strings.HasPrefix(name, "bench") {
			continue // _test.go files only
		}
		rule, ok := allowed[name]
		if !ok {
			t.Errorf("package %s has no dependency rule: add it to docs/architecture.md and this test", name)
			continue
		}
	deps:
		for _, d := range p.Deps {
			if own, ok := strings.CutPrefix(d, mod); ok {
				for _, a := range rule.own {
					if own == a {
						continue deps
					}
				}
				t.Errorf("%s imports %s", name, own)
				continue
			}
			if !strings.Contains(strings.Split(d, "/")[0], ".") {
				continue // standard library
			}
			for _, prefix := range rule.external {
				if strings.HasPrefix(d, prefix) {
					continue deps
				}
			}
			t.Errorf("%s depends on %s outside the standard library", name, d)
		}
	}
}
