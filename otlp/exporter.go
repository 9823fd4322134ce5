package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Protocol is an OTLP transport.
type Protocol string

// The protocols of OTEL_EXPORTER_OTLP_PROTOCOL that an Exporter speaks.
const (
	HTTPProtobuf Protocol = "http/protobuf"
	GRPC         Protocol = "grpc"
)

// Signal is what an Exporter carries: it names the gRPC method, the
// OTLP/HTTP path, the OTEL_EXPORTER_OTLP_<SIGNAL>_* variables and the log
// lines.
type Signal int

// The signals queue exports.
const (
	Traces Signal = iota
	Metrics
)

// String returns "traces" or "metrics".
func (s Signal) String() string {
	if s == Metrics {
		return "metrics"
	}
	return "traces"
}

// grpcPath is the collector service's Export method.
func (s Signal) grpcPath() string {
	if s == Metrics {
		return "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
	}
	return "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
}

// HTTPPath is the signal's OTLP/HTTP path: /v1/traces or /v1/metrics.
func (s Signal) HTTPPath() string { return "/v1/" + s.String() }

// DefaultQueueBytes bounds the requests waiting in an Exporter's queue
// when Config.QueueBytes is 0: a few full batches of spans (512 spans of
// a few hundred bytes each), or minutes of metric pushes.
const DefaultQueueBytes = 1 << 20

// DefaultTimeout bounds one export, retries included, when Config.Timeout
// is 0: the specification's default (OTEL_EXPORTER_OTLP_TIMEOUT).
const DefaultTimeout = 10 * time.Second

// Config configures an Exporter. FromEnv builds one from the environment.
type Config struct {
	// Signal names the gRPC method and the log lines. The zero value is
	// Traces.
	Signal Signal
	// Protocol is HTTPProtobuf or GRPC; "" means HTTPProtobuf.
	Protocol Protocol
	// URL is where requests go. For HTTPProtobuf, the full URL a request
	// is POSTed to, such as http://collector:4318/v1/traces. For GRPC, the
	// collector's http:// (HTTP/2 with prior knowledge) or https:// (HTTP/2
	// over TLS) address; its path is not used. Required.
	URL string
	// Headers are sent with every request, such as Authorization. Ours
	// (Content-Type, and the gRPC ones) win over them. nil means none.
	Headers map[string]string
	// Timeout bounds one export, retries included; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Gzip compresses requests: Content-Encoding gzip over HTTP,
	// grpc-encoding gzip over gRPC.
	Gzip bool
	// TLS configures https endpoints; nil means the system roots and no
	// client certificate.
	TLS *tls.Config
	// QueueBytes bounds the requests waiting to be sent, in bytes; the
	// oldest are dropped past it. One request is always kept, however
	// large. 0 means DefaultQueueBytes.
	QueueBytes int
	// Logger receives the changes of state (failing, recovered). nil
	// discards.
	Logger *slog.Logger
}

// Exporter sends export requests to a collector (package doc). Create it
// with New; it is safe for concurrent use.
type Exporter struct {
	signal   Signal
	protocol Protocol
	url      string
	header   http.Header
	timeout  time.Duration
	gzip     bool
	client   *http.Client
	log      *slog.Logger
	maxQueue int

	mu     sync.Mutex
	queue  [][]byte // oldest first; guarded by mu
	queued int      // bytes in queue; guarded by mu
	closed bool     // guarded by mu
	wake   chan struct{}
	done   chan struct{}
	// stop ends the export in flight and those still queued: Shutdown
	// calls it when its context ends first.
	stop    context.CancelFunc
	stopCtx context.Context

	dropped atomic.Uint64
	sent    atomic.Uint64
	failing bool                  // the sender's goroutine's own
	last    atomic.Pointer[error] // nil after a successful export
}

