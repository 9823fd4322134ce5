package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/queue-dev/queue/limit"
)

// TestAdaptiveConfig: --concurrency auto and QUEUE_CONCURRENCY=auto turn
// the adaptive limit on, with no fixed concurrency and no queue depth of
// their own; a number turns it off again (the flag wins over the
// variable); Knative's CONTAINER_CONCURRENCY stays a number.
func TestAdaptiveConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		wantAuto  bool
		wantN     int
		wantDepth int
	}{
		{"flag", []string{"--concurrency", "auto"}, nil, true, 0, 0},
		{"flag with =", []string{"--concurrency=auto"}, nil, true, 0, 0},
		{"variable", nil, map[string]string{"QUEUE_CONCURRENCY": "auto"}, true, 0, 0},
		{"flag wins over the variable", []string{"--concurrency", "4"}, map[string]string{"QUEUE_CONCURRENCY": "auto"}, false, 4, 40},
		{"auto wins over Knative's number", []string{"--concurrency", "auto"}, map[string]string{"CONTAINER_CONCURRENCY": "10"}, true, 0, 0},
		{"fixed", []string{"--concurrency", "2"}, nil, false, 2, 20},
		{"none", nil, nil, false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseConfig(append([]string{"--upstream", ":8080"}, tt.args...), func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if c.AdaptiveConcurrency != tt.wantAuto || c.Concurrency != tt.wantN || c.QueueDepth != tt.wantDepth {
				t.Errorf("auto %v, concurrency %d, queue depth %d; want %v, %d, %d",
					c.AdaptiveConcurrency, c.Concurrency, c.QueueDepth, tt.wantAuto, tt.wantN, tt.wantDepth)
			}
		})
	}
}

// TestAdaptiveConfigErrors: a queue depth with the adaptive limit is
// refused, naming both settings, as are a misspelt auto and an auto in
// Knative's CONTAINER_CONCURRENCY, which Knative sets to a number.
func TestAdaptiveConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string // substrings of the error
	}{
		{"queue depth", []string{"--concurrency", "auto", "--queue-depth", "5"}, nil,
			[]string{"--queue-depth 5", "--concurrency auto", "own queue"}},
		{"queue depth from the environment", nil, map[string]string{"QUEUE_CONCURRENCY": "auto", "QUEUE_QUEUE_DEPTH": "0"},
			[]string{"QUEUE_QUEUE_DEPTH 0", "QUEUE_CONCURRENCY auto"}},
		{"misspelt", []string{"--concurrency", "Auto"}, nil, []string{"--concurrency", "auto"}},
		{"Knative's variable", nil, map[string]string{"CONTAINER_CONCURRENCY": "auto"}, []string{"CONTAINER_CONCURRENCY", "whole number"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseConfig(append([]string{"--upstream", ":8080"}, tt.args...), func(k string) string { return tt.env[k] })
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("parseConfig = %v, want a *ConfigError", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// TestAdaptiveE2E runs queue with --concurrency auto in front of a
// loopback upstream that takes 5 ms a request at any concurrency, with
// one client more than MinLimit: every answer is a 200 or a 503, and
// queue_concurrency_limit on the metrics port starts at MinLimit and
// rises as the controller finds the round trip flat. With a fixed
// --concurrency there is no such series.
func TestAdaptiveE2E(t *testing.T) {
	t.Parallel()
	var inside, most atomic.Int64
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond) // the upstream's work
		inside.Add(-1)
		io.WriteString(w, "ok")
	}))
	q := startQueue(t, hostPort(up), "--concurrency", "auto")
	q.waitReady(t, true)
	c, base := q.client(t, modeH1)
	mc := &http.Client{Timeout: clientTimeout}
	limitNow := func() (float64, bool) {
		t.Helper()
		res, err := mc.Get("http://" + q.addr.Metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, err := p.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("Prometheus cannot parse the exposition: %v\n%s", err, body)
		}
		ms := families["queue_concurrency_limit"].GetMetric()
		if len(ms) != 1 {
			return 0, false
		}
		return ms[0].GetGauge().GetValue(), true
	}
	if v, ok := limitNow(); !ok || v != limit.MinLimit {
		t.Fatalf("queue_concurrency_limit at start = %v (present %v), want %d", v, ok, limit.MinLimit)
	}

	// Bounded in requests and in time: the limit rises within a few
	// hundred requests; the bounds only end a test that failed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sent, ok200, refused atomic.Int64
	var wg sync.WaitGroup
	for range limit.MinLimit + 1 {
		wg.Go(func() {
			for ctx.Err() == nil && sent.Add(1) <= 3000 {
				res, err := c.Get(base + "/")
				if err != nil {
					t.Errorf("GET: %v", err)
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				switch res.StatusCode {
				case http.StatusOK:
					ok200.Add(1)
				case http.StatusServiceUnavailable:
					refused.Add(1)
				default:
					t.Errorf("status %d, want 200 or 503", res.StatusCode)
					return
				}
				if q.app.limit() > limit.MinLimit {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	v, present := limitNow()
	t.Logf("%d served, %d refused; limit %v, most at the upstream at once %d", ok200.Load(), refused.Load(), v, most.Load())
	if !present || v <= limit.MinLimit {
		t.Errorf("queue_concurrency_limit = %v (present %v) after %d requests at a flat round trip, want above %d",
			v, present, ok200.Load()+refused.Load(), limit.MinLimit)
	}

	fixed := startQueue(t, hostPort(up), "--concurrency", "2")
	res, err := mc.Get("http://" + fixed.addr.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if bytes.Contains(body, []byte("queue_concurrency_limit")) {
		t.Error("queue_concurrency_limit with a fixed --concurrency, want no such series")
	}
	if !bytes.Contains(body, []byte("\nqueue_depth ")) {
		t.Errorf("no queue_depth with a fixed --concurrency:\n%s", body)
	}
}
