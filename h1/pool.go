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
)

// classes are the buffer sizes the pools hand out: a request head is
// copied into the smallest that holds it; reads and writes use bufSize.
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
