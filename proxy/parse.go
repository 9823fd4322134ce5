package proxy

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/queue-dev/queue/h1"
	"github.com/queue-dev/queue/headers"
	"github.com/queue-dev/queue/internal/engine"
)

// respHead is what the HTTP/1.1 client needs to know of an upstream
// response head beyond its fields; the wire package parses it.
type respHead = h1.ResponseHead

// parseResponse parses the complete response head b into h, with the
// strict rules of the wire package (h1.ParseResponse), leaving out the
// hop-by-hop fields of the one table (headers.IsHopByHop). Keys and values
// point into b. vals is the connection's scratch for the value slices.
func parseResponse(b []byte, h http.Header, vals *[]string) (respHead, error) {
	rh, err := h1.ParseResponse(b, h, vals, isHopByHop)
	if err != nil {
		return rh, fmt.Errorf("%w: %w", errBadResponse, err)
	}
	return rh, nil
}

// parseResponseFields is parseResponse with the fields appended to
// *fields (h1.ParseResponseFields); ok is false for a head that must be
// parsed into a map after all.
func parseResponseFields(b []byte, fields *[]engine.Field) (rh respHead, ok bool, err error) {
	rh, ok, err = h1.ParseResponseFields(b, fields, isHopByHop)
	if err != nil {
		return rh, false, fmt.Errorf("%w: %w", errBadResponse, err)
	}
	return rh, ok, nil
}

// isHopByHop is headers.IsHopByHop for fields named by no Connection
// option: the ones h1.ParseResponse leaves to its caller.
func isHopByHop(key string) bool { return headers.IsHopByHop(key, nil) }

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// forbiddenTrailer reports trailer fields that must not be forwarded, in
// either direction: headers.ForbiddenInTrailer, the one table of fields.
func forbiddenTrailer(key string) bool { return headers.ForbiddenInTrailer(key) }

// ownStrings gives every key, value and value slice of h storage of its
// own. Strings from the wire package point into buffers that are reused
// once their exchange ends (h1's doc.go); a consumer that keeps them
// longer, such as an HPACK encoder's table, must get copies.
//
// The keys are collected first and each entry is deleted and stored anew
// under its copied key: the Go spec does not say which key an assignment
// to an existing entry keeps, and an entry made while ranging over a map
// may or may not be produced by that range.
func ownStrings(h http.Header) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	for _, k := range keys {
		vv := h[k]
		own := make([]string, len(vv)) // vv may share the connection's scratch
		for i, v := range vv {
			own[i] = strings.Clone(v)
		}
		delete(h, k)
		h[strings.Clone(k)] = own
	}
}
