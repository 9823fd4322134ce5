// Command h3floor is quic-go's floor for the HTTP/3 rows: a bare
// http3.Server answering every request with 1 KiB from memory, no proxying,
// so that queue's HTTP/3 cost can be read against what quic-go's own
// server costs for the same load (h3load); with -relay, the floor of an
// HTTP/3 relay to an HTTP/1.1 upstream on quic-go's transport (relay.go);
// with -queue-engine, the same answer from queue's own HTTP/3 engine (h3).
//
//	h3floor -listen 127.0.0.1:18443 -cert cert.pem -key key.pem
//	h3floor -listen 127.0.0.1:18443 -cert cert.pem -key key.pem -relay 127.0.0.1:18000
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/quic-go/quic-go/http3"

	"github.com/queue-dev/queue/h3"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18443", "UDP host:port")
	certFile := flag.String("cert", "", "PEM certificate")
	keyFile := flag.String("key", "", "PEM key")
	upstream := flag.String("relay", "", "relay every request to this HTTP/1.1 upstream's /1k (host:port)")
	engine := flag.Bool("queue-engine", false, "answer with queue's own HTTP/3 engine (package h3) instead of quic-go's http3.Server")
	flag.Parse()
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "h3floor:", err)
		os.Exit(2)
	}
	if *upstream != "" {
		fmt.Fprintln(os.Stderr, "h3floor:", relay(*listen, *upstream, cert))
		os.Exit(1)
	}
	body := make([]byte, 1024)
	for i := range body {
		body[i] = 'a'
	}
	answer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1024")
		w.Write(body)
	})
	if *engine {
		pc, err := net.ListenPacket("udp", *listen)
		if err == nil {
			s := &h3.Server{Handler: answer}
			err = s.Serve(pc, &tls.Config{Certificates: []tls.Certificate{cert}})
		}
		fmt.Fprintln(os.Stderr, "h3floor:", err)
		os.Exit(1)
	}
	s := &http3.Server{
		Addr:      *listen,
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}),
		Handler:   answer,
	}
	if err := s.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "h3floor:", err)
		os.Exit(1)
	}
}
