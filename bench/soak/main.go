// Command soak runs queue for a long time under a moderate mixed load while
// it injects faults, and reports whether queue failed anything it should
// not have and whether it gives its memory, goroutines and descriptors back
// at rest.
//
// It starts, all on 127.0.0.1 on free ports:
//
//   - an upstream: the soak binary itself in upstream mode (a child process,
//     so it can be killed), one port serving HTTP/1.1 and h2c with prior
//     knowledge: GET /1k, /64k and /big (1 MiB), POST /echo, a websocket
//     echo at /ws, and gRPC's grpc.testing.TestService (UnaryCall and
//     FullDuplexCall echo);
//   - two queue processes in front of it, "up-h1" with --upstream-protocol
//     http1 and a TLS port, and "up-h2c" with --upstream-protocol h2c (one
//     queue has one upstream protocol: gRPC needs h2c upstream, websockets
//     need HTTP/1.1), both with --drain-quiet-period 0s.
//
// The load, at -http-rate, -grpc-rate and -stream-rate, spread over
// -workers clients per kind: HTTP/1.1 keep-alive and h2c prior-knowledge
// GET and POST (to both queues), HTTP/1.1 and HTTP/2 over TLS by ALPN (to
// up-h1), websocket sessions that echo three messages 100 ms apart and
// close (up-h1), gRPC unary calls and bidirectional streams of three
// messages 100 ms apart (up-h2c). The defaults make 520 requests,
// sessions and streams a second (4×100 + 100 + 2×10), and the slow and
// vanishing clients a few more.
//
// The faults:
//
//   - every -kill-every the upstream is killed with SIGKILL, by the PID of
//     the soak's own child, and started again after -down (every
//     -long-every-th kill, after -long-down, longer than a retry window);
//   - every -slow-every a round of slow clients: a request head sent byte by
//     byte, a body sent byte by byte, 1 MiB read slowly over HTTP/1.1, TLS
//     and h2c (window updates held back), each expected to succeed;
//   - every -vanish-every a round of vanishing clients that close (FIN) or
//     reset (RST, alternately) their connection mid-head, mid-body (a body
//     queue holds and one it streams), mid-response (HTTP/1.1, TLS), with
//     three HTTP/2 streams open (h2c to both queues, h2 over TLS), a
//     websocket dropped without a close, a gRPC connection closed with a
//     stream open;
//   - every -rotate-every the pair in up-h1's --tls-cert and --tls-key is
//     replaced by a new self-signed one (ECDSA P-256, SAN localhost,
//     127.0.0.1, ::1); the TLS clients trust every pair issued, and new
//     handshakes check that queue serves the new one within 5 s (a miss is
//     an "other" failure of the "cert" column).
//
// # Failures and how they are classified
//
// A request (a websocket session, a gRPC stream) fails on any transport
// error, any status but 200 (so every 5xx), a body that is not the one
// expected, or a stream that does not end cleanly. A failure is an injected
// fault's when its span [start, end] overlaps a kill window [kill, close]:
// kill is the moment just before the SIGKILL; close is the end of the first
// request of any kind that succeeded having started after the restarted
// upstream accepted connections, plus -fault-slack (default 1s) for requests
// in flight at that moment; a window still open when its phase's load stops
// closes then, plus the slack. Such a failure is "at kill" when it started
// before the killed upstream was gone (reaped: a few milliseconds after the
// SIGKILL, during which its connections die in any state; a request then was
// in flight at its death and may legitimately fail) and "after kill"
// otherwise (it arrived while the upstream was down or not yet answering: a
// queue that holds requests for a connect-retry window turns these into
// successes, which count as successes). A vanishing client's abandoned
// request also counts as a fault's, but a vanishing client that fails before
// it vanishes (refused, a 5xx) is classified like any other. Everything else
// is "other", and must be 0.
//
// # Phases, the table and the verdict
//
// The run is cut into phases of -phase (default 1m): the load runs for
// -phase less -rest, then stops, every client connection is closed, and
// the soak samples both queues at rest every 250 ms until their descriptors
// and goroutines are within -fd-slack and -goroutine-slack of the baseline
// (but at least 2 s, longer than queue's 1.5 s upstream idle timeout) or
// -rest has passed. The baseline is taken before any load. A sample is
// VmRSS (/proc/PID/status), go_goroutines (queue's --metrics-listen port),
// the entries of /proc/PID/fd, and utime+stime (/proc/PID/stat). After
// each phase the soak prints a row of the table: per protocol
// requests/fault/other, the kills, and both queues' figures at rest, with
// drift flagged: descriptors, goroutines or RSS above the baseline plus
// their slack (queue gives the heap a burst grew back to the system a
// couple of seconds after the load stops).
// No fault falls in a rest: faults wait for it to end, and a phase waits for
// a kill in progress to restart the upstream.
//
// At the end it prints the table again as Markdown, sends SIGTERM to both
// queues and reports how long each took to exit, and exits 0 when no
// "other" failure happened, nothing drifted and both queues exited with
// status 0 within -exit-limit (default 1s); 1 otherwise, and on any error
// in setting up. Every child (the upstream, both queues) is tracked by PID
// and killed on the way out, on SIGINT and SIGTERM to the soak too, and by
// the kernel (Pdeathsig) if the soak dies.
//
// # Running it
//
// From the repository root (it builds queue with go build when -queue is
// not given; -queue takes a binary):
//
//	go run ./bench/soak                                   # one hour, the default faults
//	go run ./bench/soak -duration 3m                      # three kills, the third 10 s long
//	go run ./bench/soak -duration 1m                      # one phase, one kill
//	go run ./bench/soak -duration 20s -phase 10s -rest 3s -kill-every 8s -rotate-every 6s
//
// For an hour, build it and keep the output:
//
//	go build -o /tmp/soak ./bench/soak && /tmp/soak -duration 1h | tee soak.txt
//
// The children's logs are in -work (a temporary folder removed at the end
// when not given).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// config is the soak's settings; parseFlags documents each.
type config struct {
	queue, work        string
	duration, phase    time.Duration
	rest               time.Duration
	httpRate, grpcRate float64
	streamRate         float64
	workers            int
	requestTimeout     time.Duration
	killEvery, down    time.Duration
	longDown           time.Duration
	longEvery          int
	slowEvery          time.Duration
	vanishEvery        time.Duration
	rotateEvery        time.Duration
	faultSlack         time.Duration
	slack              slack
	exitLimit          time.Duration
	log                io.Writer // progress and the errors of "other" failures
	stdout             io.Writer // the table
	moduleRoot         string    // where go build runs when queue is empty; "" is the current folder
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.queue, "queue", "", "queue binary; empty: go build ./cmd/queue into -work")
	fs.StringVar(&c.work, "work", "", "folder for the certificates, the built queue and the children's logs; empty: a temporary one, removed at the end")
	fs.DurationVar(&c.duration, "duration", time.Hour, "how long the soak runs, rests included")
	fs.DurationVar(&c.phase, "phase", time.Minute, "length of a phase: load, then a rest of at most -rest, then a row of the table")
	fs.DurationVar(&c.rest, "rest", 8*time.Second, "the longest rest after a phase, waiting for queue to settle back to its baseline")
	fs.Float64Var(&c.httpRate, "http-rate", 100, "requests a second of each of h1, h2c, tls-h1 and tls-h2")
	fs.Float64Var(&c.grpcRate, "grpc-rate", 100, "unary gRPC calls a second")
	fs.Float64Var(&c.streamRate, "stream-rate", 10, "websocket sessions a second, and as many gRPC streams")
	fs.IntVar(&c.workers, "workers", 8, "concurrent clients of each kind")
	fs.DurationVar(&c.requestTimeout, "request-timeout", 30*time.Second, "limit on each request, session or stream")
	fs.DurationVar(&c.killEvery, "kill-every", time.Minute, "kill the upstream this often, the first time after half of it; 0 = never")
	fs.DurationVar(&c.down, "down", 2*time.Second, "how long a killed upstream stays down")
	fs.DurationVar(&c.longDown, "long-down", 10*time.Second, "how long it stays down on every -long-every-th kill")
	fs.IntVar(&c.longEvery, "long-every", 3, "every Nth kill keeps the upstream down -long-down; 0 = never")
	fs.DurationVar(&c.slowEvery, "slow-every", 10*time.Second, "run a round of slow clients this often; 0 = never")
	fs.DurationVar(&c.vanishEvery, "vanish-every", 5*time.Second, "run a round of vanishing clients this often; 0 = never")
	fs.DurationVar(&c.rotateEvery, "rotate-every", 2*time.Minute, "rotate the TLS certificate pair this often; 0 = never")
	fs.DurationVar(&c.faultSlack, "fault-slack", time.Second, "a kill's window lasts this long past the first success after the restart")
	fs.IntVar(&c.slack.fds, "fd-slack", 2, "descriptors above the baseline at rest that are not drift")
	fs.IntVar(&c.slack.goroutines, "goroutine-slack", 4, "goroutines above the baseline at rest that are not drift")
	fs.Float64Var(&c.slack.rssMiB, "rss-slack", 8, "MiB of RSS above the baseline at rest that are not drift")
	fs.DurationVar(&c.exitLimit, "exit-limit", time.Second, "the longest queue may take to exit after SIGTERM at the end")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case c.duration <= 0 || c.phase <= 0 || c.rest <= 0:
		return c, errors.New("-duration, -phase and -rest must be positive")
	case c.rest >= c.phase:
		return c, errors.New("-rest must be shorter than -phase")
	case c.workers < 1:
		return c, errors.New("-workers must be at least 1")
	case c.killEvery > 0 && c.down <= 0:
		return c, errors.New("-down must be positive")
	}
	return c, nil
}

