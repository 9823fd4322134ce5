package h1

import "sync"

// Buffers come from size-classed pools as *[]byte, so that Put does not
// allocate (staticcheck SA6002). A connection holds a buffer only while it
// carries a request; an idle keep-alive connection holds none (readIdle),
// which is what keeps memory per idle connection small (BenchmarkConnMemory).
const (
	// bufSize is the read and write buffer of a request in flight: it holds
	// a typical head and small body, so most exchanges take one read and one
	// write.
	bufSize = 4 << 10
	// readSize is the buffer a plain TCP connection reads a request into
	// (readRaw). It is taken only once the socket has bytes, and what a
	// read does not fill is never touched: a small GET costs the pages its
	// head lands in, and its head is copied out and the buffer given back
	// before the handler runs (begin). A 16 KiB upload comes in with its
	// head in one read instead of three. A part of a head that waits for
	// the rest moves to a buffer sized to it (shrink), so a client that
	// stalls mid-head does not pin it.
	readSize = 64 << 10
)

// classes are the buffer sizes the pools hand out: a request head is
// copied into the smallest that holds it; reads use readSize (plain TCP)
// or bufSize (TLS), writes bufSize.
var classes = [...]int{512, 2 << 10, bufSize, 16 << 10, 64 << 10}

var pools [len(classes)]sync.Pool

// getBuf returns a buffer of at least n bytes, n at most the largest class.
func getBuf(n int) *[]byte {
	for i, size := range classes {
		if n <= size {
			if b, ok := pools[i].Get().(*[]byte); ok {
				return b
			}
			b := make([]byte, size)
			return &b
		}
	}
	b := make([]byte, n)
	return &b
}

// putBuf returns b to its pool; buffers of other sizes are dropped.
func putBuf(b *[]byte) {
	if b == nil {
		return
	}
	for i, size := range classes {
		if cap(*b) == size {
			*b = (*b)[:size]
			pools[i].Put(b)
			return
		}
	}
}
