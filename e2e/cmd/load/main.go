// Command load sends GETs at a fixed rate for a while (an open loop, as
// vegeta does) and reports how many it sent, how many failed (an error or
// a status other than 200) and the latency's median and 99th percentile.
//
//	load -url http://10.96.1.2/?sleep=100ms -rate 200 -duration 60s -H 'Host: busy.default.svc.cluster.local'
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

type headers []string

func (h *headers) String() string     { return strings.Join(*h, ", ") }
func (h *headers) Set(v string) error { *h = append(*h, v); return nil }

func main() {
	url := flag.String("url", "", "what to GET (required)")
	rate := flag.Int("rate", 100, "requests a second")
	dur := flag.Duration("duration", 10*time.Second, "how long to send")
	timeout := flag.Duration("timeout", 30*time.Second, "each request's limit")
	var hs headers
	flag.Var(&hs, "H", "a header, `Name: value` (repeatable; Host sets the host)")
	flag.Parse()
	if *url == "" || *rate <= 0 || *dur <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	client := &http.Client{Timeout: *timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 1000}}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		failed    int
		firstErr  string
		wg        sync.WaitGroup
	)
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	defer tick.Stop()
	end := time.Now().Add(*dur)
	sent := 0
	for now := range tick.C {
		if now.After(end) {
			break
		}
		sent++
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodGet, *url, nil)
			if err != nil {
				panic(err)
			}
			for _, h := range hs {
				k, v, _ := strings.Cut(h, ":")
				if strings.EqualFold(k, "Host") {
					req.Host = strings.TrimSpace(v)
				} else {
					req.Header.Set(k, strings.TrimSpace(v))
				}
			}
			t0 := time.Now()
			resp, err := client.Do(req)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if firstErr == "" {
					firstErr = err.Error()
				}
				return
			}
			latencies = append(latencies, time.Since(t0))
		})
	}
	wg.Wait()
	slices.Sort(latencies)
	q := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))]
	}
	fmt.Printf("sent=%d failed=%d p50=%s p99=%s", sent, failed, q(0.50).Round(time.Microsecond), q(0.99).Round(time.Microsecond))
	if firstErr != "" {
		fmt.Printf(" first-error=%q", firstErr)
	}
	fmt.Println()
	if failed > 0 {
		os.Exit(1)
	}
}
