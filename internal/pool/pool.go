// Package pool is queue's one family of byte-buffer pools, shared by the
// two engines (h1, h2) and the proxy: a buffer is taken for a request or a
// read in flight and given back at its end, so that what is idle holds no
// buffer memory.
//
// Buffers come from size-classed pools as *[]byte, so that Put does not
// allocate (staticcheck SA6002). Get hands out a buffer of its class's
// whole size; Put takes back only buffers of a class's capacity (one that
// grew by append, or was made past the largest class, is dropped).
package pool

import "sync"

// The sizes buffers come in; Get rounds up to the smallest that holds n.
const (
	// Head is a small head or an error answer.
	Head = 512
	// Medium holds a typical request head copied out of its read buffer.
	Medium = 2 << 10
	// Small is a read or write buffer under TLS, the HTTP/1.1 response
	// buffer, the upstream's read buffer.
	Small = 4 << 10
	// Large holds a request body of up to 16 KiB.
	Large = 16 << 10
	// Frame is the HTTP/2 read buffer: a frame at its largest (16 KiB,
	// RFC 9113 section 4.2) and its 9-byte header.
	Frame = 16<<10 + 9
	// Copy is the buffer a streamed body is copied through.
	Copy = 32 << 10
	// Max is the largest class: a plain TCP read buffer, the largest
	// response head.
	Max = 64 << 10
)

var classes = [...]int{Head, Medium, Small, Large, Frame, Copy, Max}

var pools [len(classes)]sync.Pool

// class returns the index in classes of the smallest class of at least n
// bytes, or -1 for n over Max. Written as a search tree rather than a loop:
// Get and Put run on every request, several times.
func class(n int) int {
	switch {
	case n <= Small:
		switch {
		case n <= Head:
			return 0
		case n <= Medium:
			return 1
		}
		return 2
	case n <= Frame:
		if n <= Large {
			return 3
		}
		return 4
	case n <= Copy:
		return 5
	case n <= Max:
		return 6
	}
	return -1
}

// Size returns the size of the class Get(n) takes from: the smallest class
// of at least n bytes, or 0 for n over Max.
func Size(n int) int {
	if i := class(n); i >= 0 {
		return classes[i]
	}
	return 0
}

// Get returns a buffer of at least n bytes, its length its class's size;
// n over Max is made and not pooled.
func Get(n int) *[]byte {
	i := class(n)
	if i < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := pools[i].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, classes[i])
	return &b
}

// Put gives b back to its class's pool; buffers of other capacities are
// dropped, and nil is nothing.
func Put(b *[]byte) {
	if b == nil {
		return
	}
	c := cap(*b)
	if i := class(c); i >= 0 && classes[i] == c {
		*b = (*b)[:c]
		pools[i].Put(b)
	}
}
