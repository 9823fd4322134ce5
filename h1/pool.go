package h1

import "github.com/queue-dev/queue/internal/pool"

// Buffers come from internal/pool's size classes. A connection holds a
// buffer only while it carries a request; an idle keep-alive connection
// holds none (readIdle), which is what keeps memory per idle connection
// small (BenchmarkConnMemory).
const (
	// bufSize is the read and write buffer of a request in flight: it holds
	// a typical head and small body, so most exchanges take one read and one
	// write.
	bufSize = pool.Small
	// readSize is the buffer a plain TCP connection reads a request into
	// (readRaw). It is taken only once the socket has bytes, and what a
	// read does not fill is never touched: a small GET costs the pages its
	// head lands in, and its head is copied out and the buffer given back
	// before the handler runs (begin). A 16 KiB upload comes in with its
	// head in one read instead of three. A part of a head that waits for
	// the rest moves to a buffer sized to it (shrink), so a client that
	// stalls mid-head does not pin it.
	readSize = pool.Max
)
