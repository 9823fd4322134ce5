package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
)

// TestAccessLogTemplate: with Knative's request-log template, each request
// is one line of the template executed on Knative's input fields.
func TestAccessLogTemplate(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(nil, env(map[string]string{"USER_PORT": "8080", "SERVING_NAMESPACE": "ns", "SERVING_SERVICE": "svc",
		"SERVING_CONFIGURATION": "cfg", "SERVING_REVISION": "svc-00001", "SERVING_POD": "pod-1", "SERVING_POD_IP": "10.0.0.7",
		"OBSERVABILITY_CONFIG": `{"enableRequestLog":true}`}))
	if err != nil {
		t.Fatal(err)
	}
	req := func() *http.Request {
		r := &http.Request{Method: "POST", URL: &url.URL{Path: "/a", RawQuery: "q=1"}, RequestURI: "/a?q=1", Header: http.Header{},
			Proto: "HTTP/1.1", RemoteAddr: "127.0.0.1:5000", ContentLength: 3}
		r.Header.Set("User-Agent", `agent "x"`)
		return r
	}
	tests := []struct {
		name     string
		template string // "" is Knative's default
		header   map[string]string
		status   int
		want     string // the whole line; "" means: decode the default template's JSON
	}{
		{name: "Knative's default template", status: 201, header: map[string]string{"Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		{name: "every field", template: `{{.Request.Method}} {{.Request.URL.Path}} {{.Response.Code}} {{.Response.Size}} {{.Revision.Name}} {{.Revision.Namespace}} ` +
			`{{.Revision.Service}} {{.Revision.Configuration}} {{.Revision.PodName}} {{.Revision.PodIP}} {{.TraceID}}`,
			status: 200, header: map[string]string{"X-B3-Traceid": "80f198ee56343ba864fe8b2a57d3eff7"},
			want: "POST /a 200 12 svc-00001 ns svc cfg pod-1 10.0.0.7 80f198ee56343ba864fe8b2a57d3eff7\n"},
		{name: "nothing written is 499", template: "{{.Response.Code}}\n", status: 0, want: "499\n"},
		{name: "a failing template says so", template: "{{.Request.Nope}}", status: 200, want: "invalid request log template: method POST, status 200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := cfg
			if tt.template != "" {
				tmpl, err := parseRequestLogTemplate(tt.template)
				if err != nil {
					t.Fatal(err)
				}
				c.Knative.RequestLog = tmpl
			}
			var buf testnet.SyncBuffer
			l := newAccessLog(c, &buf)
			r := req()
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			l.done(r, tt.status, 12, 1500*time.Millisecond)
			line := buf.String()
			if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
				t.Errorf("not one line: %q", line)
			}
			if tt.want != "" {
				if !strings.HasPrefix(line, tt.want) {
					t.Errorf("line %q, want %q", line, tt.want)
				}
				return
			}
			var e struct {
				HTTPRequest struct {
					RequestMethod, RequestURL, RequestSize, ResponseSize, UserAgent, RemoteIP, ServerIP, Latency, Protocol string
					Status                                                                                                 int
				} `json:"httpRequest"`
				TraceID string `json:"traceId"`
			}
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("the default template's line is not JSON: %v: %s", err, line)
			}
			h := e.HTTPRequest
			if h.RequestMethod != "POST" || h.RequestURL != "/a?q=1" || h.RequestSize != "3" || h.Status != 201 || h.ResponseSize != "12" ||
				h.UserAgent != `agent "x"` || h.RemoteIP != "127.0.0.1:5000" || h.ServerIP != "10.0.0.7" || h.Latency != "1.5s" ||
				h.Protocol != "HTTP/1.1" || e.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
				t.Errorf("line %s decoded as %+v", line, e)
			}
		})
	}
}
