// Package workers runs the handlers of queue's multiplexing engines (h2,
// h3) on goroutines that outlive one stream: a worker that finished a
// stream waits for the next one, and one idle for Idle exits (within twice
// that). Under load a stream thus costs a goroutine switch, not a new
// goroutine and the copies that grow its stack; at rest no worker is left.
package workers

import (
	"sync"
	"time"

	"github.com/queue-dev/queue/internal/gostack"
)

// Task is one stream's work.
type Task interface {
	Serve()
}

// Idle is how long a worker waits for another stream before it exits.
const Idle = time.Second

// Pool is a set of workers for tasks of type T. The zero Pool is ready.
type Pool[T Task] struct {
	mu    sync.Mutex
	idle  []*worker[T] // last idled at the end
	timer *time.Timer
	tick  uint64 // retire's runs: a clock with no clock read per task
}

type worker[T Task] struct {
	ch   chan T
	last uint64 // the retire tick it went idle in
	stop bool
}

// Run serves t on an idle worker, or on a new one.
func (p *Pool[T]) Run(t T) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.ch <- t
		return
	}
	p.mu.Unlock()
	w := &worker[T]{ch: make(chan T, 1)}
	go p.work(w, t)
}

func (p *Pool[T]) work(w *worker[T], t T) {
	gostack.Grow()
	for {
		t.Serve()
		p.mu.Lock()
		w.last = p.tick
		p.idle = append(p.idle, w)
		if p.timer == nil {
			p.timer = time.AfterFunc(Idle, p.retire)
		}
		p.mu.Unlock()
		t = <-w.ch
		if w.stop {
			return
		}
	}
}

// retire runs every Idle while workers are idle, and ends those idle since
// before its last run (between one and two periods), oldest first.
func (p *Pool[T]) retire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	cut := p.tick
	p.tick++
	n := 0
	for n < len(p.idle) && p.idle[n].last < cut {
		p.idle[n].end()
		n++
	}
	p.idle = append(p.idle[:0], p.idle[n:]...)
	clear(p.idle[len(p.idle):cap(p.idle)])
	if len(p.idle) > 0 {
		p.timer.Reset(Idle)
	} else {
		p.timer = nil
	}
}

// end tells an idle worker to exit: it is woken with the zero T and the
// stop mark set before.
func (w *worker[T]) end() {
	w.stop = true
	var zero T
	w.ch <- zero
}

// StopIdle ends every idle worker.
func (p *Pool[T]) StopIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.idle {
		w.end()
	}
	clear(p.idle)
	p.idle = p.idle[:0]
}
