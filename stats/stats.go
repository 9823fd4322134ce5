package stats

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Header names that change how a request is counted.
const (
	// KProxyRequest: "activator" marks a request the activator proxied.
	KProxyRequest = "K-Proxy-Request"
	// KKubeletProbe marks a kubelet probe that is proxied but not counted.
	KKubeletProbe = "K-Kubelet-Probe"
)

// Window is one closed window.
type Window struct {
	// Length of the window: at least Config.Window when closed on demand,
	// longer when nobody read the figures for a while. The averages and
	// rates are over this length.
	Length time.Duration
	// AverageConcurrency is the time-weighted average of active requests.
	AverageConcurrency float64
	// AverageProxiedConcurrency is the same for activator-proxied requests.
	AverageProxiedConcurrency float64
	// RequestsPerSecond counts arrivals in the window, per second.
	RequestsPerSecond float64
	// ProxiedRequestsPerSecond is the same for activator-proxied requests.
	ProxiedRequestsPerSecond float64
	// Uptime is the time from the Recorder's creation to the window's end.
	Uptime time.Duration
}

// Config configures a Recorder.
type Config struct {
	// Window is the shortest window: a read closes the current window only
	// when it is at least this old. 0 means one second.
	Window time.Duration
	// OnDone, when set, is called at the end of every counted request with
	// its status (0 when nothing was written: the client went away or the
	// connection was taken over), the body bytes written, and its
	// duration. It runs on the request's goroutine.
	OnDone func(r *http.Request, status int, bytes int64, d time.Duration)
}

// Recorder counts requests. Create it with New.
type Recorder struct {
	cfg      Config
	t0       time.Time // process start: the time base and uptime
	all      conc
	proxied  conc
	arrivals atomic.Uint64
	proxiedN atomic.Uint64
	last     atomic.Pointer[Window]
	hist     histogram
	pool     sync.Pool

	// mu serializes closing windows and folding segments: reads run on
	// their own goroutines, and conc.close needs one caller at a time. The
	// request path takes it only to fold a segment, once a second at most.
	mu     sync.Mutex
	start  int64 // the current window's start, microseconds since t0
	folded int64 // area of the current window's folded segments (microsecond-requests)
	pfold  int64 // the same for activator-proxied requests
}

// New returns a Recorder whose first window starts now.
func New(cfg Config) *Recorder {
	if cfg.Window <= 0 {
		cfg.Window = time.Second
	}
	r := &Recorder{cfg: cfg, t0: time.Now()}
	r.last.Store(&Window{})
	r.pool.New = func() any { return new(responseWriter) }
	return r
}

// now is the time since t0 in microseconds, from the monotonic clock.
func (s *Recorder) now() int64 { return int64(time.Since(s.t0) / time.Microsecond) }

// Begin counts a request arriving at now (microseconds since New). The
// Handler calls it; it is exported for exact tests with chosen times.
func (s *Recorder) Begin(now int64, proxied bool) {
	for !s.all.add(now, 1) {
		s.fold(&s.all, now)
	}
	s.arrivals.Add(1)
	if proxied {
		for !s.proxied.add(now, 1) {
			s.fold(&s.proxied, now)
		}
		s.proxiedN.Add(1)
	}
}

// End counts a request ending at now.
func (s *Recorder) End(now int64, proxied bool) {
	for !s.all.add(now, -1) {
		s.fold(&s.all, now)
	}
	if proxied {
		for !s.proxied.add(now, -1) {
			s.fold(&s.proxied, now)
		}
	}
}

// fold closes the segment c counts in at now, when it is still maxSegment
// old (another update may have folded it meanwhile), and adds both
// counters' segment areas to the current window's. The window goes on: only
// a read closes it. This is what keeps conc's 40-bit area from overflowing
// when nobody reads the figures for minutes or hours while requests come.
func (s *Recorder) fold(c *conc, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.age(now) < maxSegment {
		return
	}
	a, _ := s.all.close(now)
	p, _ := s.proxied.close(now)
	s.folded += a
	s.pfold += p
}

