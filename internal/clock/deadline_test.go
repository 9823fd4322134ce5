package clock

import (
	"testing"
	"time"
)

// TestDeadline: a deadline is at least d away, at most d plus its grain
// (a 16th of d, from a millisecond to a second), on the grain, and the
// same for two times within one grain, so that setting it again is
// skipped.
func TestDeadline(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 25, 21, 0, 0, 123456789, time.UTC)
	for _, d := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 10 * time.Second, 5 * time.Minute} {
		g := min(max(d/16, time.Millisecond), time.Second)
		for _, off := range []time.Duration{0, 1, g / 3, g - 1, g, 7*g + 5} {
			now := base.Add(off)
			got := Deadline(now, d)
			if got.Before(now.Add(d)) || got.After(now.Add(d+g)) {
				t.Errorf("Deadline(%v, %v) = %v, want within [now+d, now+d+%v]", now, d, got, g)
			}
			if got.UnixNano()%int64(g) != 0 {
				t.Errorf("Deadline(%v, %v) = %v, not on a %v grain", now, d, got, g)
			}
		}
		start := time.Unix(0, base.UnixNano()/int64(g)*int64(g)) // a grain's start
		a := Deadline(start, d)
		if b := Deadline(start.Add(g-1), d); a != b {
			t.Errorf("Deadline(%v): %v and %v within one grain", d, a, b)
		}
	}
}
