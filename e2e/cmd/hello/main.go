// Command hello is the test node's user container: an HTTP/1.1 server on
// $PORT (default 8080, Knative's runtime contract) that answers every
// request with "hello" and the pod's name (after ?sleep=D, if given), and
// exits on SIGTERM after its requests end.
package main

import (
	"context"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	host, _ := os.Hostname()
	srv := &http.Server{
		Addr:              ":" + port,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// ?sleep=D holds the answer for D (at most 10 s): a request
			// that takes a while, for the autoscaler to see concurrency.
			if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil && d > 0 {
				time.Sleep(min(d, 10*time.Second))
			}
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte("hello from " + host + "\n"))
		}),
	}
	go func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
