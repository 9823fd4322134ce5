// Package probe checks whether the upstream is ready and keeps watching it.
//
// A [Prober] checks once: [TCP] connects and closes, [HTTP] sends a GET with
// a kube-probe User-Agent (200-399 is ready) over HTTP/1.1, or with
// DetectHTTP2 over h2c or HTTP/1.1, whichever the upstream last answered
// ready over (trying h2c first until one has), [GRPC] calls
// grpc.health.v1.Health/Check over h2c (SERVING is ready), [None] is always
// ready, and [All] is ready when each of its probers is. Probers use their
// own connections, never the request path's pool, and every probe has its
// own short timeout.
//
// A [Watcher] runs a Prober in a loop. With no period it is aggressive:
// it probes every few milliseconds for its first second, so a cold start
// is reported ready within a few milliseconds of the upstream accepting,
// then backs off to one probe a second while nobody asks, and keeps
// watching at a relaxed pace once ready. [Watcher.Demand] and
// [Watcher.WaitReady] probe at once and then every [HoldInterval] while a
// probe request waits for an answer, a pace whose cost stays small when
// the upstream is down for good and the kubelet keeps asking. With a
// period it probes once per period. It logs a change of state once, never
// each failed attempt.
//
// It deliberately does not answer HTTP: the drain package turns readiness
// into probe responses. A Watcher is safe for concurrent use; its Run
// method must be called once.
package probe
