// Package proxy is queue's terminal handler: it sends each request to the one
// upstream (the user container on loopback) and streams the answer back.
//
// The upstream protocol is fixed by configuration, never by what the client
// spoke: "http1" uses queue's own HTTP/1.1 client (h1.go), which writes the
// rewritten request head straight into a pooled connection buffer and reads
// the response on the handler's goroutine; "h2c" uses net/http's own
// Transport with UnencryptedHTTP2 as its only protocol, which speaks HTTP/2
// with prior knowledge (Go 1.24); x/net's http2 package is not on the
// upstream side.
//
// The package also holds the ingress pieces that belong to the data path: the
// h2c Upgrade handler (RFC 7540 section 3.2) and the TLS certificate reloader.
//
// Every failure on the request path becomes a response in one place:
// [StatusFor] maps an error to its status and [Proxy.Fail] writes it, the
// status text as the body; the chain package sends the limiter's errors
// there too.
//
// It deliberately does not count, queue, limit or probe: those are separate
// layers, composed with the proxy by the chain package. A *Proxy is safe for
// concurrent use.
package proxy
