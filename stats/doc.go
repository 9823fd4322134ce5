// Package stats counts requests for the autoscaler and for Prometheus.
//
// A [Recorder] follows every non-probe request from arrival to the end of
// its response and integrates the number of active requests over time, so
// that each window yields the time-weighted average concurrency, the same
// for requests proxied by Knative's activator, and the request rates. Its
// [Recorder.Handler] also observes each request's duration for a
// histogram, by status code, method, scheme and HTTP version
// ([Recorder.Durations]), which the Prometheus text and the OTLP push of
// cmd/queue both read.
//
// Nothing runs in the background. A window is closed when someone reads the
// figures ([Recorder.Snapshot], which the stats-port scrape and
// [Recorder.WritePrometheus] call) and only when it is at least
// Config.Window (one second) old; a younger one is left running and the
// last closed window is served again. A scraper that comes every second
// thus gets one-second windows, two scrapers never cut each other's windows
// shorter than a second, a late scrape gets one longer window averaged over
// its real length, and a process nobody scrapes closes nothing.
//
// Counting is lock-free: one 64-bit word per counter holds the segment's
// epoch (6 bits), the number of active requests and the area under the
// concurrency curve, updated with a compare-and-swap at the start and one at
// the end of a request, retried when another update or a close came between
// (BenchmarkRecorder). Closing swaps the word to the next epoch, so an update
// that races a close retries against the new segment. A window is one
// segment or more: an update that comes a second or more after its
// segment began first folds the segment into the window, under the lock
// that closes windows, so that the area's 40 bits hold however long
// nobody scrapes; that costs the request path one short locked step a
// second at most, and seldom any while a scraper closes windows every
// second. It is not
// airtight: the 6-bit epoch wraps after 64 segments, so an update stalled
// between its load and its swap for 64 of them (32 s at least with
// one-second windows) that then finds the very same word again succeeds
// (ABA), and its request is counted against the wrong segment start.
//
// It deliberately does not serve HTTP or encode the autoscaler's protobuf:
// cmd/queue does, from [Recorder.Snapshot] and [Recorder.WritePrometheus].
// A Recorder is safe for concurrent use.
package stats
