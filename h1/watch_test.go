package h1

import "testing"

// TestWatchRounds: past maxPeeks a tick, the watcher still peeks at every
// connection whose request is in a handler, each within the ticks a round
// takes, whatever order the map of connections gives: no connection is
// left out for ever.
func TestWatchRounds(t *testing.T) {
	t.Parallel()
	const n = 3*maxPeeks + 10
	s := &Server{conns: map[*conn]struct{}{}}
	s.ticks.Store(10) // every request below has been in its handler for a while
	conns := make([]*conn, n)
	for i := range conns {
		c := &conn{} // no socket: peerGone reports false
		c.watch.Store(true)
		conns[i] = c
		s.conns[c] = struct{}{}
	}
	idle := &conn{} // not in a handler: never peeked at
	s.conns[idle] = struct{}{}

	const round = (n+maxPeeks-1)/maxPeeks + 1 // ticks a round takes at most
	const ticks = 6 * round
	peeks := make(map[*conn]int)
	last := make(map[*conn]int)
	for tick := 1; tick <= ticks; tick++ {
		before := make(map[*conn]uint32, n)
		for _, c := range conns {
			before[c] = c.peekRound
		}
		s.watch()
		taken := 0
		for _, c := range conns {
			if c.peekRound != before[c] {
				taken++
				peeks[c]++
				// Peeked at first in one round and last in the next.
				if gap := tick - last[c]; gap > 2*round {
					t.Errorf("tick %d: a connection last peeked at tick %d, more than two rounds (%d ticks) ago", tick, last[c], 2*round)
				}
				last[c] = tick
			}
		}
		if taken > maxPeeks {
			t.Fatalf("tick %d peeked at %d connections, over maxPeeks (%d)", tick, taken, maxPeeks)
		}
	}
	for i, c := range conns {
		if gap := ticks - last[c]; gap > 2*round {
			t.Errorf("connection %d last peeked at tick %d of %d", i, last[c], ticks)
		}
		if peeks[c] < ticks/round-1 {
			t.Errorf("connection %d peeked at %d times in %d ticks, want at least %d", i, peeks[c], ticks, ticks/round-1)
		}
	}
	if idle.peekRound != 0 {
		t.Errorf("a connection with no request in a handler was peeked at")
	}
}
