// Package proxy is queue's terminal handler: it sends each request to the one
// upstream (the user container on loopback) and streams the answer back.
//
// The upstream protocol is fixed by configuration, never by what the client
// spoke: "http1" uses queue's own HTTP/1.1 client (h1.go), which writes the
// rewritten request head straight into a pooled connection buffer and reads
// the response on the handler's goroutine; "h2c" uses
// golang.org/x/net/http2's Transport with prior knowledge.
//
// The package also holds the ingress pieces that belong to the data path: the
// h2c Upgrade handler (RFC 7540 section 3.2) and the TLS certificate reloader.
//
// It deliberately does not count, queue, limit or probe: those are separate
// middleware composed in cmd/queue. A *Proxy is safe for concurrent use.
package proxy