// Close ends the current window at now (microseconds since New), however
// young it is, stores it as the last one and returns it. It is for exact
// tests with chosen times; readers use Current or Snapshot.
func (s *Recorder) Close(now int64) Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeLocked(now)
}

// Current returns the figures at now (microseconds since New): when the
// current window is at least Config.Window old, it closes it at now and
// returns it; otherwise it returns the last closed window again. So readers
// that come every Config.Window get one window each, two readers (the
// autoscaler and Prometheus) never cut each other's windows shorter than
// Config.Window, and a late reader gets one long window whose averages are
// over its real length. Nothing is closed while nobody reads.
func (s *Recorder) Current(now int64) Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.currentLocked(now)
}

// Snapshot is Current at the present time.
func (s *Recorder) Snapshot() Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The time is taken under the lock, so that windows close in order.
	return s.currentLocked(s.now())
}

func (s *Recorder) currentLocked(now int64) Window {
	if now-s.start < int64(s.cfg.Window/time.Microsecond) {
		return *s.last.Load()
	}
	return s.closeLocked(now)
}

func (s *Recorder) closeLocked(now int64) Window {
	area, _ := s.all.close(now)
	parea, _ := s.proxied.close(now)
	area, parea = area+s.folded, parea+s.pfold
	s.folded, s.pfold = 0, 0
	length := now - s.start
	s.start = now
	n, pn := s.arrivals.Swap(0), s.proxiedN.Swap(0)
	w := Window{Length: time.Duration(length) * time.Microsecond, Uptime: time.Duration(now) * time.Microsecond}
	if length > 0 {
		secs := float64(length) / 1e6
		w.AverageConcurrency = float64(area) / float64(length)
		w.AverageProxiedConcurrency = float64(parea) / float64(length)
		w.RequestsPerSecond = float64(n) / secs
		w.ProxiedRequestsPerSecond = float64(pn) / secs
	}
	s.last.Store(&w)
	return w
}

// Last returns the last closed window without closing one.
func (s *Recorder) Last() Window { return *s.last.Load() }

// Active returns the number of requests in flight now.
func (s *Recorder) Active() int { return s.all.active() }

func isActivator(v []string) bool { return len(v) > 0 && v[0] == "activator" }

// Handler counts each request that passes through it, from arrival to the
// end of its response. Requests carrying K-Kubelet-Probe pass uncounted.
// The histogram and OnDone need the status and size: a ResponseWriter that
// counts them itself (Reporter, queue's HTTP/1.1 and HTTP/2 engines) is passed on as it
// is; any other is wrapped once (pooled, with Unwrap and Flush).
func (s *Recorder) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Header[KKubeletProbe]; ok {
			next.ServeHTTP(w, r)
			return
		}
		proxied := isActivator(r.Header[KProxyRequest])
		start := s.now()
		s.Begin(start, proxied)
		if rep, ok := w.(Reporter); ok {
			defer s.doneReported(rep, r, start, proxied)
			next.ServeHTTP(w, r)
			return
		}
		rw := s.pool.Get().(*responseWriter)
		rw.ResponseWriter = w
		defer s.done(rw, r, start, proxied)
		next.ServeHTTP(rw, r)
	})
}

// Reporter is implemented by a ResponseWriter that counts what the
// Handler's wrapper would: Status is the final status written (the first
// from 200, or a 101; 200 once the body is written without one), 0 if none,
// and Written the body bytes written.
type Reporter interface {
	Status() int
	Written() int64
}

func (s *Recorder) doneReported(rep Reporter, r *http.Request, start int64, proxied bool) {
	s.end(rep.Status(), rep.Written(), r, start, proxied)
}

func (s *Recorder) done(rw *responseWriter, r *http.Request, start int64, proxied bool) {
	s.end(rw.status, rw.bytes, r, start, proxied)
	*rw = responseWriter{}
	s.pool.Put(rw)
}