// New returns an Exporter for cfg and starts its sender goroutine. It does
// not connect. It fails when cfg.URL is not an http:// or https:// URL.
func New(cfg Config) (*Exporter, error) {
	if cfg.Protocol == "" {
		cfg.Protocol = HTTPProtobuf
	}
	if cfg.Protocol != HTTPProtobuf && cfg.Protocol != GRPC {
		return nil, fmt.Errorf("otlp: protocol %q: want http/protobuf or grpc", cfg.Protocol)
	}
	u, err := parseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("otlp: endpoint %q: %w", cfg.URL, err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = DefaultQueueBytes
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := make(http.Header, len(cfg.Headers)+5)
	h.Set("User-Agent", "queue-otlp-exporter")
	for k, v := range cfg.Headers {
		h.Set(k, v)
	}
	transport := &http.Transport{
		// No proxy: the collector is an in-cluster neighbour, and the
		// HTTP(S)_PROXY meant for the application must not capture the
		// sidecar's telemetry (http.DefaultTransport would honour it).
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   cfg.Timeout,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSClientConfig:     cfg.TLS,
		TLSHandshakeTimeout: cfg.Timeout,
		// Exports are sequential, one every few seconds at most: one idle
		// connection to the one collector is all that is reused.
		MaxIdleConns:        1,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     90 * time.Second,
	}
	target := u.String()
	switch cfg.Protocol {
	case GRPC:
		// gRPC is HTTP/2 only: with prior knowledge on http://, and over
		// TLS, ALPN h2, on https://. net/http's own HTTP/2 client speaks
		// both (Protocols, Go 1.24).
		var p http.Protocols
		if u.Scheme == "https" {
			p.SetHTTP2(true)
		} else {
			p.SetUnencryptedHTTP2(true)
		}
		transport.Protocols = &p
		u.Path, u.RawPath, u.RawQuery = cfg.Signal.grpcPath(), "", ""
		target = u.String()
		h.Set("Content-Type", "application/grpc")
		h.Set("Te", "trailers")
		if cfg.Gzip {
			h.Set("Grpc-Encoding", "gzip")
		}
	default:
		transport.ForceAttemptHTTP2 = true
		h.Set("Content-Type", "application/x-protobuf")
		if cfg.Gzip {
			h.Set("Content-Encoding", "gzip")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Exporter{
		signal:   cfg.Signal,
		protocol: cfg.Protocol,
		url:      target,
		header:   h,
		timeout:  cfg.Timeout,
		gzip:     cfg.Gzip,
		// Our own client, not http.DefaultClient, which other code may
		// change. It follows 307 and 308 redirects with the body, as the
		// specification asks of OTLP/HTTP; the export's context bounds
		// each request.
		client:   &http.Client{Transport: transport},
		log:      log,
		maxQueue: cfg.QueueBytes,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		stop:     cancel,
		stopCtx:  ctx,
	}
	go e.run()
	return e, nil
}

// Enqueue queues an encoded export request (ExportTraceServiceRequest or
// ExportMetricsServiceRequest, uncompressed) for sending and returns at
// once. The Exporter owns body from then on. When the queue would grow
// past Config.QueueBytes, the oldest requests waiting are dropped and
// counted (Dropped); body itself is always queued. It returns false, and
// drops body, after Shutdown.
func (e *Exporter) Enqueue(body []byte) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	e.queue = append(e.queue, body)
	e.queued += len(body)
	for e.queued > e.maxQueue && len(e.queue) > 1 {
		e.queued -= len(e.queue[0])
		e.queue[0] = nil
		e.queue = e.queue[1:]
		e.dropped.Add(1)
	}
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return true
}

// Dropped returns the number of export requests dropped so far because
// the queue was full.
func (e *Exporter) Dropped() uint64 { return e.dropped.Load() }

// Signal returns the signal the Exporter carries.
func (e *Exporter) Signal() Signal { return e.signal }

// Sent returns the number of export requests the collector has accepted.
func (e *Exporter) Sent() uint64 { return e.sent.Load() }

// run is the sender: it sends queued requests in order until Shutdown.
func (e *Exporter) run() {
	defer close(e.done)
	for {
		body, ok := e.next()
		if !ok {
			return
		}
		e.note(e.Export(e.stopCtx, body))
	}
}

// next waits for the oldest queued request; ok is false once the
// Exporter is shut down and the queue is empty.
func (e *Exporter) next() (body []byte, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.queue) == 0 {
		if e.closed {
			return nil, false
		}
		e.mu.Unlock()
		<-e.wake
		e.mu.Lock()
	}
	body = e.queue[0]
	e.queue[0] = nil
	e.queue = e.queue[1:]
	e.queued -= len(body)
	if len(e.queue) == 0 {
		e.queue = nil // let a burst's backing array go
	}
	return body, true
}

// note logs a change of state and keeps the last error for Shutdown.
func (e *Exporter) note(err error) {
	if err == nil {
		e.sent.Add(1)
		e.last.Store(nil)
		if e.failing {
			e.failing = false
			e.log.LogAttrs(context.Background(), slog.LevelInfo, "otlp export recovered",
				slog.String("signal", e.signal.String()), slog.Uint64("dropped", e.Dropped()))
		}
		return
	}
	e.last.Store(&err)
	if !e.failing {
		e.failing = true
		e.log.LogAttrs(context.Background(), slog.LevelWarn, "otlp export failing",
			slog.String("signal", e.signal.String()), slog.String("err", err.Error()),
			slog.Uint64("dropped", e.Dropped()))
	}
}

// Shutdown stops taking requests, sends those queued within ctx, and
// closes idle connections. When ctx ends first, the export in flight is
// cancelled and the rest of the queue fails. It returns the error of the
// last export, or ctx's error when it ended first.
func (e *Exporter) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	var err error
	select {
	case <-e.done:
	case <-ctx.Done():
		err = fmt.Errorf("otlp %s shutdown: %w", e.signal, ctx.Err())
		e.stop()
		<-e.done
	}
	e.stop()
	e.client.CloseIdleConnections()
	if err != nil {
		return err
	}
	if p := e.last.Load(); p != nil {
		return *p
	}
	return nil
}