func main() {
	if addr := os.Getenv(upstreamEnv); addr != "" {
		os.Exit(serveUpstream(addr))
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		os.Exit(2)
	}
	cfg.log, cfg.stdout = os.Stderr, os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	rep, err := run(ctx, cfg)
	if ctx.Err() != nil {
		err = errors.New("interrupted; every child was killed")
	}
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		os.Exit(1)
	}
	if !rep.ok(cfg.exitLimit) {
		os.Exit(1)
	}
}

// queueProc is one of the two queue processes and its addresses.
type queueProc struct {
	name                               string
	c                                  *child
	listen, tls, admin, stats, metrics string
	protocol                           string
}

func (q *queueProc) args(upstream string, is *issuer) []string {
	a := []string{
		"--upstream", upstream, "--upstream-protocol", q.protocol,
		"--listen", q.listen, "--admin-listen", q.admin, "--stats-listen", q.stats, "--metrics-listen", q.metrics,
		"--drain-quiet-period", "0s",
	}
	if q.tls != "" {
		a = append(a, "--tls-listen", q.tls, "--tls-cert", is.certFile, "--tls-key", is.keyFile)
	}
	return a
}

// waitReady polls queue's /ready every 10 ms until it answers 200, at most
// 10 s: there is no event to wait on for another process.
func (q *queueProc) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+q.admin+"/ready", nil)
		res, err := scrapeClient.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if q.c.exited() {
			return fmt.Errorf("queue %s exited: %v", q.name, q.c.err)
		}
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			return fmt.Errorf("queue %s not ready after 10 s", q.name)
		}
	}
}

