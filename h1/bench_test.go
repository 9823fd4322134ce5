package h1

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// benchServer serves h on loopback for the benchmark and returns the server
// and its address.
func benchServer(b *testing.B, h http.Handler) (*Server, string) {
	b.Helper()
	s := &Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatalf("listen: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(ln)
	}()
	b.Cleanup(func() {
		s.Close()
		<-done
	})
	return s, ln.Addr().String()
}

var helloBody = []byte("hello")

// BenchmarkServe is the engine alone: one keep-alive connection over
// loopback TCP, a GET and a trivial handler's 5-byte response per
// operation. The client reads the response with no allocation of its own
// (its length is constant: the Date field has a fixed width), so allocs/op
// is the engine's. The goal is 0 in steady state.
func BenchmarkServe(b *testing.B) {
	_, addr := benchServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(helloBody)
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatalf("dial: %v", err)
	}
	defer c.Close()
	req := []byte("GET /bench HTTP/1.1\r\nHost: a\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	buf := make([]byte, 4<<10)

	// The first exchange tells the response's length.
	if _, err := c.Write(req); err != nil {
		b.Fatalf("write: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(failAfter))
	n := 0
	size := -1
	for size < 0 || n < size {
		m, err := c.Read(buf[n:])
		if err != nil {
			b.Fatalf("read: %v (%q)", err, buf[:n])
		}
		n += m
		if i := bytes.Index(buf[:n], []byte("\r\n\r\n")); size < 0 && i >= 0 {
			size = i + 4 + len(helloBody)
		}
	}
	if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200 OK\r\n")) || n != size {
		b.Fatalf("unexpected response %q", buf[:n])
	}
	c.SetReadDeadline(time.Time{})

	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatalf("write: %v", err)
		}
		if _, err := io.ReadFull(c, buf[:size]); err != nil {
			b.Fatalf("read: %v", err)
		}
	}
	if !bytes.HasSuffix(buf[:size], helloBody) {
		b.Fatalf("unexpected response %q", buf[:size])
	}
}

// BenchmarkConnMemory measures what an open connection costs the process
// (heap and stacks, B/conn): connsPerOp connections are opened and
// brought to a state, then the growth of HeapInuse+StackInuse after a GC
// is divided among them. The figure includes the client's end of each
// connection (a net.TCPConn and its poll descriptor, a few hundred bytes),
// which a real client does not cost the server.
//
//   - idle: each connection carried one request and waits for the next
//     (keep-alive); it should hold no read or write buffer.
//   - stalled-head: each connection sent half a request head and stalled;
//     it holds what it read of the head until the header timeout.
func BenchmarkConnMemory(b *testing.B) {
	const connsPerOp = 500
	cases := []struct {
		name  string
		write string
		state int32 // the server-side state that shows the connection settled
	}{
		{name: "idle", write: "GET / HTTP/1.1\r\nHost: a\r\n\r\n", state: stateIdle},
		{name: "stalled-head", write: "GET / HTTP/1.1\r\nHost: a\r\nUser-", state: stateActive},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			s, addr := benchServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write(helloBody)
			}))
			var heap, stack float64
			buf := make([]byte, 512)
			for b.Loop() {
				var before, after runtime.MemStats
				fullGC()
				runtime.ReadMemStats(&before)
				conns := make([]net.Conn, 0, connsPerOp)
				for range connsPerOp {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						b.Fatalf("dial: %v", err)
					}
					conns = append(conns, c)
					if _, err := io.WriteString(c, bc.write); err != nil {
						b.Fatalf("write: %v", err)
					}
				}
				if bc.state == stateIdle {
					for _, c := range conns {
						c.SetReadDeadline(time.Now().Add(failAfter))
						if _, err := c.Read(buf); err != nil {
							b.Fatalf("read: %v", err)
						}
					}
				}
				waitConns(b, s, connsPerOp, bc.state)
				fullGC()
				runtime.ReadMemStats(&after)
				heap += float64(after.HeapInuse) - float64(before.HeapInuse)
				stack += float64(after.StackInuse) - float64(before.StackInuse)
				for _, c := range conns {
					c.Close()
				}
				waitConns(b, s, 0, 0)
			}
			per := float64(b.N) * connsPerOp
			b.ReportMetric((heap+stack)/per, "B/conn")
			b.ReportMetric(heap/per, "heap-B/conn")
			b.ReportMetric(stack/per, "stack-B/conn")
		})
	}
}

// fullGC collects twice: buffers put in a sync.Pool survive one GC (in
// its victim cache), and would count as in use.
func fullGC() {
	runtime.GC()
	runtime.GC()
}

// waitConns waits until s has n connections, all in state, bounded by
// failAfter. A connection is in stateIdle just before its goroutine parks
// in its read, and in stateActive once it read part of a head: a few
// scheduler rounds later it has parked.
func waitConns(b *testing.B, s *Server, n int, state int32) {
	b.Helper()
	deadline := time.Now().Add(failAfter)
	for {
		s.mu.Lock()
		ok := len(s.conns) == n
		for c := range s.conns {
			ok = ok && c.state.Load() == state
		}
		s.mu.Unlock()
		if ok {
			for range 10 {
				runtime.Gosched()
			}
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("connections did not settle: want %d in state %d", n, state)
		}
		runtime.Gosched()
	}
}
