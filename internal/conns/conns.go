// Package conns is the set of open connections that a multiplexing engine
// (h2, h3) keeps for its Shutdown and Close: connections are added as they
// come and removed as they end; Shutdown refuses new ones, hands back
// those open to be drained, and tells when the last of them has ended.
package conns

import "sync"

// Set is a set of connections of type C. The zero Set is ready; it is
// safe for concurrent use.
type Set[C comparable] struct {
	mu       sync.Mutex
	conns    map[C]struct{}
	shutdown bool
	drained  chan struct{} // closed when the set empties after Shutdown began
}

// Add adds c, unless Shutdown or Close began or the set holds max
// connections already (max 0: no bound). It reports whether c was added.
func (s *Set[C]) Add(c C, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown || max > 0 && len(s.conns) >= max {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[C]struct{})
	}
	s.conns[c] = struct{}{}
	return true
}

// Remove removes c; the last one removed after Shutdown began closes the
// channel Shutdown returned.
func (s *Set[C]) Remove(c C) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if len(s.conns) == 0 && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

// ShuttingDown reports whether Shutdown or Close began.
func (s *Set[C]) ShuttingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdown
}

// Shutdown refuses new connections from now on and returns those open,
// and a channel closed once none of them is left (at once when none is).
// A second call while connections are left returns the first one's
// channel, so that no caller waits on a channel nobody closes.
func (s *Set[C]) Shutdown() ([]C, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown = true
	if len(s.conns) == 0 {
		done := make(chan struct{})
		close(done)
		return s.list(), done
	}
	if s.drained == nil {
		s.drained = make(chan struct{})
	}
	return s.list(), s.drained
}

// Close refuses new connections from now on and returns those open.
func (s *Set[C]) Close() []C {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown = true
	return s.list()
}

// List returns the connections open now.
func (s *Set[C]) List() []C {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list()
}

func (s *Set[C]) list() []C {
	conns := make([]C, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}
