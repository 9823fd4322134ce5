// Command naive is the reverse proxy most Go services would write first:
// net/http's server in front of httputil.ReverseProxy, standard library
// only. bench/compare.sh runs it as the "naive" peer, the baseline that
// tells how much of queue's cost is simply Go's HTTP stack.
//
// The only tuning is the one nearly everyone needs under load: the idle
// upstream pool is raised from net/http's 2 connections per host, so that
// 64 concurrent clients do not open and close upstream connections on every
// request. The listener serves HTTP/1.1 and h2c with prior knowledge;
// upstream requests are HTTP/1.1 keep-alive.
//
//	naive -listen 127.0.0.1:18015 -upstream 127.0.0.1:18010
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18015", "host:port to serve HTTP/1.1 and h2c on")
	upstream := flag.String("upstream", "127.0.0.1:18010", "host:port of the HTTP/1.1 upstream")
	idle := flag.Int("idle", 1024, "idle upstream connections kept per host")
	flag.Parse()

	target, err := url.Parse("http://" + *upstream)
	if err != nil {
		fmt.Fprintf(os.Stderr, "naive: parse -upstream: %v\n", err)
		os.Exit(2)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = 0 // no limit across hosts; the per-host limit below applies
	transport.MaxIdleConnsPerHost = *idle
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.SetXForwarded()
		},
		Transport: transport,
		ErrorLog:  log.New(io.Discard, "", 0),
	}

	srv := &http.Server{Addr: *listen, Handler: proxy, ErrorLog: log.New(io.Discard, "", 0)}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintf(os.Stderr, "naive: serve %s: %v\n", *listen, err)
		os.Exit(1)
	}
}
