package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// vegetaReport is the part of `vegeta report -type json` used here;
// latencies are in nanoseconds.
type vegetaReport struct {
	Latencies struct {
		P50 int64 `json:"50th"`
		P99 int64 `json:"99th"`
	} `json:"latencies"`
	Requests uint64 `json:"requests"`
	// Success is the share of answers with a 2xx or 3xx status, 0 to 1.
	Success float64 `json:"success"`
}

// parseReport decodes vegeta's JSON report.
func parseReport(b []byte) (vegetaReport, error) {
	var r vegetaReport
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decode vegeta's report: %w", err)
	}
	return r, nil
}

// cmdAttack sends a warm-up attack, not counted, then the measured one, and
// reports latency, success and what the group cost per request.
func cmdAttack(args []string) error {
	fs := flag.NewFlagSet("attack", flag.ExitOnError)
	group := groupFlag(fs)
	l := labelFlags(fs, "throttled")
	vegeta := fs.String("vegeta", "vegeta", "the vegeta binary")
	url := fs.String("url", "", "GET this URL")
	rate := fs.Int("rate", 250, "requests per second, open loop")
	dur := fs.Duration("duration", 20*time.Second, "the measured attack's length")
	warm := fs.Duration("warmup", 3*time.Second, "the warm-up attack's length; 0 = none")
	timeout := fs.Duration("timeout", 2*time.Second, "per-request timeout")
	out := fs.String("out", os.TempDir(), "folder for vegeta's raw results")
	gmp := fs.String("gomaxprocs", "", "read go_sched_gomaxprocs_threads from this Prometheus URL mid-attack; empty = not")
	fs.Parse(args)
	if *url == "" {
		return errors.New("-url is required")
	}
	g, err := group()
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s-%d", l.peer, *rate)
	if *warm > 0 {
		if err := runVegeta(*vegeta, *url, *rate, *warm, *timeout, filepath.Join(*out, name+".warmup.bin")); err != nil {
			return err
		}
	}
	before, err := take(g)
	if err != nil {
		return err
	}
	gmpc := make(chan string, 1)
	if *gmp != "" {
		go func() {
			time.Sleep(*dur / 2)
			gmpc <- scrapeGauge(*gmp, "go_sched_gomaxprocs_threads")
		}()
	}
	bin := filepath.Join(*out, name+".bin")
	if err := runVegeta(*vegeta, *url, *rate, *dur, *timeout, bin); err != nil {
		return err
	}
	after, err := take(g)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := exec.CommandContext(ctx, *vegeta, "report", "-type", "json", bin).Output()
	if err != nil {
		return fmt.Errorf("vegeta report: %w", err)
	}
	r, err := parseReport(rep)
	if err != nil {
		return err
	}
	d := after.since(before)
	perReq := func(x float64) string {
		if r.Requests == 0 {
			return "-"
		}
		return strconv.FormatFloat(x/float64(r.Requests), 'f', 2, 64)
	}
	l.emit("requests", "%d", r.Requests)
	l.emit("success_pct", "%.2f", 100*r.Success)
	l.emit("p50_ms", "%.3f", float64(r.Latencies.P50)/1e6)
	l.emit("p99_ms", "%.3f", float64(r.Latencies.P99)/1e6)
	l.emit("cpu_ms", "%.3f", float64(d.cpuNanos)/1e6)
	l.emit("cpu_us_per_req", "%s", perReq(float64(d.cpuNanos)/1e3))
	l.emit("periods", "%d", d.periods)
	l.emit("throttled", "%d", d.throttled)
	l.emit("ctxsw", "%d", d.switches)
	l.emit("ctxsw_per_req", "%s", perReq(float64(d.switches)))
	if *gmp != "" {
		l.emit("gomaxprocs", "%s", <-gmpc)
	}
	return nil
}

// runVegeta runs one open-loop attack, bounded in time, into file out.
func runVegeta(bin, url string, rate int, dur, timeout time.Duration, out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), dur+timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "attack", "-rate", strconv.Itoa(rate)+"/1s",
		"-duration", dur.String(), "-timeout", timeout.String(), "-keepalive=true", "-output", out)
	cmd.Stdin = strings.NewReader("GET " + url + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("vegeta attack: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// scrapeGauge reads one unlabelled sample from a Prometheus text page, or
// "-" when it cannot.
func scrapeGauge(url, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c := newScraper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "-"
	}
	resp, err := c.Do(req)
	if err != nil {
		return "-"
	}
	defer resp.Body.Close()
	return findGauge(resp.Body, name)
}

// findGauge returns the value of the sample called name in Prometheus
// text, or "-".
func findGauge(r io.Reader, name string) string {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == name {
			return f[1]
		}
	}
	return "-"
}
