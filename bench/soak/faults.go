package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/big"
	"net"
	"sync"
	"time"
)

// upstream is the upstream child: the soak binary itself with upstreamEnv
// set, started again after each kill on the same address.
type upstream struct {
	procs *children
	exe   string
	env   []string
	addr  string
	log   io.Writer

	cur *child // owned by whoever holds injector.gate
}

// start starts the upstream and waits (at most 10 s) until it accepts
// connections.
func (u *upstream) start(ctx context.Context) error {
	c, err := u.procs.start("upstream", u.exe, nil, append(u.env, upstreamEnv+"="+u.addr), u.log)
	if err != nil {
		return err
	}
	u.cur = c
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := waitListening(ctx, u.addr); err != nil {
		return fmt.Errorf("upstream (pid %d): %w", c.pid(), err)
	}
	return nil
}

// injector runs the faults that are not clients: the upstream killed and
// started again, and the TLS pair rotated. A fault holds gate from start to
// end; the phase loop holds it while the soak is at rest, so that no fault
// falls in a rest and a phase ends with the upstream up.
type injector struct {
	cfg     *config
	rec     *recorder
	up      *upstream
	is      *issuer
	tlsAddr string // queue up-h1's TLS address
	fail    context.CancelCauseFunc
	gate    sync.Mutex
	kills   int // owned by gate holders
}

// killLoop kills the upstream every cfg.killEvery, the first time half a
// period after start, until ctx ends. Every cfg.longEvery-th kill keeps it
// down cfg.longDown instead of cfg.down. A restart that fails ends the run
// (the soak cannot go on without an upstream).
func (in *injector) killLoop(ctx context.Context) {
	if in.cfg.killEvery <= 0 {
		return
	}
	next := time.Now().Add(in.cfg.killEvery / 2)
	for {
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := in.killOnce(ctx); err != nil {
			in.fail(err)
			return
		}
		// A kill delayed by a rest is not made up for.
		for next = next.Add(in.cfg.killEvery); time.Until(next) < 0; next = next.Add(in.cfg.killEvery) {
		}
	}
}

// killOnce SIGKILLs the upstream by its PID, keeps it down for the
// downtime, and starts it again.
func (in *injector) killOnce(ctx context.Context) error {
	in.gate.Lock()
	defer in.gate.Unlock()
	if ctx.Err() != nil {
		return nil
	}
	in.kills++
	down := in.cfg.down
	if in.cfg.longEvery > 0 && in.kills%in.cfg.longEvery == 0 {
		down = in.cfg.longDown
	}
	w := in.rec.kill(down)
	if err := in.up.cur.kill(); err != nil {
		return err
	}
	in.rec.died(w) // kill waits until the process is reaped
	if err := pause(ctx, down); err != nil {
		return nil // the soak is stopping
	}
	if err := in.up.start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("restart the upstream: %w", err)
	}
	in.rec.up(w)
	return nil
}

// rotateLoop issues a new TLS pair every cfg.rotateEvery until ctx ends,
// and checks that queue serves it: new handshakes, one every 1.1 s (queue
// re-reads the files on a handshake a second or more after its last
// check), at most 5 of them. A pair queue never served is an "other"
// failure of proto cert.
func (in *injector) rotateLoop(ctx context.Context) {
	if in.cfg.rotateEvery <= 0 {
		return
	}
	t := time.NewTicker(in.cfg.rotateEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := in.rotateOnce(ctx); err != nil {
			in.fail(err)
			return
		}
	}
}

func (in *injector) rotateOnce(ctx context.Context) error {
	in.gate.Lock()
	defer in.gate.Unlock()
	if ctx.Err() != nil {
		return nil
	}
	start := time.Now()
	serial, err := in.is.issue()
	if err != nil {
		return fmt.Errorf("rotate the certificate: %w", err)
	}
	var got *big.Int
	for try := range 5 {
		if try > 0 {
			if err := pause(ctx, 1100*time.Millisecond); err != nil {
				return nil
			}
		}
		if got, err = servedSerial(ctx, in.tlsAddr, in.is.clientConfig("h2", "http/1.1")); err == nil && got.Cmp(serial) == 0 {
			in.rec.done(pCert, start, nil)
			return nil
		}
	}
	if err == nil {
		err = fmt.Errorf("queue still serves certificate %v, not the new %v", got, serial)
	}
	if ctx.Err() == nil {
		in.rec.done(pCert, start, fmt.Errorf("rotation to certificate %v: %w", serial, err))
	}
	return nil
}

// servedSerial makes a new TLS connection to addr and returns the serial
// number of the certificate the server presented.
func servedSerial(ctx context.Context, addr string, cfg *tls.Config) (*big.Int, error) {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
}