// Retry policy for retryable answers ("Failures" in the OTLP
// specification): at most maxAttempts requests per export, all within the
// export timeout, waiting what the collector asks (Retry-After, RetryInfo)
// and otherwise backoffBase, doubled per retry, with jitter so that many
// sidecars behind one collector do not retry in step.
const (
	maxAttempts = 3
	backoffBase = 500 * time.Millisecond
)

// maxResponse bounds what is read of a collector's answer: enough for an
// error message or a partial success; a larger body is abandoned.
const maxResponse = 64 << 10

// Export sends one export request (uncompressed) now and waits for the
// answer, retrying as the package doc says within the export timeout. It
// is what the sender goroutine does for each queued request; tests and
// callers that must know the outcome call it directly.
func (e *Exporter) Export(ctx context.Context, body []byte) error {
	payload := body
	if e.gzip {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(body) // a bytes.Buffer does not fail
		if err := zw.Close(); err != nil {
			return fmt.Errorf("otlp export: gzip: %w", err)
		}
		payload = buf.Bytes()
	}
	if e.protocol == GRPC {
		// gRPC's length-prefixed message: the compressed flag and the
		// big-endian length, then the message.
		framed := make([]byte, 5, 5+len(payload))
		if e.gzip {
			framed[0] = 1
		}
		framed[1], framed[2], framed[3], framed[4] = byte(len(payload)>>24), byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
		payload = append(framed, payload...)
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		retry, wait, err := e.send(ctx, payload)
		if err == nil {
			return nil
		}
		if !retry || attempt == maxAttempts {
			return err
		}
		if wait <= 0 {
			d := backoffBase << (attempt - 1)
			wait = d/2 + rand.N(d/2)
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return fmt.Errorf("%w (retry in %v is past the export timeout)", err, wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// send makes one request. It reports whether a failure may be retried
// and, if the collector said so, after how long.
func (e *Exporter) send(ctx context.Context, payload []byte) (retry bool, wait time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(payload))
	if err != nil {
		return false, 0, fmt.Errorf("otlp export: %w", err)
	}
	req.Header = e.header.Clone()
	if e.protocol == GRPC {
		if deadline, ok := ctx.Deadline(); ok {
			req.Header.Set("Grpc-Timeout", grpcTimeout(time.Until(deadline)))
		}
	}
	resp, err := e.client.Do(req)
	if err != nil {
		// The collector could not be reached, or did not answer: retry
		// (specification, "Failures"), unless the export's time is up.
		return ctx.Err() == nil, 0, fmt.Errorf("otlp export: %w", err)
	}
	defer resp.Body.Close()
	// Read a bounded amount, so that the connection can be reused, an
	// error can quote the collector, and gRPC's trailers arrive.
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if e.protocol == GRPC {
		return grpcResult(ctx, resp, b, rerr)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/x-protobuf" {
			return false, 0, partialSuccess(b)
		}
		return false, 0, nil
	}
	serr := &statusError{code: resp.StatusCode, msg: errorMessage(resp.Header.Get("Content-Type"), b)}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true, retryAfter(resp.Header.Get("Retry-After")), serr
	}
	return false, 0, serr
}

// statusError is an OTLP/HTTP export that the collector answered with a
// status other than 2xx.
type statusError struct {
	code int
	msg  string // the collector's explanation; "" if none
}

func (e *statusError) Error() string {
	s := "otlp export: collector answered " + strconv.Itoa(e.code) + " " + http.StatusText(e.code)
	if e.msg != "" {
		s += ": " + e.msg
	}
	return s
}

// PartialError is an export the collector accepted only in part
// (ExportTracePartialSuccess, ExportMetricsPartialSuccess). It is not
// retried: the collector has already decided about every item.
type PartialError struct {
	// Rejected is the number of spans or data points rejected.
	Rejected int64
	// Message is the collector's explanation; "" if none.
	Message string
}

func (e *PartialError) Error() string {
	s := "otlp export: collector rejected " + strconv.FormatInt(e.Rejected, 10) + " items"
	if e.Message != "" {
		s += ": " + oneLine(e.Message)
	}
	return s
}

// partialSuccess reads an Export*ServiceResponse: partial_success (field
// 1) with rejected_<items> (1) and error_message (2). It returns a
// *PartialError when something was rejected; a message alone is a
// warning the specification lets a collector send with full success, and
// is not an error.
func partialSuccess(b []byte) error {
	var ps []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil
			}
			ps, b = v, b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil
		}
		b = b[n:]
	}
	var pe PartialError
	for len(ps) > 0 {
		num, typ, n := protowire.ConsumeTag(ps)
		if n < 0 {
			return nil
		}
		ps = ps[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(ps)
			if n < 0 {
				return nil
			}
			pe.Rejected, ps = int64(v), ps[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(ps)
			if n < 0 {
				return nil
			}
			pe.Message, ps = string(v), ps[n:]
		default:
			if n = protowire.ConsumeFieldValue(num, typ, ps); n < 0 {
				return nil
			}
			ps = ps[n:]
		}
	}
	if pe.Rejected <= 0 {
		return nil
	}
	return &pe
}

