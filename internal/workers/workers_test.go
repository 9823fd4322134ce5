package workers

import (
	"bytes"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The tests run in synctest bubbles: the fake clock moves the pool's
// retire timer, and synctest.Wait tells when every worker has finished
// what it was given and waits idle. No test runs in parallel with another,
// and every bubble ends with its workers gone (a bubble cannot end with a
// goroutine blocked in it), so the worker goroutines a stack dump shows
// are the running test's. The tests report failures with t.Errorf and go
// on to that end, rather than leave a worker behind with t.Fatal. A task
// that never runs leaves the bubble's goroutines all blocked, which
// synctest reports as a deadlock, failing the test rather than hanging it.

// fn is a task: the function Serve calls.
type fn func()

func (f fn) Serve() { f() }

// goid returns the calling goroutine's id, from its stack's header line.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	b = b[:bytes.IndexByte(b, ' ')]
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic("goroutine id: " + err.Error())
	}
	return id
}

// live returns the ids of the goroutines running a worker's loop.
func live() []uint64 {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var ids []uint64
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if !bytes.Contains(g, []byte("internal/workers.(*Pool[")) || !bytes.Contains(g, []byte("]).work(")) {
			continue
		}
		g = bytes.TrimPrefix(g, []byte("goroutine "))
		if i := bytes.IndexByte(g, ' '); i > 0 {
			if id, err := strconv.ParseUint(string(g[:i]), 10, 64); err == nil {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// atRest lets the fake clock run for 2*Idle, within which every worker
// idle now must exit, and fails the test if one is left (which it then
// ends, so that the bubble can close).
func atRest(t *testing.T, p *Pool[fn]) {
	t.Helper()
	time.Sleep(2*Idle + time.Nanosecond)
	synctest.Wait()
	if got := live(); len(got) != 0 {
		t.Errorf("workers %v still there 2*Idle after the last task, want none", got)
		p.StopIdle()
	}
}

// record is a task that sends the id of the goroutine serving it.
func record(ids chan<- uint64) fn { return func() { ids <- goid() } }

// TestReuse: a task given while a worker is idle runs on that worker, not
// on a new goroutine; a task given while every worker is busy runs on a
// new one, at once, beside the busy one.
func TestReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p Pool[fn]
		ids := make(chan uint64, 1)
		p.Run(record(ids))
		first := <-ids
		synctest.Wait() // the worker is idle
		p.Run(record(ids))
		if got := <-ids; got != first {
			t.Errorf("second task ran on goroutine %d, want the idle worker %d", got, first)
		}
		synctest.Wait()
		if got, want := live(), []uint64{first}; !slices.Equal(got, want) {
			t.Errorf("workers %v, want %v", got, want)
		}

		release := make(chan struct{})
		busy := make(chan uint64, 1)
		p.Run(func() { busy <- goid(); <-release })
		if got := <-busy; got != first {
			t.Errorf("blocking task ran on goroutine %d, want the idle worker %d", got, first)
		}
		p.Run(record(ids)) // the only worker is busy
		second := <-ids
		if second == first {
			t.Errorf("task given while the worker was busy ran on it (goroutine %d), want a new worker", second)
		}
		close(release)
		synctest.Wait()
		if got, want := live(), []uint64{min(first, second), max(first, second)}; !slices.Equal(got, want) {
			t.Errorf("workers %v, want %v", got, want)
		}
		atRest(t, &p)
	})
}

// TestServedOnce: tasks given from many goroutines at once, some blocking
// a while, are each served exactly once.
func TestServedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p Pool[fn]
		const givers, each = 8, 50
		var served [givers * each]atomic.Int32
		done := make(chan struct{}, givers*each)
		for g := range givers {
			go func() {
				for i := range each {
					k := g*each + i
					p.Run(func() {
						served[k].Add(1)
						if k%5 == 0 {
							time.Sleep(time.Millisecond)
						}
						done <- struct{}{}
					})
				}
			}()
		}
		for range givers * each {
			<-done
		}
		synctest.Wait()
		for k := range served {
			if n := served[k].Load(); n != 1 {
				t.Errorf("task %d served %d times, want once", k, n)
			}
		}
		atRest(t, &p)
	})
}

