package main

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
)

// echoed sends a GET through c and decodes what the echo upstream received.
func echoed(t *testing.T, c *http.Client, url string, hdr map[string]string) echoReply {
	t.Helper()
	res, body := get(t, c, url, hdr)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status = %d, want 200; body %q", res.StatusCode, body)
	}
	var e echoReply
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("decode echo: %v\n%s", err, body)
	}
	return e
}

func (e echoReply) get(k string) string { return strings.Join(e.Headers[k], ",") }

// TestHeaders checks docs/contract.md section 3 end to end, through each ingress
// mode, against what a real upstream received.
func TestHeaders(t *testing.T) {
	t.Parallel()
	up := h1Upstream(t, http.HandlerFunc(echo))
	trusted := startTLSQueue(t, hostPort(up))
	untrusted := startTLSQueue(t, hostPort(up), "--trusted-proxies", "10.0.0.0/8")

	type want struct {
		host, xff, xfp, xfh, fwd string
		absent                   []string
		present                  map[string]string
	}
	tests := []struct {
		name      string
		untrusted bool
		h1only    bool // the header is connection-specific: HTTP/2 clients refuse to send it
		hdr       map[string]string
		want      want
	}{{
		name: "plain request gets this hop",
		hdr:  map[string]string{"Host": "app.example"},
		want: want{host: "app.example", xff: "127.0.0.1", xfh: "app.example",
			fwd: "for=127.0.0.1;host=app.example;proto=$P"},
	}, {
		name: "host with port is quoted",
		hdr:  map[string]string{"Host": "app.example:8080"},
		want: want{host: "app.example:8080", xff: "127.0.0.1", xfh: "app.example:8080",
			fwd: `for=127.0.0.1;host="app.example:8080";proto=$P`},
	}, {
		name: "trusted peer keeps X-Forwarded-* and Forwarded is built from them",
		hdr: map[string]string{"Host": "app.example", "X-Forwarded-For": "203.0.113.7, 2001:db8::1",
			"X-Forwarded-Proto": "https", "X-Forwarded-Host": "public.example"},
		want: want{host: "app.example", xff: "203.0.113.7, 2001:db8::1, 127.0.0.1", xfp: "https", xfh: "public.example",
			fwd: `for=203.0.113.7;host=public.example;proto=https, for="[2001:db8::1]", for=127.0.0.1;host=app.example;proto=$P`},
	}, {
		name: "trusted peer keeps Forwarded as it came",
		hdr: map[string]string{"Host": "app.example", "Forwarded": `for=192.0.2.60;proto=https;by="[2001:db8::9]"`,
			"X-Forwarded-For": "192.0.2.60"},
		want: want{host: "app.example", xff: "192.0.2.60, 127.0.0.1", xfh: "app.example",
			fwd: `for=192.0.2.60;proto=https;by="[2001:db8::9]", for=127.0.0.1;host=app.example;proto=$P`},
	}, {
		name:      "untrusted peer loses forwarding headers and look-alikes",
		untrusted: true,
		hdr: map[string]string{"Host": "app.example", "Forwarded": "for=6.6.6.6", "X-Forwarded-For": "6.6.6.6",
			"X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example", "X_Forwarded_For": "6.6.6.6",
			"X_forwarded_host": "evil.example"},
		want: want{host: "app.example", xff: "127.0.0.1", xfh: "app.example",
			fwd:    "for=127.0.0.1;host=app.example;proto=$P",
			absent: []string{"X_forwarded_for", "X_forwarded_host"}},
	}, {
		name: "K-Original-Host becomes Host",
		hdr:  map[string]string{"Host": "internal.svc", "K-Original-Host": "public.example"},
		want: want{host: "public.example", xff: "127.0.0.1", xfh: "public.example",
			fwd: "for=127.0.0.1;host=public.example;proto=$P", absent: []string{"K-Original-Host"}},
	}, {
		name: "Knative-Serving headers removed, trace context passes",
		hdr: map[string]string{"Host": "a", "Knative-Serving-Revision": "r1", "Knative-Serving-Namespace": "ns",
			"Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "Tracestate": "congo=t61rcWkgMzE",
			"Baggage": "userId=alice"},
		want: want{host: "a", xff: "127.0.0.1", xfh: "a", fwd: "for=127.0.0.1;host=a;proto=$P",
			absent: []string{"Knative-Serving-Revision", "Knative-Serving-Namespace"},
			present: map[string]string{"Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"Tracestate": "congo=t61rcWkgMzE", "Baggage": "userId=alice"}},
	}, {
		name:   "hop-by-hop headers removed, TE trailers kept",
		h1only: true,
		hdr: map[string]string{"Host": "a", "Connection": "X-Private, keep-alive", "X-Private": "secret",
			"Keep-Alive": "timeout=5", "Proxy-Connection": "keep-alive", "Te": "trailers", "Upgrade": "foo/1",
			"X-Public": "ok"},
		want: want{host: "a", xff: "127.0.0.1", xfh: "a", fwd: "for=127.0.0.1;host=a;proto=$P",
			absent:  []string{"Connection", "X-Private", "Keep-Alive", "Proxy-Connection", "Upgrade"},
			present: map[string]string{"Te": "trailers", "X-Public": "ok"}},
	}, {
		name:   "Upgrade: h2c is never forwarded, even when not honoured",
		h1only: true,
		hdr: map[string]string{"Host": "a", "Connection": "Upgrade", "Upgrade": "h2c",
			"Http2-Settings": "AAMAAABkAAQCAAAAAAIAAAAA"},
		want: want{host: "a", xff: "127.0.0.1", xfh: "a", fwd: "for=127.0.0.1;host=a;proto=$P",
			absent: []string{"Connection", "Upgrade", "Http2-Settings"}},
	}}
	for _, mode := range []string{modeH1, modeH2C, modeTLSH1, modeTLSH2, modeH3} {
		for _, tt := range tests {
			if tt.h1only && (mode == modeH2C || mode == modeTLSH2 || mode == modeH3) {
				continue // HTTP/2 and HTTP/3 cannot carry connection-specific headers (RFC 9113 section 8.2.2, RFC 9114 section 4.2)
			}
			t.Run(mode+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				q := trusted
				if tt.untrusted {
					q = untrusted
				}
				c, base := q.client(t, mode)
				e := echoed(t, c, base+"/h?x=1", tt.hdr)
				proto := "http"
				if strings.HasPrefix(mode, "tls") || mode == modeH3 {
					proto = "https"
				}
				w := tt.want
				if w.xfp == "" {
					w.xfp = proto
				}
				w.fwd = strings.ReplaceAll(w.fwd, "$P", proto)
				if got := e.Host; got != w.host {
					t.Errorf("Host = %q, want %q", got, w.host)
				}
				if got, want := e.URI, "/h?x=1"; got != want {
					t.Errorf("request target = %q, want %q", got, want)
				}
				for k, want := range map[string]string{"X-Forwarded-For": w.xff, "X-Forwarded-Proto": w.xfp,
					"X-Forwarded-Host": w.xfh, "Forwarded": w.fwd} {
					if got := e.get(k); got != want {
						t.Errorf("%s = %q, want %q", k, got, want)
					}
				}
				// Absent under any spelling: the upstream's keys are its
				// server's canonical forms, which need not be the test's.
				for _, k := range w.absent {
					for name, v := range e.Headers {
						if strings.EqualFold(name, k) {
							t.Errorf("%s = %q reached the upstream, want it removed", name, v)
						}
					}
				}
				for k, want := range w.present {
					if got := e.get(k); got != want {
						t.Errorf("%s = %q, want %q", k, got, want)
					}
				}
			})
		}
	}
}

// TestHeadersIPv6Peer checks the peer's own element when it connects over
// IPv6: quoted and bracketed in Forwarded, bare in X-Forwarded-For.
func TestHeadersIPv6Peer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatalf("this test needs IPv6 loopback: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	up := h1Upstream(t, http.HandlerFunc(echo))
	q := startQueue(t, hostPort(up), "--listen", addr, "--trusted-proxies", "none")
	c, _ := q.client(t, modeH1)
	e := echoed(t, c, "http://"+addr+"/", map[string]string{"Host": "a", "X-Forwarded-For": "1.2.3.4"})
	if got, want := e.get("X-Forwarded-For"), "::1"; got != want {
		t.Errorf("X-Forwarded-For = %q, want %q", got, want)
	}
	if got, want := e.get("Forwarded"), `for="[::1]";host=a;proto=http`; got != want {
		t.Errorf("Forwarded = %q, want %q", got, want)
	}
}
