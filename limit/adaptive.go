package limit

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// The adaptive limit's constants. Each was chosen with the simulated
// upstream of adaptive_test.go (latency flat up to a knee of 8 in flight,
// then growing in proportion, +-20% jitter, driven at twice its
// throughput at the knee; 4 runs a setting) and checked with bench/adaptive
// against a real one; docs/decisions.md D26 has the figures.
const (
	// MinLimit is the lowest the adaptive limit goes, and the limit it
	// pins while it measures the upstream's no-load round trip (3 is the
	// start, too). Low enough that the measurement sees the upstream
	// unloaded; high enough that measuring is cheap: a measurement takes
	// windowSamples/MinLimit+1 round trips in which an upstream with a
	// knee of 8 serves 3/8 of what it could, about 7 round trips' worth
	// of its throughput lost; pinning 1 would lose 29, four times as
	// much.
	MinLimit = 3

	// MaxLimit is the highest the adaptive limit goes when Config.Capacity
	// sets no ceiling: far above what one container serves at once, so
	// that it only bounds a controller fooled by an upstream whose latency
	// never rises (one that fails every request at once).
	MaxLimit = 1000
)

const (
	// windowSamples is the number of round trips a window needs before
	// it closes (it also lasts minWindow at least). Only requests that
	// took their slot after the window opened count, so a window judges
	// the limit it was opened with and lasts at least a round trip. With
	// 16 the limit ranged over 8..13 at the knee of 8, and under
	// heavier-tailed jitter one run in four fell to 5 and took 57 s to
	// come back; 64 settled a little tighter (8..11) but twice as slowly
	// (3.8 s against 2 s at 50 ms a round trip). 32: 8..12 within 2 s.
	windowSamples = 32

	// minWindow keeps windows from closing faster than that: against an
	// upstream that answers in microseconds, 32 round trips come within a
	// fraction of a millisecond and their median is mostly the
	// scheduler's noise. It matters only below about 0.3 ms a round trip.
	minWindow = 10 * time.Millisecond

	// rttQuantile is the round trip a window is judged by: its median,
	// which a few very slow requests (a long poll, a websocket holding its
	// slot for hours, a GC pause) do not move, where they would move a
	// mean. The no-load round trip is the median of its measuring window
	// too, so that like is compared with like.
	rttQuantile = 0.5

	// tolerance is how far above the no-load round trip a window's may be
	// before the limit falls: the gradient is minRTT*(1+tolerance)/rtt.
	// It absorbs sampling noise and the histogram's 3%. At 0.05 noise cut
	// the limit below the knee (to 7) under heavier-tailed jitter; at 0.2
	// it settled higher (up to 12) and the upstream's p99 rose to 1.48x
	// its p99 at the knee, against 1.35x at 0.1.
	tolerance = 0.1

	// minGradient bounds how fast the limit falls: at most to half in one
	// window, so that one slow window does not throw away what many found.
	minGradient = 0.5

	// growth is the headroom added to limit*gradient each window, as a
	// share of it (at least 1): the limit climbs by 10% a window while the
	// round trip stays flat (from MinLimit to 100 in 37 windows), and
	// settles about that much past the point where it rises. A square
	// root of the limit instead (a larger share of small limits) settled
	// at 10..14 for the knee of 8 and put the client's p99 at 1.87..2.04x;
	// 0.2 at 9..12 and 1.72..1.83x; 0.05 did as well as 0.1 but climbs
	// half as fast.
	growth = 0.1

	// idleShare: a window in which the most slots held at once stayed
	// under this share of the limit shows the application's quiet, not the
	// upstream's capacity: the limit does not rise on it (it may fall), so
	// it cannot climb 10% a window to MaxLimit through a quiet night and
	// let the morning's burst through unchecked (TestAdaptiveQuiet).
	idleShare = 0.5

	// probeInterval is how often the no-load round trip is measured again,
	// give or take probeJitter, so that the replicas of a service do not
	// all pin their limits at once. An upstream that got slower for good
	// (a new version, a slower dependency) has its limit pulled toward
	// MinLimit until the next measurement (TestAdaptiveSlowerUpstream);
	// a measurement costs an upstream at its knee about 7 round trips of
	// throughput (MinLimit): 0.2% of it at 10 ms a round trip, 1.2% at
	// 50 ms.
	probeInterval = 30 * time.Second
	probeJitter   = 0.1

	// WaitShare is the adaptive wait bound, as a share of the no-load
	// round trip: a request that gets no slot within half a round trip
	// gets 503, so that a request served waited at most that. The queue is
	// as deep as the limit, which alone bounds a wait to about one round
	// trip, but a whole round trip of wait put the client's p99 (wait
	// included) at 2.01..2.13x the upstream's p99 at the knee; half of one
	// at 1.60..1.72x; a quarter at 1.39..1.57x, for up to 2% fewer
	// requests served.
	WaitShare = 0.5
)

