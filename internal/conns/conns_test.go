package conns

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// wait is how long a test waits for a channel that must close; far more
// than any run needs, so that only a lost close fails it.
const wait = 10 * time.Second

// closed reports whether ch is closed now.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func sorted(cs []int) []int {
	slices.Sort(cs)
	return cs
}

// TestAddRemove: the zero Set is ready; Add adds and List reports what is
// open, Remove takes it out, and removing what is not there changes
// nothing.
func TestAddRemove(t *testing.T) {
	var s Set[int]
	if got := s.List(); len(got) != 0 {
		t.Errorf("zero Set: List() = %v, want none", got)
	}
	if s.ShuttingDown() {
		t.Error("zero Set: ShuttingDown() = true, want false")
	}
	for c := range 3 {
		if !s.Add(c, 0) {
			t.Errorf("Add(%d, 0) = false, want true", c)
		}
	}
	if got, want := sorted(s.List()), []int{0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("List() = %v, want %v", got, want)
	}
	s.Remove(1)
	s.Remove(7)
	if got, want := sorted(s.List()), []int{0, 2}; !slices.Equal(got, want) {
		t.Errorf("after Remove(1), Remove(7): List() = %v, want %v", got, want)
	}
}

// TestAddMax: with max > 0, Add refuses a connection once the set holds
// max, and takes one again when one has been removed; max 0 sets no bound.
func TestAddMax(t *testing.T) {
	var s Set[int]
	for c := range 2 {
		if !s.Add(c, 2) {
			t.Fatalf("Add(%d, 2) with %d open = false, want true", c, c)
		}
	}
	if s.Add(2, 2) {
		t.Error("Add(2, 2) with 2 open = true, want false")
	}
	if got, want := sorted(s.List()), []int{0, 1}; !slices.Equal(got, want) {
		t.Errorf("List() = %v, want %v: a refused connection is not in the set", got, want)
	}
	s.Remove(0)
	if !s.Add(2, 2) {
		t.Error("Add(2, 2) after a Remove = false, want true")
	}
	for c := 3; c < 1000; c++ {
		if !s.Add(c, 0) {
			t.Fatalf("Add(%d, 0) = false, want true: max 0 is no bound", c)
		}
	}
}

// TestShutdownEmpty: Shutdown of a set with no connection returns none and
// a channel closed at once; from then on Add refuses, and ShuttingDown
// reports it.
func TestShutdownEmpty(t *testing.T) {
	var s Set[int]
	open, done := s.Shutdown()
	if len(open) != 0 {
		t.Errorf("Shutdown() returned %v, want none", open)
	}
	if !closed(done) {
		t.Error("Shutdown() of an empty set: channel not closed")
	}
	if !s.ShuttingDown() {
		t.Error("ShuttingDown() = false after Shutdown, want true")
	}
	if s.Add(1, 0) {
		t.Error("Add after Shutdown = true, want false")
	}
}

// TestShutdownDrains: Shutdown returns the connections open, busy or
// idle alike, refuses new ones, and its channel closes when the last of
// them is removed, not before.
func TestShutdownDrains(t *testing.T) {
	var s Set[int]
	s.Add(1, 0) // an idle connection
	s.Add(2, 0) // a busy one
	open, done := s.Shutdown()
	if got, want := sorted(open), []int{1, 2}; !slices.Equal(got, want) {
		t.Errorf("Shutdown() returned %v, want %v", got, want)
	}
	if closed(done) {
		t.Fatal("channel closed with two connections open")
	}
	if s.Add(3, 0) {
		t.Error("Add after Shutdown = true, want false")
	}
	s.Remove(1) // the idle one closes at once
	if closed(done) {
		t.Fatal("channel closed with one connection open")
	}
	if got, want := s.List(), []int{2}; !slices.Equal(got, want) {
		t.Errorf("List() = %v, want %v", got, want)
	}
	s.Remove(2) // the busy one ends its last stream
	if !closed(done) {
		t.Error("channel not closed once the last connection was removed")
	}
	if s.Add(4, 0) {
		t.Error("Add after the set drained = true, want false")
	}
}

// TestClose: Close refuses new connections and returns those open; a
// Shutdown's channel still closes when they are removed after Close (as an
// engine's Shutdown closes what is left when its context is done, and
// waits no more).
func TestClose(t *testing.T) {
	var s Set[int]
	s.Add(1, 0)
	s.Add(2, 0)
	_, done := s.Shutdown()
	if got, want := sorted(s.Close()), []int{1, 2}; !slices.Equal(got, want) {
		t.Errorf("Close() = %v, want %v", got, want)
	}
	if !s.ShuttingDown() || s.Add(3, 0) {
		t.Error("after Close: ShuttingDown() false or Add accepted, want refused")
	}
	s.Remove(1)
	s.Remove(2)
	if !closed(done) {
		t.Error("Shutdown's channel not closed once the connections Close returned were removed")
	}

	var c Set[int]
	c.Add(1, 0)
	if got := c.Close(); !slices.Equal(got, []int{1}) {
		t.Errorf("Close() without Shutdown = %v, want [1]", got)
	}
	if c.Add(2, 0) {
		t.Error("Add after Close = true, want false")
	}
}

// TestShutdownTwice: a second Shutdown while the first waits returns the
// connections still open, and both channels close once the last of them
// is removed: each caller is told that none is left.
func TestShutdownTwice(t *testing.T) {
	var s Set[int]
	s.Add(1, 0)
	s.Add(2, 0)
	_, first := s.Shutdown()
	s.Remove(1)
	open, second := s.Shutdown()
	if !slices.Equal(open, []int{2}) {
		t.Errorf("second Shutdown() returned %v, want [2]", open)
	}
	if closed(first) || closed(second) {
		t.Fatal("a channel closed with a connection open")
	}
	s.Remove(2)
	if !closed(first) {
		t.Error("first Shutdown's channel not closed once the set drained")
	}
	if !closed(second) {
		t.Error("second Shutdown's channel not closed once the set drained")
	}
}

// TestConcurrent: connections added and removed from many goroutines while
// Shutdown runs: no Add succeeds after Shutdown returned, and Shutdown's
// channel closes once every connection added has been removed, the
// goroutines' first ones, open when Shutdown began, last.
func TestConcurrent(t *testing.T) {
	var s Set[int]
	const workers, each = 8, 200
	var wg sync.WaitGroup
	start := make(chan struct{})
	shut := make(chan struct{})
	lateAdds := make(chan int, workers*each)
	for w := range workers {
		if !s.Add(-1-w, 0) {
			t.Fatalf("Add(%d, 0) = false, want true", -1-w)
		}
		wg.Go(func() {
			defer s.Remove(-1 - w)
			<-start
			for i := range each {
				c := w*each + i
				after := closed(shut)
				if !s.Add(c, 0) {
					continue
				}
				if after {
					lateAdds <- c
				}
				if i%3 != 0 {
					s.List()
				}
				s.Remove(c)
			}
		})
	}
	close(start)
	_, done := s.Shutdown()
	close(shut)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(wait):
		t.Fatalf("goroutines adding and removing not done after %v", wait)
	}
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatalf("Shutdown's channel not closed %v after every connection was removed; open: %v", wait, s.List())
	}
	close(lateAdds)
	for c := range lateAdds {
		t.Errorf("Add(%d) succeeded after Shutdown returned", c)
	}
	if got := s.List(); len(got) != 0 {
		t.Errorf("List() = %v, want none", got)
	}
}
