package otlp

import (
	"context"
	"sync"
	"time"
)

// Pusher pushes metrics at a fixed interval: it calls Collect and queues
// what it returns on an Exporter, as OpenTelemetry's periodic reader does.
// Its goroutine wakes once per interval and for nothing else; no Pusher,
// no timer. Create it with StartPusher.
type Pusher struct {
	e       *Exporter
	collect func(now time.Time) []byte
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// StartPusher starts pushing collect's requests to e every interval (which
// must be positive), the first one interval from now. collect runs on the
// Pusher's goroutine; it returns an encoded ExportMetricsServiceRequest,
// or nil for nothing to send.
func StartPusher(e *Exporter, interval time.Duration, collect func(now time.Time) []byte) *Pusher {
	p := &Pusher{e: e, collect: collect, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case now := <-t.C:
				if b := collect(now); b != nil {
					e.Enqueue(b)
				}
			}
		}
	}()
	return p
}

// Shutdown stops the interval, pushes once more (what happened since the
// last push would otherwise be lost) and shuts the Exporter down within
// ctx (Exporter.Shutdown). Later calls return nil.
func (p *Pusher) Shutdown(ctx context.Context) error {
	err := error(nil)
	p.once.Do(func() {
		close(p.stop)
		<-p.done
		if b := p.collect(time.Now()); b != nil {
			p.e.Enqueue(b)
		}
		err = p.e.Shutdown(ctx)
	})
	return err
}
