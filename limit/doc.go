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
// newcomer cannot take it first.
//
// It deliberately does not count requests for the autoscaler (package stats
// does, and counts queued requests as active), change its capacity at run
// time (Knative's breaker can; queue's capacity is fixed at start), give any
// request priority, or answer probes (package drain does; the chain package
// lets requests with K-Kubelet-Probe bypass the Limiter).
//
// A Limiter is safe for concurrent use. Taking a free slot and giving it back
// while nobody waits are one compare-and-swap each on a 64-bit word that
// packs the number of slots held and the number of waiters, with no lock and
// no allocation (BenchmarkLimiter/uncontended and /parallel-free,
// TestAcquireReleaseAllocs). A full queue is refused from that word too.
// Only a request that has to wait takes a mutex, allocates its place in the
// queue and, when MaxWait is set, a timer; a Release that hands its slot to
// a waiter takes the same mutex.
package limit