func sampleQueues(ctx context.Context, qs [2]*queueProc) ([2]sample, error) {
	var s [2]sample
	for i, q := range qs {
		var err error
		if s[i], err = sampleProc(ctx, q.c.pid(), "http://"+q.metrics+"/metrics"); err != nil {
			return s, fmt.Errorf("sample queue %s: %w", q.name, err)
		}
	}
	return s, nil
}

// minRest is the shortest rest: longer than queue's default upstream idle
// timeout (1.5 s), so that a queue at rest has closed its idle HTTP/1.1
// upstream connections.
const minRest = 2 * time.Second

// atRest samples both queues every 250 ms until they are back within slack
// of base, after minRest at least, or until cfg.rest has passed.
func atRest(ctx context.Context, cfg *config, qs [2]*queueProc, base [2]sample) ([2]sample, error) {
	t0 := time.Now()
	for {
		s, err := sampleQueues(ctx, qs)
		if err != nil {
			return s, err
		}
		if el := time.Since(t0); el >= cfg.rest || el >= min(minRest, cfg.rest) && settled(base, s, cfg.slack) {
			return s, nil
		}
		if err := pause(ctx, 250*time.Millisecond); err != nil {
			return s, err
		}
	}
}

// baseline samples both queues four times, 250 ms apart, and keeps the
// highest of each figure, so that a passing probe connection does not make
// the baseline lower than queue at rest.
func baseline(ctx context.Context, qs [2]*queueProc) ([2]sample, error) {
	var b [2]sample
	for i := range 4 {
		if i > 0 {
			if err := pause(ctx, 250*time.Millisecond); err != nil {
				return b, err
			}
		}
		s, err := sampleQueues(ctx, qs)
		if err != nil {
			return b, err
		}
		for j := range s {
			b[j].rssKiB = max(b[j].rssKiB, s[j].rssKiB)
			b[j].goroutines = max(b[j].goroutines, s[j].goroutines)
			b[j].fds = max(b[j].fds, s[j].fds)
			b[j].cpu = max(b[j].cpu, s[j].cpu)
		}
	}
	return b, nil
}