// errorMessage extracts the collector's explanation from an OTLP/HTTP
// error body: google.rpc.Status.message (field 2) of a protobuf body, as
// OTLP/HTTP specifies, or the text of a text/plain one, which many proxies
// send. It is cut to one short line for the log.
func errorMessage(contentType string, body []byte) string {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "application/x-protobuf":
		msg, _, _ := rpcStatus(body)
		return oneLine(msg)
	case "text/plain":
		return oneLine(string(body))
	}
	return ""
}

// rpcStatus reads a google.rpc.Status: message (field 2) and the details
// (field 3, each an Any) whose type is google.rpc.RetryInfo: its delay,
// and whether there was one. Malformed input gives what was read so far.
func rpcStatus(b []byte) (msg string, retryDelay time.Duration, hasRetryInfo bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		if typ != protowire.BytesType || (num != 2 && num != 3) {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return
		}
		b = b[n:]
		if num == 2 {
			msg = string(v)
			continue
		}
		if d, ok := retryInfo(v); ok {
			retryDelay, hasRetryInfo = d, true
		}
	}
	return
}

// retryInfo reads an Any (type_url 1, value 2) and, when it holds a
// google.rpc.RetryInfo, its retry_delay (field 1, a Duration: seconds 1,
// nanos 2).
func retryInfo(any []byte) (time.Duration, bool) {
	var typeURL string
	var value []byte
	for len(any) > 0 {
		num, typ, n := protowire.ConsumeTag(any)
		if n < 0 {
			return 0, false
		}
		any = any[n:]
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			v, n := protowire.ConsumeBytes(any)
			if n < 0 {
				return 0, false
			}
			any = any[n:]
			if num == 1 {
				typeURL = string(v)
			} else {
				value = v
			}
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, any); n < 0 {
			return 0, false
		}
		any = any[n:]
	}
	if !strings.HasSuffix(typeURL, "/google.rpc.RetryInfo") {
		return 0, false
	}
	var d time.Duration
	for len(value) > 0 {
		num, typ, n := protowire.ConsumeTag(value)
		if n < 0 {
			return 0, false
		}
		value = value[n:]
		if num != 1 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, value); n < 0 {
				return 0, false
			}
			value = value[n:]
			continue
		}
		dur, n := protowire.ConsumeBytes(value)
		if n < 0 {
			return 0, false
		}
		value = value[n:]
		for len(dur) > 0 {
			num, typ, n := protowire.ConsumeTag(dur)
			if n < 0 || typ != protowire.VarintType {
				return 0, false
			}
			dur = dur[n:]
			v, n := protowire.ConsumeVarint(dur)
			if n < 0 {
				return 0, false
			}
			dur = dur[n:]
			switch num {
			case 1:
				d += time.Duration(min(int64(v), int64(time.Hour/time.Second))) * time.Second
			case 2:
				d += time.Duration(int32(v))
			}
		}
	}
	return max(d, 0), true
}

// oneLine folds s into one line of at most 200 bytes, for the log.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}

// retryAfter parses Retry-After (RFC 9110 section 10.2.3): seconds or an
// HTTP date. It returns 0 when absent or malformed.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// parseURL accepts an http:// or https:// URL with a host.
func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("want an http:// or https:// URL with a host")
	}
	return u, nil
}
