package clock

import "time"

// Deadline returns now+d rounded up to a 16th of d (at least a millisecond,
// at most a second), so that consecutive requests share a deadline and a
// connection skips the timer update that setting a new one costs. The
// arithmetic is on Unix nanoseconds: Time.Add and Time.Truncate cost three
// times as much, and a deadline needs no monotonic reading.
func Deadline(now time.Time, d time.Duration) time.Time {
	g := int64(min(max(d/16, time.Millisecond), time.Second))
	n := now.UnixNano() + int64(d) + g
	return time.Unix(0, n-n%g)
}
