package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	got   chan struct{}
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req collectortracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	o.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			o.spans = append(o.spans, ss.GetSpans()...)
		}
	}
	o.mu.Unlock()
	select {
	case o.got <- struct{}{}:
	default:
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ = proto.Marshal(&collectortracepb.ExportTraceServiceResponse{})
	w.Write(b)
}

// TestTracing: with an OTLP endpoint, queue exports a server span that is
// the child of the incoming context, and the upstream receives queue's span
// as its parent; baggage passes unchanged.
func TestTracing(t *testing.T) {
	t.Parallel()
	rcv := &otlpReceiver{got: make(chan struct{}, 1)}
	collector := httptest.NewServer(rcv)
	t.Cleanup(collector.Close)
	up := h1Upstream(t, http.HandlerFunc(echo))
	q := startQueueEnv(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL,
		"OTEL_BSP_SCHEDULE_DELAY":     "50",
	}, hostPort(up))
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	c, base := q.client(t, modeH1)
	res, body := get(t, c, base+"/traced", map[string]string{
		"Traceparent": "00-" + traceID + "-" + parentID + "-01",
		"Baggage":     "user=alice",
	})
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	var e echoReply
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("upstream's echo %q: %v", body, err)
	}
	tp := e.get("Traceparent")
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[1] != traceID || parts[2] == parentID {
		t.Fatalf("upstream got traceparent %q, want trace %s with queue's span as parent", tp, traceID)
	}
	if got := e.get("Baggage"); got != "user=alice" {
		t.Errorf("baggage = %q, want it unchanged", got)
	}
	// Shutting down flushes the exporter; wait for the exports (the two
	// spans may come in one or in two).
	q.app.drainer.Start(true)
	timeout := time.After(h2Wait)
	for {
		rcv.mu.Lock()
		n := len(rcv.spans)
		rcv.mu.Unlock()
		if n >= 2 {
			break
		}
		select {
		case <-rcv.got:
		case <-timeout:
			t.Fatalf("%d spans exported within %v, want 2", n, h2Wait)
		}
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.spans) != 2 {
		t.Fatalf("%d spans exported, want 2", len(rcv.spans))
	}
	s, proxySpan := rcv.spans[0], rcv.spans[1]
	if s.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		s, proxySpan = proxySpan, s
	}
	if got := hex.EncodeToString(s.GetTraceId()); got != traceID {
		t.Errorf("span trace id %s, want %s", got, traceID)
	}
	if got := hex.EncodeToString(s.GetParentSpanId()); got != parentID {
		t.Errorf("span parent %s, want the incoming %s", got, parentID)
	}
	if s.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("span kind %v, want server", s.GetKind())
	}
	if proxySpan.GetName() != "kn.queueproxy.proxy" || !bytes.Equal(proxySpan.GetParentSpanId(), s.GetSpanId()) {
		t.Errorf("second span %q with parent %x, want kn.queueproxy.proxy inside the server span %x",
			proxySpan.GetName(), proxySpan.GetParentSpanId(), s.GetSpanId())
	}
	if got := hex.EncodeToString(proxySpan.GetSpanId()); got != parts[2] {
		t.Errorf("upstream's parent %s is not queue's kn.queueproxy.proxy span %s", parts[2], got)
	}
	var status int64
	for _, a := range s.GetAttributes() {
		if a.GetKey() == "http.response.status_code" {
			status = a.GetValue().GetIntValue()
		}
	}
	if status != 200 {
		t.Errorf("span status code attribute = %d, want 200", status)
	}
}

// TestTracingOffTouchesNothing: without an endpoint, trace headers pass
// unchanged and no tracing layer is installed.
func TestTracingOffTouchesNothing(t *testing.T) {
	t.Parallel()
	up := h1Upstream(t, http.HandlerFunc(echo))
	q := startQueue(t, hostPort(up))
	if q.app.tracer != nil {
		t.Fatal("a tracer exists without an endpoint")
	}
	c, base := q.client(t, modeH1)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	e := echoed(t, c, base+"/", map[string]string{"Traceparent": tp, "Tracestate": "a=b", "B3": "x-y-1"})
	if e.get("Traceparent") != tp || e.get("Tracestate") != "a=b" || e.get("B3") != "x-y-1" {
		t.Errorf("trace headers changed: %v", e.Headers)
	}
}

// TestLogLines: every line a real process writes, from its start to its
// exit (0) on Ctrl-C, is one JSON object with component=queue; the first
// has the version, commit and configuration.
func TestLogLines(t *testing.T) {
	t.Parallel()
	up := h1Upstream(t, http.HandlerFunc(echo))
	args, _, admin := processArgs(t, hostPort(up), "--drain-quiet-period", "0s")
	cmd, lines := startProcess(t, args...)
	// The first line comes before any port serves: wait for it, so that the
	// signal below cannot reach a process still starting (were another
	// test's queue on a reused port to answer /ready first).
	var all []string
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("the process exited without a log line")
		}
		all = append(all, l)
	case <-time.After(10 * time.Second):
		t.Fatal("no log line within 10 s")
	}
	waitHTTP(t, "http://"+admin+"/ready", 200)
	cmd.Process.Signal(interruptSignal)
	// The channel closes when the process's stderr does, at its exit.
	timeout := time.After(h2Wait)
	for closed := false; !closed; {
		select {
		case l, ok := <-lines:
			if ok {
				all = append(all, l)
			}
			closed = !ok
		case <-timeout:
			t.Fatalf("stderr still open %v after Ctrl-C; lines so far: %q", h2Wait, all)
		}
	}
	if code := waitExit(t, cmd, h2Wait); code != 0 {
		t.Errorf("exit status %d after Ctrl-C, want 0", code)
	}
	if len(all) < 3 {
		t.Fatalf("only %d log lines: %q", len(all), all)
	}
	for i, l := range all {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("line %d is not JSON: %v: %s", i, err, l)
			continue
		}
		if m["component"] != "queue" {
			t.Errorf("line %d lacks component=queue: %s", i, l)
		}
		if i == 0 {
			cfg, _ := m["config"].(map[string]any)
			if m["version"] == nil || m["commit"] == nil || cfg["upstream"] != hostPort(up) {
				t.Errorf("first line lacks version, commit or configuration: %s", l)
			}
		}
	}
}
