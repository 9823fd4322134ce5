package stats

import "sync/atomic"

// conc integrates a concurrency over time without a lock. Its word packs
//
//	epoch  6 bits   which segment the area belongs to
//	active 18 bits  requests in flight now (at most 262143)
//	area   40 bits  signed, in microsecond-requests, relative to the segment's start
//	                (±5.5e11: 262143 requests for 2.1 s)
//
// A segment is a stretch of time counted in one word: a window is one
// segment or more (Recorder.fold). Within a segment that started at B, with
// n requests active now and area a = sum(end - B) - sum(begin - B) over the
// segment's events, the integral of the concurrency from B to T is
// a + n*(T-B). Closing the segment at T moves to the next epoch with base T
// and area 0; the active requests carry over. An update computes its offset
// from the base of the epoch it read and commits with a compare-and-swap of
// the whole word, so one racing with a close retries against the new epoch.
//
// The area field holds a only while |a| < 2^39. Since the integral lies
// between 0 and 262143*(T-B), |a| stays below 262143*(T-B): add refuses an
// update maxSegment or more after the segment's start, and the caller closes
// the segment first, so that the field holds whatever the time between
// windows (the area of a long window is summed in an int64 by the
// Recorder). An update stamped before its segment started (it raced a
// close) has a negative offset, which is exact.
//
// The one race this cannot see is an update stalled between its load and
// its swap for all 64 epochs that then finds the very same word again
// (ABA): its request would be counted against the wrong segment start.
// Epochs advance only under the Recorder's lock, when a segment
// maxSegment old is folded or a window Config.Window old is closed on
// demand; of any three advances in a row the first and the last are then at
// least the shorter of the two apart, so the stall would have to last 32 s
// or more with the one-second defaults. (Recorder.Close, for tests, closes
// whenever it is told.)
type conc struct {
	x     atomic.Uint64
	bases [epochs]atomic.Int64 // segment start per epoch, microseconds
}

const (
	epochs     = 64
	areaBits   = 40
	activeBits = 18
	activeMask = 1<<activeBits - 1
	areaMask   = 1<<areaBits - 1

	// maxSegment is the longest a segment may run before an update closes
	// it, in microseconds: 262143 requests for one second, 2.6e11, leave
	// the 40-bit area half its range for updates stamped late.
	maxSegment = int64(1e6)
)

func pack(epoch uint64, active uint64, area int64) uint64 {
	return epoch<<(areaBits+activeBits) | active<<areaBits | uint64(area)&areaMask
}

func unpack(x uint64) (epoch, active uint64, area int64) {
	return x >> (areaBits + activeBits), x >> areaBits & activeMask, int64(x<<(64-areaBits)) >> (64 - areaBits)
}

// add records a request beginning (delta 1) or ending (delta -1) at now.
// It reports false, changing nothing, when now is maxSegment or more after
// the current segment's start: the caller must close the segment (under
// the Recorder's lock) and call again.
func (c *conc) add(now int64, delta int) bool {
	for {
		x := c.x.Load()
		ep, n, a := unpack(x)
		t := now - c.bases[ep].Load()
		if t >= maxSegment {
			return false
		}
		if delta > 0 {
			if n == activeMask {
				return true // saturated: the average under-reports rather than wraps
			}
			n, a = n+1, a-t
		} else {
			if n == 0 {
				return true
			}
			n, a = n-1, a+t
		}
		if c.x.CompareAndSwap(x, pack(ep, n, a)) {
			return true
		}
	}
}

// age is the time from the current segment's start to now.
func (c *conc) age(now int64) int64 {
	ep, _, _ := unpack(c.x.Load())
	return now - c.bases[ep].Load()
}

// active is the number of requests in flight now.
func (c *conc) active() int {
	_, n, _ := unpack(c.x.Load())
	return int(n)
}

// close ends the current segment at now and returns the integral of the
// concurrency over it (microsecond-requests) and its length (microseconds).
// Only one goroutine at a time may call it: the Recorder's lock sees to it.
func (c *conc) close(now int64) (area, length int64) {
	for {
		x := c.x.Load()
		ep, n, a := unpack(x)
		length = now - c.bases[ep].Load()
		next := (ep + 1) % epochs
		c.bases[next].Store(now)
		if c.x.CompareAndSwap(x, pack(next, n, 0)) {
			return a + int64(n)*length, length
		}
	}
}
