package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/queue-dev/queue/proxy"
	"github.com/valyala/bytebufferpool"
)

// accessLog writes one line per request: queue's JSON line, built in a
// pooled buffer (the only allocation is the buffer's growth, once), or,
// when tmpl is set, Knative's request-log template executed on the
// request. Only the template path pays for reflection and allocations.
type accessLog struct {
	w    io.Writer
	tmpl *template.Template
	rev  requestLogRevision
}

// newAccessLog returns the access log that cfg asks for, writing to w.
func newAccessLog(cfg Config, w io.Writer) *accessLog {
	return &accessLog{w: w, tmpl: cfg.Knative.RequestLog, rev: requestLogRevision{
		Name: cfg.Labels.Revision, Namespace: cfg.Labels.Namespace, Service: cfg.Labels.Service,
		Configuration: cfg.Labels.Configuration, PodName: cfg.Labels.Pod, PodIP: cfg.PodIP,
	}}
}

// requestLogRevision is .Revision in a request-log template: the fields
// Knative's RequestLogRevision has.
type requestLogRevision struct {
	Name, Namespace, Service, Configuration, PodName, PodIP string
}

// requestLogResponse is .Response in a request-log template.
type requestLogResponse struct {
	// Code is the status; 499 when nothing was written.
	Code int
	// Size is the response body's bytes.
	Size int
	// Latency is in seconds.
	Latency float64
}

// requestLogInput is what a request-log template is executed on, with the
// field names and types Knative's templates use.
type requestLogInput struct {
	Request  *http.Request
	Response *requestLogResponse
	Revision *requestLogRevision
	// TraceID is the W3C traceparent's trace id, else X-B3-TraceId's.
	TraceID string
}

// parseRequestLogTemplate parses a Knative request-log template. Each
// execution is one line: a template without a final newline gets one.
func parseRequestLogTemplate(s string) (*template.Template, error) {
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return template.New("requestLog").Parse(s)
}

var templateBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// writeTemplate executes the request-log template for one request. A
// template that fails on this request writes a short line saying so
// instead, as Knative does, so that the failure is seen.
func (l *accessLog) writeTemplate(r *http.Request, status int, size int64, d time.Duration) {
	in := &requestLogInput{
		Request:  r,
		Response: &requestLogResponse{Code: status, Size: int(size), Latency: d.Seconds()},
		Revision: &l.rev,
		TraceID:  traceID(r),
	}
	if in.TraceID == "" {
		in.TraceID = r.Header.Get("X-B3-Traceid")
	}
	buf := templateBufs.Get().(*bytes.Buffer)
	buf.Reset()
	if err := l.tmpl.Execute(buf, in); err != nil {
		buf.Reset()
		fmt.Fprintf(buf, "invalid request log template: method %s, status %d, latency %v, url %s: %v\n",
			r.Method, status, d.Seconds(), r.URL, err)
	}
	l.w.Write(buf.Bytes()) // one write per line: lines from concurrent requests do not interleave
	templateBufs.Put(buf)
}

// done is stats.Config.OnDone.
func (l *accessLog) done(r *http.Request, status int, bytes int64, d time.Duration) {
	if status == 0 {
		// Nothing written: the client went away. proxy owns its status.
		status = proxy.StatusFor(context.Canceled)
	}
	if l.tmpl != nil {
		l.writeTemplate(r, status, bytes, d)
		return
	}
	bb := bytebufferpool.Get()
	b := bb.B
	b = append(b, `{"time":"`...)
	b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","method":`...)
	b = appendJSONString(b, r.Method)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, r.URL.Path)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, bytes, 10)
	b = append(b, `,"duration":`...)
	b = strconv.AppendFloat(b, d.Seconds(), 'f', 6, 64)
	b = append(b, `,"remote_addr":`...)
	b = appendJSONString(b, r.RemoteAddr)
	b = append(b, `,"protocol":`...)
	b = appendJSONString(b, r.Proto)
	if id := traceID(r); id != "" {
		b = append(b, `,"trace_id":"`...)
		b = append(b, id...)
		b = append(b, '"')
	}
	b = append(b, "}\n"...)
	bb.B = b
	l.w.Write(b) // one write per line: lines from concurrent requests do not interleave
	bytebufferpool.Put(bb)
}

// traceID is the trace id of the request's W3C traceparent (the one sent
// upstream: queue's own span's when tracing is on), or "".
func traceID(r *http.Request) string {
	v := r.Header["Traceparent"]
	if len(v) == 0 || len(v[0]) < 55 || v[0][2] != '-' || v[0][35] != '-' {
		return ""
	}
	if v[0][:2] == "ff" { // an invalid version (W3C Trace Context, section 3.2.2.1)
		return ""
	}
	id := v[0][3:35]
	zero := true
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return ""
		}
		zero = zero && c == '0'
	}
	if zero {
		return "" // the all-zero trace id is invalid
	}
	return id
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes
// U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
