// Package limit bounds the number of requests in flight to the upstream and
// the number that may wait for a slot, as Knative's queue-proxy breaker does
// for containerConcurrency (docs/contract.md section 2, step 2).
//
// A [Limiter] has Capacity slots. [Limiter.Acquire] takes one at once when
// one is free; otherwise it waits in a bounded queue of QueueDepth, until a
// slot is handed to it, its context is done, or MaxWait passes. A full queue
// fails at once with [ErrQueueFull]; a wait that runs out of time fails with
// [ErrQueueTimeout]. Both errors have an Unavailable method that reports
// true, which proxy.StatusFor maps to 503. The package writes no response:
// the chain package puts a Limiter on the request path, calls Acquire and
// Release around the rest of the chain, and hands an error to the proxy's
// one writer of error responses (proxy.Proxy.Fail), which answers 503, or
// nothing to a client that went away.
//
// Waiters get slots in the order they arrived: a released slot is handed
// straight to the oldest of them and never becomes free in between, so a
// newcomer cannot take it first. While a limiter is shed ([Limiter.Shed],
// by package overload while the CPU quota binds) its limit is lower and
// the newest waiter gets the slot first, but for one slot in [OldShare],
// which goes to the oldest waiter that has waited under [OldAge].
//
// # Adaptive mode
//
// With Config.Adaptive the capacity is not fixed but found from the
// upstream's latency (--concurrency auto; docs/decisions.md D26), the way
// a gradient controller finds it: the round trips of the requests holding
// a slot, which the caller hands to [Limiter.ReleaseSince], are gathered
// in windows of at least 32; the median of a window is compared with the
// upstream's no-load round trip, measured at the start and every 30 s by
// pinning the limit at [MinLimit] for one window; and the next limit is
// limit*gradient plus 10% of it, the gradient being
// minRTT*1.1/median clamped to [0.5, 1], the limit clamped to
// [MinLimit, MaxLimit or Capacity]. While the round trip stays flat the
// limit climbs 10% a window; once it rises past the upstream's knee it
// falls back to about the knee. The controller has no goroutine and no
// timer: the release that completes a window computes the next limit.
// The queue is as deep as the limit, and a request waits for a slot at
// most WaitShare (half) of the no-load round trip (and MaxWait), so that
// the requests served are not slowed by more than that: the ones that
// would be get 503 at once, for another replica to serve.
//
// It deliberately does not count requests for the autoscaler (package stats
// does, and counts queued requests as active), give any request priority,
// or answer probes (package drain does; the chain package lets requests
// with K-Kubelet-Probe bypass the Limiter). Its capacity changes at run
// time only in adaptive mode and while it is shed.
//
// A Limiter is safe for concurrent use. Taking a free slot and giving it back
// while nobody waits are one compare-and-swap each on a 64-bit word that
// packs the number of slots held and the number of waiters, with no lock and
// no allocation (BenchmarkLimiter/uncontended and /parallel-free,
// TestAcquireReleaseAllocs). A full queue is refused from that word too.
// Only a request that has to wait takes a mutex and its place in the queue
// (recycled, with its channel); a Release that hands its slot to a waiter
// takes the same mutex. MaxWait is kept by one timer per fixed limiter,
// armed for the oldest waiter's deadline, not by a timer per waiter
// (the adaptive limit, whose wait bound moves, arms one per waiter). The capacity is an atomic word that the
// fast path loads, which costs the fixed mode nothing measurable
// (BenchmarkLimiter/uncontended, 14 ns before and after). In adaptive mode
// ReleaseSince adds two atomic adds and a clock reading to each release,
// and the release that closes a window takes the controller's mutex with
// TryLock and then the queue's to set the limit (BenchmarkAdaptive: about
// 115 ns and no allocation for Acquire, time.Now and ReleaseSince
// together).
package limit
