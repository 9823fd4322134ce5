package proxy

import (
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/queue-dev/queue/headers"
)

// TestUpstreamTarget: the one rule of targets and Hosts for both upstream
// protocols: origin-form and "*" pass, CONNECT, absolute- and
// authority-form targets and a bad Host are 400s; a request no server read
// goes by its URL.
func TestUpstreamTarget(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, method, requestURI, url, host string
		want                                string // "" for errBadRequest
	}{
		{name: "origin-form", method: "GET", requestURI: "/a?b=c", host: "a", want: "/a?b=c"},
		{name: "asterisk", method: "OPTIONS", requestURI: "*", host: "a", want: "*"},
		{name: "no RequestURI", method: "GET", url: "/p?q", host: "a", want: "/p?q"},
		{name: "CONNECT", method: "CONNECT", requestURI: "evil:443", host: "evil:443"},
		{name: "CONNECT without target", method: "CONNECT", host: "evil:443"},
		{name: "absolute-form", method: "GET", requestURI: "http://evil/", host: "a"},
		{name: "authority-form", method: "GET", requestURI: "evil:443", host: "a"},
		{name: "bad Host", method: "GET", requestURI: "/", host: "a b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &http.Request{Method: tt.method, RequestURI: tt.requestURI, Host: tt.host, URL: &url.URL{}, Header: http.Header{}}
			if tt.url != "" {
				u, err := url.ParseRequestURI(tt.url)
				if err != nil {
					t.Fatal(err)
				}
				r.URL = u
			}
			o := headers.NewOutbound(r.Header, r.Host, headers.Hop{})
			got, err := upstreamTarget(r, &o)
			if tt.want == "" {
				if !errors.Is(err, errBadRequest) {
					t.Errorf("upstreamTarget = %q, %v; want errBadRequest", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("upstreamTarget = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
