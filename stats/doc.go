// Package stats counts requests for the autoscaler and for Prometheus.
//
// A [Recorder] follows every non-probe request from arrival to the end of
// its response and integrates the number of active requests over time, so
// that each window (one second) yields the time-weighted average
// concurrency, the same for requests proxied by Knative's activator, and
// the request rates. Its [Recorder.Handler] also observes each request's
// duration by status class for a histogram.
//
// Counting is lock-free: one 64-bit word per counter holds the window's
// epoch, the number of active requests and the area under the concurrency
// curve, updated with one compare-and-swap at the start and one at the end
// of a request (BenchmarkRecorder). Closing a window swaps the word to the
// next epoch, so an update can never land in the wrong window.
//
// It deliberately does not serve HTTP or encode the autoscaler's protobuf:
// cmd/queue does, from [Recorder.Last] and [Recorder.WritePrometheus].
// A Recorder is safe for concurrent use; Run must be called once.
package stats
