// End-to-end benchmarks of queue's data path over loopback: a client, queue
// (proxy.Proxy behind an http.Server configured like cmd/queue's plain
// ingress server) and an upstream serving fixed 0 B, 1 KiB and 64 KiB
// bodies, all three in this one process.
//
// Names are Benchmark<Front>/<client>-<upstream>/<body size>:
//
//	BenchmarkProxy/h1-h1/1KiB      HTTP/1.1 client -> queue -> HTTP/1.1 upstream
//	BenchmarkProxy/h2c-h1/1KiB     h2c client (prior knowledge) -> queue -> HTTP/1.1 upstream
//	BenchmarkProxy/h1-h2c/1KiB     HTTP/1.1 client -> queue -> h2c upstream
//	BenchmarkDirect/h1/1KiB        HTTP/1.1 client -> upstream (no proxy)
//	BenchmarkDirect/h2c/1KiB       h2c client -> upstream (no proxy)
//	BenchmarkHTTPUtil/h1-h1/1KiB   HTTP/1.1 client -> httputil.ReverseProxy -> HTTP/1.1 upstream
//
// and a *Parallel variant of each (1 KiB only) that runs GOMAXPROCS clients
// with b.RunParallel, to show contention in the proxy's pools and locks.
//
// How to read the numbers. ns/op is the latency of one whole exchange,
// including two extra loopback hops and the scheduler. B/op and allocs/op
// count every allocation in the process: client, proxy and upstream. The
// BenchmarkDirect baseline with the same client protocol measures the
// client and upstream alone, so the proxy's own cost is approximately
//
//	queue cost ≈ BenchmarkProxy/<c>-<u>/<size> − BenchmarkDirect/<c>/<size>
//
// for each of ns/op, B/op and allocs/op (the front server's own parsing is
// part of that cost: a proxy must run one). For h1-h2c the upstream side is
// h2c, so subtract BenchmarkDirect/h1 and remember that the h2c upstream
// server costs more than an HTTP/1.1 one; BenchmarkDirect/h2c shows by how
// much. Compare queue with the naive proxy the same way:
// (HTTPUtil − Direct) / (Proxy − Direct). Ratios are only meaningful within
// one run on one machine; the benchmarks are noisy on few cores, where the
// client, the proxy and the upstream compete for the same CPUs.
//
// To reproduce and compare:
//
//	go test -run '^$' -bench . -benchmem -count 6 ./bench/ | tee new.txt
//	benchstat new.txt
//	benchstat old.txt new.txt   # before/after a change
package bench

import (
	"testing"

	"github.com/queue-dev/queue/proxy"
)

// paths are the client -> queue -> upstream combinations.
var paths = []struct {
	name, client, upstream string
}{
	{"h1-h1", h1Client, proxy.HTTP1},
	{"h2c-h1", h2cClient, proxy.HTTP1},
	{"h1-h2c", h1Client, proxy.H2C},
}

func BenchmarkProxy(b *testing.B) {
	up := newUpstream(b)
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			runSizes(b, newClient(b, p.client), newQueue(b, up, p.upstream))
		})
	}
}

func BenchmarkProxyParallel(b *testing.B) {
	up := newUpstream(b)
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			runParallel(b, newClient(b, p.client), newQueue(b, up, p.upstream))
		})
	}
}

// BenchmarkDirect is the baseline: the client straight to the upstream.
func BenchmarkDirect(b *testing.B) {
	up := newUpstream(b)
	for _, c := range []string{h1Client, h2cClient} {
		b.Run(c, func(b *testing.B) {
			runSizes(b, newClient(b, c), up)
		})
	}
}

func BenchmarkDirectParallel(b *testing.B) {
	up := newUpstream(b)
	for _, c := range []string{h1Client, h2cClient} {
		b.Run(c, func(b *testing.B) {
			runParallel(b, newClient(b, c), up)
		})
	}
}

// BenchmarkHTTPUtil is the naive proxy, httputil.ReverseProxy, in queue's
// place.
func BenchmarkHTTPUtil(b *testing.B) {
	up := newUpstream(b)
	b.Run("h1-h1", func(b *testing.B) {
		runSizes(b, newClient(b, h1Client), newHTTPUtil(b, up))
	})
}

func BenchmarkHTTPUtilParallel(b *testing.B) {
	up := newUpstream(b)
	b.Run("h1-h1", func(b *testing.B) {
		runParallel(b, newClient(b, h1Client), newHTTPUtil(b, up))
	})
}
