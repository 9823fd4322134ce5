package main

import (
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/valyala/bytebufferpool"
)

// accessLog writes one JSON line per request. The line is built in a
// pooled buffer: the only allocation is the buffer's growth, once.
type accessLog struct {
	w io.Writer
}

// done is stats.Config.OnDone.
func (l *accessLog) done(r *http.Request, status int, bytes int64, d time.Duration) {
	bb := bytebufferpool.Get()
	b := bb.B
	b = append(b, `{"time":"`...)
	b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","method":`...)
	b = appendJSONString(b, r.Method)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, r.URL.Path)
	b = append(b, `,"status":`...)
	if status == 0 {
		status = 499 // nothing written: the client went away
	}
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
