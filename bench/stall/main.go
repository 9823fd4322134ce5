// Command stall holds many connections open on a proxy, each having sent
// half a request head and nothing more, so that bench/compare.sh can sample
// what the proxy's memory costs per stalled client (the "stall5000"
// scenario): the state a slow or hostile client leaves behind.
//
// It opens -n connections to -target (a few dialers at a time), writes
// "GET / HTTP/1.1\r\nHost: x\r\n" on each (the head is never finished),
// prints "open N" once the dialling is done, holds them for -hold, closes
// them and prints "closed". The whole run is bounded by -dial-timeout plus
// -hold; it exits 1 if fewer than half of the connections opened.
//
//	stall -target 127.0.0.1:18017 -n 5000 -hold 3s
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// halfHead is a request head without its final empty line.
const halfHead = "GET / HTTP/1.1\r\nHost: x\r\n"

func main() {
	target := flag.String("target", "127.0.0.1:18017", "host:port to connect to")
	n := flag.Int("n", 5000, "connections to hold")
	hold := flag.Duration("hold", 3*time.Second, "how long to hold them once open")
	dialTimeout := flag.Duration("dial-timeout", 20*time.Second, "bound on opening all connections")
	dialers := flag.Int("dialers", 16, "connections dialled at once")
	flag.Parse()

	conns, failed := open(*target, *n, *dialers, time.Now().Add(*dialTimeout))
	fmt.Printf("open %d failed %d\n", len(conns), failed)
	time.Sleep(*hold)
	for _, c := range conns {
		c.Close()
	}
	fmt.Println("closed")
	if len(conns) < *n/2 {
		fmt.Fprintf(os.Stderr, "stall: only %d of %d connections opened\n", len(conns), *n)
		os.Exit(1)
	}
}

// open dials n connections with the given number of dialers until deadline
// and writes halfHead on each. It returns those that opened and the count
// of those that did not.
func open(target string, n, dialers int, deadline time.Time) ([]net.Conn, int) {
	var (
		mu     sync.Mutex
		conns  []net.Conn
		failed int
		wg     sync.WaitGroup
	)
	next := make(chan struct{})
	go func() {
		defer close(next)
		for range n {
			next <- struct{}{}
		}
	}()
	d := net.Dialer{Deadline: deadline}
	for range max(dialers, 1) {
		wg.Go(func() {
			for range next {
				c, err := d.Dial("tcp", target)
				if err == nil {
					if _, err = c.Write([]byte(halfHead)); err != nil {
						c.Close()
					}
				}
				mu.Lock()
				if err != nil {
					failed++
				} else {
					conns = append(conns, c)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return conns, failed
}
