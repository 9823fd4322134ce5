package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDependencyDirection enforces the layers of docs/architecture.md:
// which of our packages may import which. Every package must appear below.
//
// From the bottom up: the basement (internal/...: raw socket I/O, buffer
// pools, time, the peer context, the HTTP semantics both engines share,
// the panic log, and the engines' contract with the proxy) imports nothing
// of ours; the wire and engines (h1, h2, h3)
// import only the basement, and none another; the upstream side (proxy)
// imports the HTTP/1.1 wire (h1), headers and the basement, and never the
// client-facing server (ingress) nor the HTTP/2 and HTTP/3 engines;
// ingress serves the engines; chain composes the layers; cmd/queue takes all.
// The rule for our own packages is on direct imports; the rule for what
// lies outside the module is on everything a package links.
func TestDependencyDirection(t *testing.T) {
	t.Parallel()
	const mod = "github.com/queue-dev/queue/"
	basement := []string{"internal/clock", "internal/engine", "internal/gostack", "internal/hpackw", "internal/httpsem", "internal/netio", "internal/panics", "internal/peer", "internal/pool", "internal/workers", "internal/conns"}
	// quic is what quic-go links: its QUIC transport, QPACK's static table,
	// and the x/ packages it needs (ChaCha20-Poly1305, UDP batching).
	quic := []string{"github.com/quic-go/", "golang.org/x/crypto/", "golang.org/x/net/", "golang.org/x/sys/", "golang.org/x/text/"}
	with := func(own ...string) []string { return append(own, basement...) }
	// allowed lists, per package, the module's own packages it may import
	// and what outside the standard library it may link.
	allowed := map[string]struct {
		own      []string
		external []string // import path prefixes
	}{
		"cmd/queue": {own: with("chain", "ingress", "h1", "h2", "proxy", "headers", "probe", "stats", "limit", "overload", "drain", "tracing", "otlp"), external: []string{""}},
		// chain composes the request path from the layers and the proxy;
		// cmd/queue, the tests and bench/ use it. Through tracing it may
		// depend on OpenTelemetry, and through proxy on x/net and x/text.
		// Of the basement it needs the engines' contract alone, to ask
		// whether a queued request's client left (engine.PeerChecker).
		// Each request has the overload guard look at the CPU quota.
		"chain": {own: []string{"proxy", "headers", "stats", "limit", "overload", "drain", "tracing", "otlp", "internal/engine"}, external: []string{""}},
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
		// ingress is the client-facing server: the HTTP/1.1 engine, with
		// HTTP/2 handed to the HTTP/2 engine, HTTP/3 on its engine, the h2c
		// upgrade and the TLS certificate.
		"ingress": {own: with("h1", "h2", "h3", "proxy", "headers"), external: quic},
		// h1 is the HTTP/1.1 wire code and serving engine: the basement
		// and the standard library only.
		"h1": {own: basement},
		// h2 is the HTTP/2 serving engine, on x/net's Framer and HPACK; it
		// shares the basement with h1, and nothing of h1's.
		"h2": {own: basement, external: []string{"golang.org/x/net/", "golang.org/x/text/"}},
		// h3 is the HTTP/3 serving engine, on quic-go's QUIC transport; it
		// shares the basement with h1 and h2, and nothing of theirs.
		"h3": {own: basement, external: quic},
		// The basement: imports nothing of ours.
		"internal/clock": {},
		// engine is the contract between the engines and the proxy: the
		// response head the upstream client writes and both engines read,
		// and the capabilities an engine offers a handler.
		"internal/engine":  {},
		"internal/gostack": {},
		// hpackw is the HPACK encoder of the HTTP/2 engine and the h2c client.
		"internal/hpackw":  {},
		"internal/httpsem": {},
		"internal/netio":   {},
		"internal/panics":  {},
		"internal/peer":    {},
		"internal/pool":    {},
		// conns is the multiplexing engines' set of open connections.
		"internal/conns": {},
		// workers runs the multiplexing engines' handlers (h2, h3).
		"internal/workers": {own: []string{"internal/gostack"}},
		// testnet is the tests' network helpers; only tests import it.
		"internal/testnet": {},
		// proxy is the upstream side: queue's HTTP/1.1 client on h1's
		// wire code, and its h2c client on x/net's Framer and hpack
		// decoder, encoding with internal/hpackw.
		"proxy":   {own: with("headers", "h1"), external: []string{"golang.org/x/net/", "golang.org/x/text/"}},
		"headers": {external: []string{"golang.org/x/net/http/httpguts", "golang.org/x/net/idna", "golang.org/x/text/"}},
		// probe waits on internal/clock's Alarm between probes.
		"probe": {own: []string{"internal/clock"}, external: []string{"golang.org/x/net/http/httpguts"}},
		"stats": {external: []string{"golang.org/x/net/http/httpguts"}},
		"limit": {external: []string{"golang.org/x/net/http/httpguts"}},
		// overload sheds a limiter while the CPU quota binds.
		"overload": {own: []string{"limit"}, external: []string{"golang.org/x/net/http/httpguts"}},
		"drain":    {external: []string{"golang.org/x/net/http/httpguts"}},
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps,Standard", "../../...")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := runCmd(t, cmd, 5*time.Minute); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	listed := map[string]bool{}
	dec := json.NewDecoder(&out)
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(p.ImportPath, mod)
		listed[name] = true
		if strings.HasPrefix(name, "bench") {
			continue // _test.go files only
		}
		rule, ok := allowed[name]
		if !ok {
			t.Errorf("package %s has no dependency rule: add it to docs/architecture.md and this test", name)
			continue
		}
	imports:
		for _, d := range p.Imports {
			if own, ok := strings.CutPrefix(d, mod); ok {
				for _, a := range rule.own {
					if own == a {
						continue imports
					}
				}
				t.Errorf("%s imports %s", name, own)
			}
		}
	deps:
		for _, d := range p.Deps {
			if strings.HasPrefix(d, mod) {
				continue // checked as a direct import of the package that has it
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
	// Every rule is checked against a package go list found: a rule whose
	// package is gone (or a listing that found nothing) fails.
	for name := range allowed {
		if !listed[name] {
			t.Errorf("go list did not list %s: remove its rule, or find why it is missing", name)
		}
	}
}
