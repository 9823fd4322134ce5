// Package proxy is queue's terminal handler: it sends each request to the one
// upstream (the user container on loopback) and streams the answer back.
//
// The upstream protocol is fixed by configuration, never by what the client
// spoke: "http1" uses queue's own HTTP/1.1 client on the wire package h1:
// h1.go runs an exchange in three steps (prepareH1: the target, the
// deadline and a held body; sendH1: one attempt, the rewritten request
// head and a held body in one write, then the response head, parsed by
// h1.ParseResponseFields into an engine.ResponseHead that queue's engines,
// HTTP/1.1 and HTTP/2, write without a header map, or by h1.ParseResponse
// into another writer's map; finishH1: the response passed on), copy.go
// copies the response body, upload.go streams a request body too large to
// hold, and pool.go keeps the connections (replay on a fresh one for the
// idle-close race, idle retirement, the reaper of departed clients).
// Everything of an exchange runs on the handler's goroutine but a streamed
// upload. "h2c" uses net/http's own Transport with UnencryptedHTTP2 as its
// only protocol, which speaks HTTP/2 with prior knowledge (Go 1.24); x/net's
// http2 package is not on the upstream side. The Transport's own retries
// are bounded from outside (h2Call).
//
// Both protocols take a request's target and Host under one rule,
// target.go's upstreamTarget: origin-form or "*", never CONNECT.
//
// Both protocols send a request again under one rule, replay.go's
// mayReplay: at most once, and only an idempotent request. A connect the
// upstream refuses is retried within Config.RetryWindow, on the request's
// goroutine, with one outage (outage.go) shared by the waiting requests.
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