func (s *Recorder) end(status int, bytes int64, r *http.Request, start int64, proxied bool) {
	end := s.now()
	s.End(end, proxied)
	s.hist.observe(status, kindOf(r), end-start)
	if s.cfg.OnDone != nil {
		s.cfg.OnDone(r, status, bytes, time.Duration(end-start)*time.Microsecond)
	}
}

// responseWriter notes the status and body size for a ResponseWriter that
// is not a Reporter: queue's engines' writers (h1's and h2's) are, so it
// wraps only another server's, such as net/http's in a test. Wrapping
// adds a layer every later one must Unwrap through, so the request path
// keeps to at most one (docs/architecture.md).
type responseWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *responseWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 || code == http.StatusSwitchingProtocols {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Flush passes on; the proxy flushes streams through it.
func (w *responseWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Status reports the status written so far (0: none); the tracing layer
// reads it for the span (tracing.StatusReporter).
func (w *responseWriter) Status() int { return w.status }

// Unwrap lets http.ResponseController reach the server's writer (hijack,
// deadlines, full duplex).
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// DurationBuckets are the upper bounds, in seconds, of the request
// duration histograms: the boundaries Knative's queue-proxy gives
// kn.serving.invocation.duration, which are also those OpenTelemetry's
// semantic conventions advise for http.server.request.duration, so that
// dashboards built for either read queue's histograms unchanged.
var DurationBuckets = [...]float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

var bucketsMicros = func() (b [len(DurationBuckets)]int64) {
	for i, s := range DurationBuckets {
		b[i] = int64(s * 1e6)
	}
	return b
}()

// Status codes the histogram keeps apart: 100 to 599. A request that wrote
// nothing (the client went away) counts as 499, as the access log says.
const (
	minCode    = 100
	maxCode    = 599
	codeNoneAs = 499
)

// What the histogram keeps apart within a status code, the attributes
// OpenTelemetry's HTTP server instrumentation gives
// http.server.request.duration: the method (the nine of RFC 9110 and
// RFC 5789, any other as _OTHER), the scheme and the HTTP version. Each
// list is in the order the series are written.
var (
	methodNames  = [...]string{"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE", "_OTHER"}
	schemeNames  = [...]string{"http", "https"}
	versionNames = [...]string{"1.0", "1.1", "2"}
)

const numKinds = len(methodNames) * len(schemeNames) * len(versionNames)

// kindOf is the index of r's method, scheme and version among a status
// code's series: a few comparisons, no allocation.
func kindOf(r *http.Request) int {
	m := len(methodNames) - 1
	switch r.Method {
	case http.MethodConnect:
		m = 0
	case http.MethodDelete:
		m = 1
	case http.MethodGet:
		m = 2
	case http.MethodHead:
		m = 3
	case http.MethodOptions:
		m = 4
	case http.MethodPatch:
		m = 5
	case http.MethodPost:
		m = 6
	case http.MethodPut:
		m = 7
	case http.MethodTrace:
		m = 8
	}
	sc := 0
	if r.TLS != nil {
		sc = 1
	}
	v := 1
	switch {
	case r.ProtoMajor == 2:
		v = 2
	case r.ProtoMajor == 1 && r.ProtoMinor == 0:
		v = 0
	}
	return (m*len(schemeNames)+sc)*len(versionNames) + v
}

// codeHistogram is the duration histogram of one series.
type codeHistogram struct {
	counts [len(DurationBuckets) + 1]atomic.Uint64 // last: +Inf
	sum    atomic.Int64                            // microseconds
}

// codeSeries are the series of one status code, by kindOf.
type codeSeries struct {
	byKind [numKinds]atomic.Pointer[codeHistogram]
}

// histogram keeps the series of each status code, made the first time the
// code, and then the method, scheme and version, are seen: a handful ever
// occur, so the cost is half a kilobyte per code and a little more per
// series, and an observation is two atomic adds.
type histogram struct {
	byCode [maxCode - minCode + 1]atomic.Pointer[codeSeries]
}

func codeOf(status int) int {
	if status < minCode || status > maxCode {
		return codeNoneAs
	}
	return status
}

func (h *histogram) observe(status, kind int, micros int64) {
	slot := &h.byCode[codeOf(status)-minCode]
	cs := slot.Load()
	if cs == nil {
		slot.CompareAndSwap(nil, new(codeSeries))
		cs = slot.Load()
	}
	ks := &cs.byKind[kind]
	ch := ks.Load()
	if ch == nil {
		ks.CompareAndSwap(nil, new(codeHistogram))
		ch = ks.Load()
	}
	i := 0
	for i < len(bucketsMicros) && micros > bucketsMicros[i] {
		i++
	}
	ch.counts[i].Add(1)
	ch.sum.Add(micros)
}

// DurationSeries is one series of the request duration histogram.
type DurationSeries struct {
	// Status is the status code; 499 when nothing was written.
	Status int
	// Method ("GET", ..., "_OTHER"), Scheme ("http", "https") and
	// ProtocolVersion ("1.0", "1.1", "2") tell the series of one status
	// apart; all three are "" in a series that sums them (ByStatus).
	Method, Scheme, ProtocolVersion string
	// Counts are per bucket of DurationBuckets, not cumulative; the last
	// is past the last bound.
	Counts [len(DurationBuckets) + 1]uint64
	// Sum is the durations' sum in seconds.
	Sum float64
}

// Count is the number of requests in the series.
func (d *DurationSeries) Count() uint64 {
	var n uint64
	for _, c := range d.Counts {
		n += c
	}
	return n
}

// Durations returns the series of the request duration histogram, by
// status code, then method, scheme and version, in that order; series
// never seen are left out. The Prometheus text and the OTLP push both
// read it, so that they agree. It allocates: a scrape's or a push's work.
func (s *Recorder) Durations() []DurationSeries {
	var out []DurationSeries
	for i := range s.hist.byCode {
		cs := s.hist.byCode[i].Load()
		if cs == nil {
			continue
		}
		for k := range cs.byKind {
			ch := cs.byKind[k].Load()
			if ch == nil {
				continue
			}
			d := DurationSeries{Status: i + minCode,
				Method:          methodNames[k/(len(schemeNames)*len(versionNames))],
				Scheme:          schemeNames[k/len(versionNames)%len(schemeNames)],
				ProtocolVersion: versionNames[k%len(versionNames)],
				Sum:             float64(ch.sum.Load()) / 1e6,
			}
			for j := range d.Counts {
				d.Counts[j] = ch.counts[j].Load()
			}
			out = append(out, d)
		}
	}
	return out
}

// ByStatus sums series (in Durations' order) by status code alone:
// Knative's kn.serving.invocation.duration has no other attribute.
func ByStatus(series []DurationSeries) []DurationSeries {
	var out []DurationSeries
	for _, d := range series {
		if len(out) == 0 || out[len(out)-1].Status != d.Status {
			out = append(out, DurationSeries{Status: d.Status})
		}
		o := &out[len(out)-1]
		for j, c := range d.Counts {
			o.Counts[j] += c
		}
		o.Sum += d.Sum
	}
	return out
}

// Start returns the Recorder's creation time: where its cumulative
// counts start.
func (s *Recorder) Start() time.Time { return s.t0 }

// AppendDurationHistogram appends, in the Prometheus text format, series
// of the request duration histogram under name, each series carrying
// labels (a ready label list without braces, or empty) and then the
// OpenTelemetry Prometheus exporter's names of its attributes:
// http_request_method, http_response_status_code, network_protocol_name
// and network_protocol_version, url_scheme (the status code alone in a
// ByStatus series).
func AppendDurationHistogram(b []byte, name, help, labels string, series []DurationSeries) []byte {
	b = AppendMetricHeader(b, name, "histogram", help)
	for i := range series {
		d := &series[i]
		lbl := labels
		if lbl != "" {
			lbl += ","
		}
		if d.Method != "" {
			lbl += `http_request_method="` + d.Method + `",`
		}
		lbl += `http_response_status_code="` + strconv.Itoa(d.Status) + `"`
		if d.Method != "" {
			lbl += `,network_protocol_name="http",network_protocol_version="` + d.ProtocolVersion + `",url_scheme="` + d.Scheme + `"`
		}
		var cum uint64
		for j, le := range DurationBuckets {
			cum += d.Counts[j]
			b = fmt.Appendf(b, "%s_bucket{%s,le=\"%s\"} %d\n", name, lbl, strconv.FormatFloat(le, 'g', -1, 64), cum)
		}
		total := d.Count()
		b = fmt.Appendf(b, "%s_bucket{%s,le=\"+Inf\"} %d\n", name, lbl, total)
		b = fmt.Appendf(b, "%s_sum{%s} %s\n", name, lbl, strconv.FormatFloat(d.Sum, 'g', -1, 64))
		b = fmt.Appendf(b, "%s_count{%s} %d\n", name, lbl, total)
	}
	return b
}

// Gauges a caller adds to the Prometheus text, such as the limiter's depth.
type Gauges struct {
	// Depth returns the requests waiting for a slot now; nil means 0.
	Depth func() int

	// Limit returns the adaptive concurrency limit now
	// (queue_concurrency_limit); nil means no such series, as with a
	// fixed limit or none.
	Limit func() int
}

// WritePrometheus writes the metrics in the Prometheus text format
// (version 0.0.4), the window's from Snapshot. labels is a ready label list
// without braces, such as `namespace="ns",revision="r1"`, or empty.
func (s *Recorder) WritePrometheus(w io.Writer, labels string, g Gauges) error {
	last := s.Snapshot()
	depth := 0
	if g.Depth != nil {
		depth = g.Depth()
	}
	b := make([]byte, 0, 4096)
	gauge := func(name, help string, v float64) {
		b = AppendMetricHeader(b, name, "gauge", help)
		b = append(b, name...)
		if labels != "" {
			b = append(b, '{')
			b = append(b, labels...)
			b = append(b, '}')
		}
		b = append(b, ' ')
		b = appendFloat(b, v)
		b = append(b, '\n')
	}
	gauge("queue_requests_per_second", "Requests per second in the last window.", last.RequestsPerSecond)
	gauge("queue_proxied_operations_per_second", "Requests per second proxied by the activator in the last window.", last.ProxiedRequestsPerSecond)
	gauge("queue_average_concurrent_requests", "Time-weighted average of requests in flight over the last window.", last.AverageConcurrency)
	gauge("queue_average_proxied_concurrent_requests", "Time-weighted average of activator-proxied requests in flight over the last window.", last.AverageProxiedConcurrency)
	gauge("queue_active_requests", "Requests in flight now, queued ones included.", float64(s.Active()))
	gauge("queue_depth", "Requests waiting for a concurrency slot now.", float64(depth))
	if g.Limit != nil {
		gauge("queue_concurrency_limit", "Requests the adaptive concurrency limit lets in flight now.", float64(g.Limit()))
	}
	gauge("queue_process_uptime_seconds", "Seconds since queue started.", time.Since(s.t0).Seconds())

	b = AppendDurationHistogram(b, "http_server_request_duration_seconds",
		"Duration of requests from arrival to the end of the response, by method, status code, protocol and scheme.", labels, s.Durations())
	_, err := w.Write(b)
	return err
}

func appendFloat(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// AppendMetricHeader appends the HELP and TYPE lines of a metric family in
// Prometheus' text format. help must not hold a newline or backslash.
func AppendMetricHeader(b []byte, name, typ, help string) []byte {
	b = append(b, "# HELP "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, help...)
	b = append(b, "\n# TYPE "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, typ...)
	return append(b, '\n')
}
