// Package stats counts requests for the autoscaler and for Prometheus.
//
// A [Recorder] follows every non-probe request from arrival to the end of
// its response and integrates the number of active requests over time, so
// that each window (one second) yields the time-weighted average
// concurrency, the same for requests proxied by Knative's activator, and
// the request rates. Its [Recorder.Handler] also observes each request's
// duration by status code for a histogram.
//
// Counting is lock-free: one 64-bit word per counter holds the window's
// epoch (6 bits), the number of active requests and the area under the
// concurrency curve, updated with a compare-and-swap at the start and one at
// the end of a request, retried when another update or a close came between
// (BenchmarkRecorder). Closing a window swaps the word to the next epoch, so
// an update that races a close retries against the new window. It is not
// airtight: the 6-bit epoch wraps after 64 windows, so an update stalled
// between its load and its swap for 64 windows (64 s with one-second
// windows) that then finds the very same word again succeeds (ABA), and its
// request is counted against the wrong window start.
//
// It deliberately does not serve HTTP or encode the autoscaler's protobuf:
// cmd/queue does, from [Recorder.Last] and [Recorder.WritePrometheus].
// A Recorder is safe for concurrent use; Run must be called once.
package stats