// controller is the adaptive limit's gradient controller. It has no
// goroutine and no timer: every ReleaseSince adds its round trip to the
// current window's histogram (atomics, no lock), and the release that
// finds the window complete takes mu and computes the next limit.
//
// The round trip of the requests holding a slot is compared with the
// upstream's no-load round trip (minRTT), measured by pinning the limit
// at MinLimit for one window at the start and every probeInterval. The
// next limit is limit*gradient + headroom, gradient =
// minRTT*(1+tolerance)/rtt clamped to [minGradient, 1], headroom = growth
// of it: while the round trip stays flat the limit climbs by growth a
// window; past the upstream's knee the round trip rises and the limit
// falls back near the knee.
type controller struct {
	epoch   time.Time     // the monotonic zero of the durations below
	ceiling float64       // the highest limit: Config.Capacity or MaxLimit
	maxWait time.Duration // Config.MaxWait; 0: none

	// winStart is when the current window opened, in nanoseconds since
	// epoch: a request that took its slot before then is not counted.
	winStart atomic.Int64
	// cur picks the histogram of the current window out of hist; the
	// other is the last window's, cleared when the window closed.
	cur  atomic.Uint32
	hist [2]histogram
	// peak is the most slots held at once that a release of the window
	// saw, for idleShare.
	peak atomic.Uint64

	mu        sync.Mutex    // held by the release that closes a window
	limit     float64       // under mu: the gradient's limit, unrounded
	minRTT    time.Duration // under mu: 0 until measured
	probing   bool          // under mu: the window measures minRTT
	nextProbe time.Duration // under mu: since epoch
	windows   int           // under mu: windows closed, for tests
}

func newAdaptive(cfg Config) (*Limiter, error) {
	switch {
	case cfg.Capacity < 0 || cfg.Capacity > 0 && cfg.Capacity < MinLimit:
		return nil, fmt.Errorf("limit: capacity %d: must be 0 or at least %d with Adaptive", cfg.Capacity, MinLimit)
	case cfg.Capacity > MaxCapacity:
		return nil, fmt.Errorf("limit: capacity %d: must be at most %d", cfg.Capacity, MaxCapacity)
	case cfg.QueueDepth != 0:
		return nil, fmt.Errorf("limit: queue depth %d: must be 0 with Adaptive, whose queue follows its limit", cfg.QueueDepth)
	case cfg.MaxWait < 0:
		return nil, fmt.Errorf("limit: max wait %v: must be >= 0", cfg.MaxWait)
	}
	ceiling := MaxLimit
	if cfg.Capacity > 0 {
		ceiling = cfg.Capacity
	}
	c := &controller{
		epoch:   time.Now(),
		ceiling: float64(ceiling),
		maxWait: cfg.MaxWait,
		limit:   MinLimit,
		probing: true,
	}
	l := &Limiter{ctl: c}
	l.capacity.Store(MinLimit)
	l.depth.Store(MinLimit)
	l.maxWait.Store(int64(cfg.MaxWait))
	return l, nil
}

// ReleaseSince is Release for a slot taken at start: in adaptive mode it
// first gives the controller the slot's round trip, time.Since(start), and
// may close the controller's window and set the next limit. In fixed mode
// it is Release. start must be a time.Now reading (with its monotonic
// clock) taken once Acquire had returned nil.
//
// It allocates nothing and takes no lock but the controller's, once a
// window (BenchmarkAdaptive, TestAdaptiveAllocs).
func (l *Limiter) ReleaseSince(start time.Time) {
	if c := l.ctl; c != nil {
		c.sample(l, start)
	}
	l.Release()
}

// sample counts one round trip; the caller still holds its slot.
func (c *controller) sample(l *Limiter, start time.Time) {
	now := time.Since(c.epoch)
	began := start.Sub(c.epoch)
	if int64(began) < c.winStart.Load() {
		return // it began under the limit of an earlier window
	}
	h := &c.hist[c.cur.Load()&1]
	h.add(now - began)
	held, _ := unpack(l.state.Load())
	for p := c.peak.Load(); held > p && !c.peak.CompareAndSwap(p, held); p = c.peak.Load() {
	}
	if h.n.Load() >= windowSamples && int64(now)-c.winStart.Load() >= int64(minWindow) && c.mu.TryLock() {
		c.advance(l, now)
		c.mu.Unlock()
	}
}

