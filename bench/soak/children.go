package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a process the soak started. Its PID is the only handle the soak
// signals it by; one goroutine waits for it and closes done.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit status, once done is closed
}

// children tracks every process the soak starts so that each is killed on
// the way out, however the soak ends. It is safe for concurrent use.
type children struct {
	mu   sync.Mutex
	list []*child
}

// start starts a process with its stdout and stderr appended to log. The
// kernel kills it with SIGKILL if the soak dies without cleaning up
// (Pdeathsig).
func (cs *children) start(name, path string, args, env []string, log io.Writer) (*child, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	cs.mu.Lock()
	cs.list = append(cs.list, c)
	cs.mu.Unlock()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the process has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the process by its PID and waits for it to be
// reaped (at most 5 s: a SIGKILLed process cannot take longer unless the
// kernel is stuck).
func (c *child) kill() error {
	if c.exited() {
		return nil
	}
	if err := syscall.Kill(c.pid(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (pid %d): %w", c.name, c.pid(), err)
	}
	select {
	case <-c.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) still there 5 s after SIGKILL", c.name, c.pid())
	}
}

// term sends SIGTERM and waits up to limit for the process to exit. It
// returns how long the process took and its exit error; past the limit it
// kills it and says so.
func (c *child) term(limit time.Duration) (time.Duration, error) {
	t0 := time.Now()
	if err := syscall.Kill(c.pid(), syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("SIGTERM %s (pid %d): %w", c.name, c.pid(), err)
	}
	select {
	case <-c.done:
		return time.Since(t0), c.err
	case <-time.After(limit):
		c.kill()
		return time.Since(t0), fmt.Errorf("%s still running %v after SIGTERM", c.name, limit)
	}
}

// killAll kills every child still running.
func (cs *children) killAll() {
	cs.mu.Lock()
	list := append([]*child(nil), cs.list...)
	cs.mu.Unlock()
	for _, c := range list {
		c.kill()
	}
}

// freePorts returns n distinct free ports on 127.0.0.1: each is listened
// on with port 0 and closed only once all are known, so none is returned
// twice. Another process may still take one before it is used; queue then
// fails to bind and says which.
func freePorts(n int) ([]string, error) {
	var addrs []string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// waitListening polls addr until it accepts a TCP connection, every 5 ms,
// until ctx ends: there is no event to wait on for another process's
// listener.
func waitListening(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", addr, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// sample is a process's state at one moment.
type sample struct {
	rssKiB     int64   // VmRSS
	goroutines int     // go_goroutines from its Prometheus port
	fds        int     // entries of /proc/PID/fd
	cpu        float64 // user plus system CPU seconds so far
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// sampleProc reads a process's RSS, descriptors and CPU from /proc and its
// goroutines from its metrics URL. It reads the descriptors first, so that
// the scrape's own connection is not among them.
func sampleProc(ctx context.Context, pid int, metricsURL string) (sample, error) {
	var s sample
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, fmt.Errorf("count descriptors: %w", err)
	}
	s.fds = len(fds)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("read status: %w", err)
	}
	if s.rssKiB, err = parseRSS(string(status)); err != nil {
		return s, err
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("read stat: %w", err)
	}
	if s.cpu, err = parseCPU(string(stat)); err != nil {
		return s, err
	}
	if s.goroutines, err = scrapeGoroutines(ctx, metricsURL); err != nil {
		return s, err
	}
	return s, nil
}

// parseRSS finds VmRSS (in KiB) in a /proc/PID/status file.
func parseRSS(status string) (int64, error) {
	for line := range strings.Lines(status) {
		v, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse VmRSS %q: %w", strings.TrimSpace(v), err)
		}
		return n, nil
	}
	return 0, errors.New("no VmRSS in status")
}

// parseCPU sums utime and stime (fields 14 and 15) of a /proc/PID/stat
// line, in seconds. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseCPU(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("parse stat: no ')'")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state), so field 14 is f[11].
	if len(f) < 13 {
		return 0, fmt.Errorf("parse stat: %d fields after the name", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse stat: %w", err)
		}
		ticks += n
	}
	return float64(ticks) / clockTicks, nil
}

// scrapeClient fetches metrics over a new connection each time, so that a
// sample leaves no connection open on the process it measures.
var scrapeClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true},
	Timeout:   5 * time.Second,
}

// scrapeGoroutines reads go_goroutines from a Prometheus text endpoint.
func scrapeGoroutines(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	res, err := scrapeClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s: status %d", url, res.StatusCode)
	}
	return parseGoroutines(res.Body)
}

// parseGoroutines finds the go_goroutines gauge in Prometheus text.
func parseGoroutines(r io.Reader) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "go_goroutines ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("parse go_goroutines %q: %w", v, err)
		}
		return int(f), nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read metrics: %w", err)
	}
	return 0, errors.New("no go_goroutines in the metrics")
}
