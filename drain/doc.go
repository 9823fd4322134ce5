// Package drain holds queue's lifecycle state: ready or draining, the quiet
// period after SIGTERM, and the answers to probes.
//
// [Drainer.Handler] is the outermost layer of the request path (the chain
// package puts it there). It answers probe requests itself (kube-probe and
// Knative probe User-Agents, K-Network-Probe) without passing them on or
// counting them (reporting each one's answer to Config.OnProbe, the request
// log, when it is set), and notes the arrival of every other request, so that
// [Drainer.WaitQuiet] can tell when none has come for the quiet period. A
// probe's 503 while draining or unready is a health answer, not an error,
// and is written here; requests that arrive while draining are served, not
// refused, so the drain has no error response of its own.
//
// It deliberately does not close listeners or wait for requests: cmd/queue
// does that with the ingress server's Shutdown (ingress.Server, which
// shuts down queue's HTTP/1.1 and HTTP/2 engines) once WaitQuiet returns,
// and calls [Drainer.Finish] at the end.
//
// A Drainer is safe for concurrent use. Noting an arrival is one atomic add.
package drain