// run runs the soak and reports whether it passed. An error means it could
// not run (or was interrupted).
func run(ctx context.Context, cfg config) (*report, error) {
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	work := cfg.work
	if work == "" {
		dir, err := os.MkdirTemp("", "soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		work = dir
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	bin := cfg.queue
	if bin == "" {
		bin = filepath.Join(work, "queue")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/queue-dev/queue/cmd/queue")
		build.Dir = cfg.moduleRoot
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/queue (run the soak inside the repository, or give -queue): %w\n%s", err, out)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the soak's own binary for the upstream: %w", err)
	}

	procs := &children{}
	defer procs.killAll()
	ports, err := freePorts(10)
	if err != nil {
		return nil, err
	}
	is := newIssuer(work)
	if _, err := is.issue(); err != nil {
		return nil, err
	}
	logFile := func(name string) (io.Writer, error) {
		f, err := os.Create(filepath.Join(work, name+".log"))
		if err != nil {
			return nil, err
		}
		return f, nil // closed with the process: the file lives as long as the soak
	}
	upLog, err := logFile("upstream")
	if err != nil {
		return nil, err
	}
	up := &upstream{procs: procs, exe: exe, env: os.Environ(), addr: ports[0], log: upLog}
	if err := up.start(ctx); err != nil {
		return nil, err
	}
	qs := [2]*queueProc{
		{name: queueNames[0], protocol: "http1", listen: ports[1], tls: ports[2], admin: ports[3], stats: ports[4], metrics: ports[5]},
		{name: queueNames[1], protocol: "h2c", listen: ports[6], admin: ports[7], stats: ports[8], metrics: ports[9]},
	}
	for _, q := range qs {
		lw, err := logFile("queue-" + q.name)
		if err != nil {
			return nil, err
		}
		if q.c, err = procs.start("queue "+q.name, bin, q.args(up.addr, is), os.Environ(), lw); err != nil {
			return nil, err
		}
	}
	for _, q := range qs {
		if err := q.waitReady(ctx); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(cfg.log, "soak: upstream pid %d on %s; queue %s pid %d on %s (TLS %s); queue %s pid %d on %s; logs in %s\n",
		up.cur.pid(), up.addr, qs[0].name, qs[0].c.pid(), qs[0].listen, qs[0].tls, qs[1].name, qs[1].c.pid(), qs[1].listen, work)
	// queue probes aggressively for its first second (docs/contract.md
	// section 4): the baseline is taken after that.
	if err := pause(ctx, 1500*time.Millisecond); err != nil {
		return nil, err
	}
	base, err := baseline(ctx, qs)
	if err != nil {
		return nil, err
	}
	rows := []row{{phase: "base", q: base}}
	fmt.Fprintf(cfg.stdout, "%s\n\n%s\n", legend, markdown(rows))

	rec := &recorder{slack: cfg.faultSlack}
	cl := newClients(ctx, &cfg, rec, is, qs[0].listen, qs[0].tls, qs[1].listen)
	in := &injector{cfg: &cfg, rec: rec, up: up, is: is, tlsAddr: qs[0].tls, fail: fail}
	fctx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	var faults sync.WaitGroup
	faults.Go(func() { in.killLoop(fctx) })
	faults.Go(func() { in.rotateLoop(fctx) })

	// failures.log lists every failure of the run: its phase, class,
	// protocol, start (from the run's start), duration and error.
	flog, err := os.Create(filepath.Join(work, "failures.log"))
	if err != nil {
		return nil, err
	}
	defer flog.Close()
	t0 := time.Now()
	end := t0.Add(cfg.duration)
	var total phaseResult
	drifted := false
	var runErr error
	for phase := 1; ctx.Err() == nil && time.Until(end) > cfg.rest; phase++ {
		if err := cl.startPhase(); err != nil {
			return nil, err
		}
		loadEnd := time.Now().Add(cfg.phase - cfg.rest)
		last := !loadEnd.Before(end.Add(-cfg.rest))
		if last {
			loadEnd = end.Add(-cfg.rest)
		}
		lctx, cancel := context.WithDeadline(ctx, loadEnd)
		cl.run(lctx)
		cancel()
		in.gate.Lock()
		res := rec.endPhase()
		cl.rest()
		s, err := atRest(ctx, &cfg, qs, base)
		if last || err != nil {
			stopFaults()
		}
		in.gate.Unlock()
		if err != nil {
			runErr = err
			break
		}
		r := row{phase: fmt.Sprint(phase), elapsed: time.Since(t0), res: &res, q: s, drift: drift(base, s, cfg.slack)}
		drifted = drifted || len(r.drift) > 0
		rows = append(rows, r)
		total.add(&res)
		fmt.Fprintln(cfg.stdout, markdownRow(r.cells()))
		for _, f := range res.others {
			fmt.Fprintf(flog, "phase %d other %s start %s took %v: %v\n", phase, f.p, f.start.Sub(t0).Round(time.Millisecond), f.stop.Sub(f.start).Round(time.Millisecond), f.err)
		}
		for _, f := range res.faults {
			fmt.Fprintf(flog, "phase %d fault %s start %s took %v: %v\n", phase, f.p, f.start.Sub(t0).Round(time.Millisecond), f.stop.Sub(f.start).Round(time.Millisecond), f.err)
		}
		for i, f := range res.others {
			if i == 10 {
				fmt.Fprintf(cfg.log, "soak: ... and %d more other failures\n", len(res.others)-i)
				break
			}
			fmt.Fprintf(cfg.log, "soak: other failure: %s at %s after %v: %v\n", f.p, f.start.Sub(t0).Round(time.Millisecond), f.stop.Sub(f.start).Round(time.Millisecond), f.err)
		}
		if last {
			break
		}
	}
	stopFaults()
	faults.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	if runErr != nil {
		return nil, runErr
	}
	rep := &report{rows: rows, total: total, drifted: drifted}
	rep.rows = append(rep.rows, row{phase: "total", elapsed: time.Since(t0), res: &rep.total, q: rows[len(rows)-1].q})
	for _, q := range qs {
		d, err := q.c.term(cfg.exitLimit)
		rep.exits = append(rep.exits, exit{name: q.name, took: d, err: err})
	}
	rep.print(cfg.stdout, cfg.exitLimit)
	return rep, nil
}

// report is a finished soak's figures and verdict.
type report struct {
	rows    []row       // baseline, phases, total
	total   phaseResult // the sum of the phases
	drifted bool        // a phase's rest was off its baseline
	exits   []exit      // how each queue ended on SIGTERM
}

// exit is how one queue ended on SIGTERM.
type exit struct {
	name string
	took time.Duration
	err  error // the exit status, or that it outlived the limit
}

// others is the count of "other" failures.
func (r *report) others() int {
	n := 0
	for _, c := range r.total.counts {
		n += c.other
	}
	return n
}

// ok is the verdict: no "other" failure, no drift, and both queues exited
// with status 0 in time.
func (r *report) ok(limit time.Duration) bool {
	return len(r.why(limit)) == 0
}

func (r *report) why(limit time.Duration) []string {
	var why []string
	if n := r.others(); n > 0 {
		why = append(why, fmt.Sprintf("%d other failures", n))
	}
	if r.drifted {
		why = append(why, "drift at rest")
	}
	for _, e := range r.exits {
		if e.err != nil || e.took > limit {
			why = append(why, fmt.Sprintf("queue %s did not exit cleanly within %v", e.name, limit))
		}
	}
	return why
}

// print writes the table as Markdown, the totals, the exits and the
// verdict.
func (r *report) print(w io.Writer, limit time.Duration) {
	var req, fault, at, after, own int
	for _, c := range r.total.counts {
		req += c.req
		fault += c.fault()
		at += c.atKill
		after += c.afterKill
		own += c.own
	}
	fmt.Fprintf(w, "\n%s\n", markdown(r.rows))
	fmt.Fprintf(w, "requests %d; fault failures %d (%d at a kill, %d after one, %d abandoned by vanishing clients); other failures %d\n",
		req, fault, at, after, own, r.others())
	fmt.Fprintf(w, "kills %d (longest recovery %v); certificate rotations checked %d\n",
		len(r.total.kills), r.total.longest.Round(10*time.Millisecond), r.total.counts[pCert].req)
	for _, e := range r.exits {
		fmt.Fprintf(w, "queue %s exited %v after SIGTERM", e.name, e.took.Round(time.Millisecond))
		if e.err != nil {
			fmt.Fprintf(w, ": %v", e.err)
		}
		fmt.Fprintln(w)
	}
	if why := r.why(limit); len(why) > 0 {
		fmt.Fprintf(w, "verdict: fail (%s)\n", strings.Join(why, ", "))
	} else {
		fmt.Fprintln(w, "verdict: pass")
	}
}

// add adds a phase's result to a running total.
func (t *phaseResult) add(r *phaseResult) {
	for i := range t.counts {
		c, d := &t.counts[i], r.counts[i]
		c.req += d.req
		c.atKill += d.atKill
		c.afterKill += d.afterKill
		c.own += d.own
		c.other += d.other
	}
	t.kills = append(t.kills, r.kills...)
	t.longest = max(t.longest, r.longest)
}