// advance closes the current window and sets the next limit. c.mu must be
// held. Another release may have closed the window between the caller's
// look and its lock; then advance does nothing.
func (c *controller) advance(l *Limiter, now time.Duration) {
	i := c.cur.Load() & 1
	h := &c.hist[i]
	if h.n.Load() < windowSamples || int64(now)-c.winStart.Load() < int64(minWindow) {
		return
	}
	rtt := max(h.quantile(rttQuantile), 1)
	peak := c.peak.Swap(0)
	c.windows++
	limit := MinLimit
	switch {
	case c.probing:
		c.minRTT = rtt
		c.probing = false
		c.nextProbe = now + time.Duration(float64(probeInterval)*(1+probeJitter*(2*rand.Float64()-1)))
		limit = int(c.limit)
	default:
		c.limit = c.next(rtt, peak)
		if now >= c.nextProbe {
			c.probing = true
		} else {
			limit = int(c.limit)
		}
	}
	wait := time.Duration(float64(c.minRTT) * WaitShare)
	if c.maxWait > 0 && (wait == 0 || wait > c.maxWait) {
		wait = c.maxWait
	}
	l.setLimit(uint64(limit), wait)
	// The window opens once the limit is in force, so that a measuring
	// window counts only requests that ran with at most MinLimit in
	// flight. Round trips still being added to the old histogram are
	// lost with it.
	c.winStart.Store(int64(time.Since(c.epoch)))
	c.cur.Store(i ^ 1)
	h.reset()
}

// next is the limit after a window whose round trip was rtt and in which
// at most peak slots were held at once.
func (c *controller) next(rtt time.Duration, peak uint64) float64 {
	g := float64(c.minRTT) * (1 + tolerance) / float64(rtt)
	g = min(max(g, minGradient), 1)
	next := c.limit * g
	next += max(next*growth, 1)
	if float64(peak) < c.limit*idleShare {
		next = min(next, c.limit)
	}
	return min(max(next, MinLimit), c.ceiling)
}

// setLimit makes n the capacity and the queue depth, and wait the wait
// bound of requests that queue from now on. Slots the new limit frees go
// to the waiters at once, the oldest first; a lower limit takes effect as
// slots are released (Release).
func (l *Limiter) setLimit(n uint64, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.depth.Store(n)
	l.maxWait.Store(int64(wait))
	l.setCapacity(n)
}

// The histogram's buckets: durations in nanoseconds below 2^subBits have a
// bucket each; above, each power of two is cut into 2^subBits buckets, so
// a bucket is at most 1/16 (6%) of its values wide and its middle is
// within 3% of them. Durations of 2^maxOctave ns (18 minutes) or more
// share the last bucket.
const (
	subBits   = 4
	subCount  = 1 << subBits
	maxOctave = 40
	nBuckets  = (maxOctave - subBits + 1) << subBits
)

// histogram counts round trips in logarithmic buckets with atomics: adding
// one is two atomic adds and no lock, and a window's quantile is a scan of
// the buckets by the one release that closes it.
type histogram struct {
	n atomic.Uint32 // round trips added since the last reset
	b [nBuckets]atomic.Uint32
}

func (h *histogram) add(d time.Duration) {
	h.b[bucketOf(int64(d))].Add(1)
	h.n.Add(1)
}

func (h *histogram) reset() {
	for i := range h.b {
		h.b[i].Store(0)
	}
	h.n.Store(0)
}

// quantile returns the middle of the bucket that holds the q quantile of
// the round trips counted, or 0 for none.
func (h *histogram) quantile(q float64) time.Duration {
	var counts [nBuckets]uint32
	var total uint64
	for i := range h.b {
		counts[i] = h.b[i].Load()
		total += uint64(counts[i])
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	rank = max(rank, 1)
	var seen uint64
	for i, n := range counts {
		seen += uint64(n)
		if seen >= rank {
			return time.Duration(bucketValue(i))
		}
	}
	return time.Duration(bucketValue(nBuckets - 1))
}

// bucketOf returns the bucket of a duration of d nanoseconds.
func bucketOf(d int64) int {
	if d < subCount {
		return int(max(d, 0))
	}
	d = min(d, 1<<maxOctave-1)
	e := bits.Len64(uint64(d)) - 1 // 2^e <= d < 2^(e+1), e >= subBits
	m := int(d>>(e-subBits)) & (subCount - 1)
	return (e-subBits+1)<<subBits | m
}

// bucketValue returns the middle of bucket i, in nanoseconds.
func bucketValue(i int) int64 {
	if i < subCount {
		return int64(i)
	}
	e := i>>subBits + subBits - 1
	m := int64(i & (subCount - 1))
	width := int64(1) << (e - subBits)
	return (subCount+m)*width + width/2
}
