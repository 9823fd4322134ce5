package stats

import "sync/atomic"

// conc integrates a concurrency over time without a lock. Its word packs
//
//	epoch  6 bits   which window the area belongs to
//	active 18 bits  requests in flight now (at most 262143)
//	area   40 bits  signed, in microsecond-requests, relative to the window's start
//	                (±5.5e11: 262143 requests over a window of 24 days would not fit;
//	                one second is what Run uses)
//
// Within a window that started at B, with n requests active now and area
// a = sum(end - B) - sum(begin - B) over the window's events, the integral
// of the concurrency from B to T is a + n*(T-B). Closing the window at T
// moves to the next epoch with base T and area 0; the active requests carry
// over. An update computes its offset from the base of the epoch it read and
// commits with a compare-and-swap of the whole word, so one racing with a
// close retries against the new epoch. The one race this cannot see is an
// update stalled between its load and its swap for all 64 epochs (64 s with
// one-second windows) that then finds the very same word again (ABA): its
// request would be counted against the wrong window start.
type conc struct {
	x     atomic.Uint64
	bases [epochs]atomic.Int64 // window start per epoch, microseconds
}

const (
	epochs     = 64
	areaBits   = 40
	activeBits = 18
	activeMask = 1<<activeBits - 1
	areaMask   = 1<<areaBits - 1
)

func pack(epoch uint64, active uint64, area int64) uint64 {
	return epoch<<(areaBits+activeBits) | active<<areaBits | uint64(area)&areaMask
}

func unpack(x uint64) (epoch, active uint64, area int64) {
	return x >> (areaBits + activeBits), x >> areaBits & activeMask, int64(x<<(64-areaBits)) >> (64 - areaBits)
}

// add records a request beginning (delta 1) or ending (delta -1) at now.
func (c *conc) add(now int64, delta int) {
	for {
		x := c.x.Load()
		ep, n, a := unpack(x)
		t := now - c.bases[ep].Load()
		if delta > 0 {
			if n == activeMask {
				return // saturated: the average under-reports rather than wraps
			}
			n, a = n+1, a-t
		} else {
			if n == 0 {
				return
			}
			n, a = n-1, a+t
		}
		if c.x.CompareAndSwap(x, pack(ep, n, a)) {
			return
		}
	}
}

// active is the number of requests in flight now.
func (c *conc) active() int {
	_, n, _ := unpack(c.x.Load())
	return int(n)
}

// close ends the current window at now and returns the integral of the
// concurrency over it (microsecond-requests) and its length (microseconds).
// Only one goroutine may call it.
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