// TestIdleExit: a worker idle for less than Idle is still there, and one
// idle for twice Idle has exited, whenever it went idle relative to the
// others and to the pool's retiring; at rest no worker is left. Three
// workers go idle at different times and the fake clock is sampled every
// tenth of Idle.
func TestIdleExit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p Pool[fn]
		start := time.Now()
		busy := []time.Duration{Idle / 4, Idle + Idle/10, Idle + Idle/2}
		ids := make([]uint64, len(busy))
		got := make(chan struct{}, len(busy))
		for i, d := range busy {
			p.Run(func() { ids[i] = goid(); got <- struct{}{}; time.Sleep(d) })
		}
		for range busy {
			<-got
		}
		if distinct := slices.Compact(slices.Sorted(slices.Values(ids))); len(distinct) != len(busy) {
			t.Errorf("busy tasks ran on goroutines %v, want %d workers", ids, len(busy))
		}
		const step = Idle / 10
		for at := step; at <= 5*Idle; at += step {
			time.Sleep(time.Until(start.Add(at)))
			synctest.Wait()
			alive := live()
			for i, d := range busy {
				idle := at - d // how long worker i has been idle
				switch in := slices.Contains(alive, ids[i]); {
				case idle < Idle && !in:
					t.Errorf("at %v: worker %d gone after %v idle, want it kept for at least Idle (%v)", at, i, max(idle, 0), Idle)
				case idle > 2*Idle && in:
					t.Errorf("at %v: worker %d still there after %v idle, want it gone within 2*Idle (%v)", at, i, idle, 2*Idle)
				}
			}
		}
		if got := live(); len(got) != 0 {
			t.Errorf("workers %v left at rest, want none", got)
		}
	})
}

// TestKeptBusy: a worker given a task before it has been idle for Idle
// stays, however long the run of tasks goes on.
func TestKeptBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p Pool[fn]
		ids := make(chan uint64, 1)
		p.Run(record(ids))
		first := <-ids
		for i := range 10 {
			time.Sleep(Idle * 9 / 10)
			p.Run(record(ids))
			if got := <-ids; got != first {
				t.Errorf("task %d, %v after the first, ran on goroutine %d, want the worker %d that was never idle for Idle",
					i+2, time.Duration(i+1)*Idle*9/10, got, first)
				break
			}
		}
		atRest(t, &p)
	})
}

// TestStopIdle: StopIdle ends every idle worker at once and leaves a busy
// one to finish its task; that one then waits for the next task as
// before, and the pool serves tasks after StopIdle as before it.
func TestStopIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p Pool[fn]
		release := make(chan struct{})
		started := make(chan uint64, 3)
		for range 3 {
			p.Run(func() { started <- goid(); <-release })
		}
		var all []uint64
		for range 3 {
			all = append(all, <-started)
		}
		// Two finish and go idle; the third stays busy.
		release <- struct{}{}
		release <- struct{}{}
		synctest.Wait()
		alive := live()
		if len(alive) != 3 {
			t.Errorf("workers %v, want 3", alive)
		}
		p.StopIdle()
		synctest.Wait()
		left := live()
		if len(left) != 1 || !slices.Contains(all, left[0]) {
			t.Errorf("after StopIdle, workers %v, want the busy one of %v alone", left, all)
			close(release)
			atRest(t, &p)
			return
		}
		busyID := left[0]
		close(release) // the busy one finishes
		synctest.Wait()
		if got := live(); !slices.Equal(got, []uint64{busyID}) {
			t.Errorf("after its task, workers %v, want [%d]: StopIdle does not end a worker that was busy", got, busyID)
		}
		ids := make(chan uint64, 1)
		p.Run(record(ids))
		if got := <-ids; got != busyID {
			t.Errorf("task after StopIdle ran on goroutine %d, want the idle worker %d", got, busyID)
		}
		synctest.Wait() // idle again
		p.StopIdle()
		synctest.Wait()
		if got := live(); len(got) != 0 {
			t.Errorf("after a second StopIdle, workers %v, want none", got)
		}
		p.Run(record(ids))
		<-ids
		atRest(t, &p)
	})
}
