package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// gRPC status codes (grpc/codes) that the exporter tells apart.
const (
	codeOK                = 0
	codeCanceled          = 1
	codeUnknown           = 2
	codeDeadlineExceeded  = 4
	codePermissionDenied  = 7
	codeResourceExhausted = 8
	codeAborted           = 10
	codeOutOfRange        = 11
	codeUnimplemented     = 12
	codeInternal          = 13
	codeUnavailable       = 14
	codeDataLoss          = 15
	codeUnauthenticated   = 16
)

// grpcError is a gRPC export that ended with a status other than OK.
type grpcError struct {
	code int
	msg  string // grpc-message, decoded; "" if none
}

func (e *grpcError) Error() string {
	s := "otlp export: collector answered gRPC status " + strconv.Itoa(e.code)
	if e.msg != "" {
		s += ": " + oneLine(e.msg)
	}
	return s
}

// grpcRetryable reports whether an OTLP/gRPC export that ended with code
// may be sent again (OTLP specification, "OTLP/gRPC Response": the
// retryable codes; RESOURCE_EXHAUSTED only when the server says when, with
// a RetryInfo).
func grpcRetryable(code int, hasRetryInfo bool) bool {
	switch code {
	case codeCanceled, codeDeadlineExceeded, codeAborted, codeOutOfRange, codeUnavailable, codeDataLoss:
		return true
	case codeResourceExhausted:
		return hasRetryInfo
	}
	return false
}

// httpToGRPC maps the HTTP status of an answer that is not gRPC's (a proxy
// in between, a server that is not gRPC) to a gRPC code, as gRPC's own
// clients do ("HTTP to gRPC Status Code Mapping" in grpc/doc).
func httpToGRPC(status int) int {
	switch status {
	case http.StatusBadRequest:
		return codeInternal
	case http.StatusUnauthorized:
		return codeUnauthenticated
	case http.StatusForbidden:
		return codePermissionDenied
	case http.StatusNotFound:
		return codeUnimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return codeUnavailable
	}
	return codeUnknown
}

// grpcResult reads the outcome of a gRPC Export call from its response:
// body is what was read of the body (at most maxResponse), readErr how
// that read ended. The status is in the trailers, or in the headers of a
// trailers-only answer (the server failed before any message).
func grpcResult(ctx context.Context, resp *http.Response, body []byte, readErr error) (retry bool, wait time.Duration, err error) {
	if resp.StatusCode != http.StatusOK {
		code := httpToGRPC(resp.StatusCode)
		return code == codeUnavailable, retryAfter(resp.Header.Get("Retry-After")),
			&grpcError{code: code, msg: "HTTP status " + resp.Status}
	}
	h := resp.Trailer
	st := h.Get("Grpc-Status")
	if st == "" {
		h = resp.Header
		st = h.Get("Grpc-Status")
	}
	if st == "" {
		if readErr != nil {
			// The stream broke before the status came: the call's fate is
			// unknown, as with a connection that failed.
			return ctx.Err() == nil, 0, fmt.Errorf("otlp export: reading the answer: %w", readErr)
		}
		return false, 0, &grpcError{code: codeInternal, msg: "the answer has no grpc-status"}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/grpc") {
		return false, 0, &grpcError{code: codeUnknown, msg: "content-type " + strconv.Quote(ct) + " is not gRPC's"}
	}
	code, cerr := strconv.Atoi(st)
	if cerr != nil || code < 0 {
		return false, 0, &grpcError{code: codeUnknown, msg: "grpc-status " + strconv.Quote(st)}
	}
	if code != codeOK {
		msg := h.Get("Grpc-Message")
		if m, err := url.PathUnescape(msg); err == nil {
			msg = m // percent-encoded, as gRPC's HTTP/2 protocol says
		}
		var delay time.Duration
		var hasRetryInfo bool
		if d := h.Get("Grpc-Status-Details-Bin"); d != "" {
			// Base64, padded or not ("-bin" metadata).
			if raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d, "=")); err == nil {
				_, delay, hasRetryInfo = rpcStatus(raw)
			}
		}
		return grpcRetryable(code, hasRetryInfo), delay, &grpcError{code: code, msg: msg}
	}
	msg, ok := unframe(body, resp.Header.Get("Grpc-Encoding"))
	if !ok {
		return false, 0, nil // accepted; an answer we cannot read says nothing more
	}
	return false, 0, partialSuccess(msg)
}

// unframe returns the message of a gRPC length-prefixed frame, gunzipped
// when its compressed flag is set and the encoding is gzip.
func unframe(b []byte, encoding string) ([]byte, bool) {
	if len(b) < 5 {
		return nil, false
	}
	n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
	if n < 0 || len(b)-5 < n {
		return nil, false
	}
	msg := b[5 : 5+n]
	if b[0] == 0 {
		return msg, true
	}
	if encoding != "gzip" {
		return nil, false
	}
	zr, err := gzip.NewReader(bytes.NewReader(msg))
	if err != nil {
		return nil, false
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxResponse))
	if err != nil {
		return nil, false
	}
	return out, true
}

// grpcTimeout writes d as gRPC's grpc-timeout header: at most 8 digits and
// a unit, here milliseconds, or seconds past 8 digits of them.
func grpcTimeout(d time.Duration) string {
	ms := max(d.Milliseconds(), 1)
	if ms < 1e8 {
		return strconv.FormatInt(ms, 10) + "m"
	}
	return strconv.FormatInt(min(ms/1000, 1e8-1), 10) + "S"
}
