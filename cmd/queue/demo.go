package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"time"
)

// parseConfigDemo is parseConfig; for "queue demo" the upstream is the
// built-in echo (filled in once it listens) and every port is on loopback
// unless a flag says otherwise.
func parseConfigDemo(args []string, getenv func(string) string, demo bool) (Config, error) {
	if !demo {
		return parseConfig(args, getenv)
	}
	// Defaults, not flags: a flag of the demo's own wins, and
	// --tls-listen without a certificate stays no mistake.
	return parseConfigFrom(args, getenv, func(c *Config) {
		c.Upstream = "127.0.0.1:1" // replaced by the echo's address
		c.Listen, c.TLSListen, c.AdminListen = "127.0.0.1:8012", "127.0.0.1:8112", "127.0.0.1:8022"
		c.StatsListen, c.MetricsListen = "127.0.0.1:8023", "127.0.0.1:9091"
		c.DrainQuietPeriod = 0
	})
}

// demoUpstream is an echo server: it answers every request with what it
// received, as JSON, over HTTP/1.1 and h2c.
type demoUpstream struct {
	ln  net.Listener
	srv *http.Server
}

func startDemoUpstream() (*demoUpstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	d := &demoUpstream{ln: ln, srv: &http.Server{Handler: http.HandlerFunc(echo), Protocols: &p, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}}
	go d.srv.Serve(ln)
	return d, nil
}

func (d *demoUpstream) Addr() string { return d.ln.Addr().String() }
func (d *demoUpstream) Close() error { return d.srv.Close() }

// echoReply is what the demo upstream answers.
type echoReply struct {
	Method     string              `json:"method"`
	Proto      string              `json:"proto"`
	Host       string              `json:"host"`
	URI        string              `json:"uri"`
	RemoteAddr string              `json:"remote_addr"`
	BodyBytes  int64               `json:"body_bytes"`
	Headers    map[string][]string `json:"headers"`
	HeaderList []string            `json:"header_names"`
}

func echo(w http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<30))
	names := make([]string, 0, len(r.Header))
	for k := range r.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(echoReply{
		Method: r.Method, Proto: r.Proto, Host: r.Host, URI: r.RequestURI,
		RemoteAddr: r.RemoteAddr, BodyBytes: n, Headers: r.Header, HeaderList: names,
	})
}

func printDemo(w io.Writer, a addrs, upstream string) {
	fmt.Fprintf(w, `queue demo: an echo upstream on %s, queue in front of it on %s.
The echo answers with what it received, so you see what queue adds. Try:

  curl -s http://%s/hello -H 'X-Forwarded-For: 203.0.113.7'
  curl -s --http2-prior-knowledge http://%s/hello?proto=h2c

Ctrl-C stops both.
`, upstream, a.Listen, a.Listen, a.Listen)
}
