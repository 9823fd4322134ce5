package main

import (
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/queue-dev/queue/stats"
	"google.golang.org/protobuf/encoding/protowire"
)

// Labels are the revision labels on the Prometheus metrics, from the
// Knative environment when it gives them.
type Labels struct {
	Namespace, Service, Configuration, Revision, Pod string
}

// prometheus renders the labels as a Prometheus label list, or "".
func (l Labels) prometheus() string {
	var parts []string
	for _, kv := range [...][2]string{{"namespace", l.Namespace}, {"service", l.Service},
		{"configuration", l.Configuration}, {"revision", l.Revision}, {"pod", l.Pod}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+`="`+escapeLabel(kv[1])+`"`)
		}
	}
	return strings.Join(parts, ",")
}

func escapeLabel(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

// encodeStat encodes a window as Knative's autoscaler Stat message
// (serving/pkg/autoscaler/metrics/stat.proto): pod_name = 1,
// average_concurrent_requests = 2, average_proxied_concurrent_requests = 3,
// request_count = 4, proxied_request_count = 5, process_uptime = 6,
// timestamp = 7. protowire writes the wire format from field numbers, which
// is all a six-field message needs: no generated code and no descriptor in
// the binary.
func float64bits(f float64) uint64 { return math.Float64bits(f) }

func encodeStat(pod string, w stats.Window, now time.Time) []byte {
	b := make([]byte, 0, 64+len(pod))
	if pod != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, pod)
	}
	for _, f := range [...]struct {
		num protowire.Number
		v   float64
	}{
		{2, w.AverageConcurrency}, {3, w.AverageProxiedConcurrency},
		{4, w.RequestsPerSecond}, {5, w.ProxiedRequestsPerSecond}, {6, w.Uptime.Seconds()},
	} {
		if f.v != 0 {
			b = protowire.AppendTag(b, f.num, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, float64bits(f.v))
		}
	}
	b = protowire.AppendTag(b, 7, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(now.UnixNano()))
}

// statsHandler serves the last window as a Stat protobuf.
func (a *app) statsHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/protobuf")
	w.Write(encodeStat(a.cfg.Labels.Pod, a.stats.Last(), time.Now()))
}

// metricsHandler serves the Prometheus text exposition.
func (a *app) metricsHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	a.stats.WritePrometheus(w, a.promLabels, stats.Gauges{Depth: a.depth})
}
