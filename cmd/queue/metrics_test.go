package main

import (
	"bytes"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/queue-dev/queue/stats"
)

// TestPrometheusExposition: the whole Prometheus port parses as Prometheus
// parses it, and has Knative's queue-proxy families with their names,
// labels and buckets, the revision identity, and the Go runtime and
// process families under client_golang's names and types.
func TestPrometheusExposition(t *testing.T) {
	t.Parallel()
	labels := Labels{Namespace: "ns", Service: "svc", Configuration: "cfg", Revision: "svc-00001", Pod: "svc-00001-pod"}
	a := &app{cfg: Config{Labels: labels}, stats: stats.New(stats.Config{}), promLabels: labels.prometheus(), depth: func() int { return 0 },
		resource: resourceAttrs(Config{Labels: labels})}
	codes := []int{200, 200, 404, 503}
	for _, code := range codes {
		a.stats.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
		})).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}
	rec := httptest.NewRecorder()
	a.metricsHandler(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.Bytes()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus cannot parse the exposition: %v\n%s", err, body)
	}

	// Every family Knative's queue-proxy and Go exporters have, with its type.
	want := map[string]string{
		"kn_serving_invocation_duration_seconds": "HISTOGRAM",
		"http_server_request_duration_seconds":   "HISTOGRAM",
		"kn_serving_queue_depth":                 "GAUGE",
		"target_info":                            "GAUGE",
		"queue_active_requests":                  "GAUGE",
		"queue_glitches_total":                   "COUNTER",
		"queue_glitch_closes_total":              "COUNTER",
		"go_goroutines":                          "GAUGE",
		"go_gc_duration_seconds":                 "SUMMARY",
		"go_memstats_alloc_bytes":                "GAUGE",
		"go_info":                                "GAUGE",
		"process_resident_memory_bytes":          "GAUGE",
		"process_cpu_seconds_total":              "COUNTER",
		"process_open_fds":                       "GAUGE",
	}
	for name, typ := range want {
		mf, ok := families[name]
		if !ok {
			t.Errorf("family %s missing", name)
			continue
		}
		if got := mf.GetType().String(); got != typ {
			t.Errorf("%s is a %s, want %s", name, got, typ)
		}
	}

	knBuckets := []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, math.Inf(1)} // the parser keeps +Inf
	identity := map[string]string{"k8s_namespace_name": "ns", "kn_service_name": "svc", "kn_configuration_name": "cfg",
		"kn_revision_name": "svc-00001", "k8s_pod_name": "svc-00001-pod"}
	ours := map[string]string{"namespace": "ns", "service": "svc", "configuration": "cfg", "revision": "svc-00001", "pod": "svc-00001-pod"}
	tests := []struct {
		name   string
		labels map[string]string
	}{
		{"kn_serving_invocation_duration_seconds", identity},
		{"http_server_request_duration_seconds", ours},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mf := families[tt.name]
			if mf == nil {
				t.Fatal("missing")
			}
			byCode := map[string]uint64{}
			for _, m := range mf.GetMetric() {
				got := labelMap(m.GetLabel())
				for k, v := range tt.labels {
					if got[k] != v {
						t.Errorf("label %s = %q, want %q", k, got[k], v)
					}
				}
				h := m.GetHistogram()
				var bounds []float64
				for _, b := range h.GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				if !slices.Equal(bounds, knBuckets) {
					t.Errorf("buckets %v, want Knative's %v", bounds, knBuckets)
				}
				byCode[got["http_response_status_code"]] += h.GetSampleCount()
			}
			if wantCodes := map[string]uint64{"200": 2, "404": 1, "503": 1}; !mapsEqual(byCode, wantCodes) {
				t.Errorf("requests by http_response_status_code %v, want %v", byCode, wantCodes)
			}
		})
	}

	if m, ok := firstMetric(t, "kn_serving_queue_depth", families["kn_serving_queue_depth"].GetMetric()); ok {
		if got := labelMap(m.GetLabel()); !mapsEqual(got, identity) {
			t.Errorf("kn_serving_queue_depth labels %v, want %v", got, identity)
		}
	}
	if m, ok := firstMetric(t, "target_info", families["target_info"].GetMetric()); ok {
		got := labelMap(m.GetLabel())
		for k, v := range identity {
			if got[k] != v {
				t.Errorf("target_info label %s = %q, want %q", k, got[k], v)
			}
		}
		if got["service_name"] != "svc" || got["service_instance_id"] != "svc-00001-pod" || got["k8s_container_name"] != "queue-proxy" {
			t.Errorf("target_info %v", got)
		}
	}
	if m, ok := firstMetric(t, "process_resident_memory_bytes", families["process_resident_memory_bytes"].GetMetric()); ok && m.GetGauge().GetValue() < 1<<20 {
		t.Errorf("process_resident_memory_bytes = %v, want at least a MiB", m.GetGauge().GetValue())
	}
	if m, ok := firstMetric(t, "go_goroutines", families["go_goroutines"].GetMetric()); ok && m.GetGauge().GetValue() < 1 {
		t.Errorf("go_goroutines = %v", m.GetGauge().GetValue())
	}
	if m, ok := firstMetric(t, "go_info", families["go_info"].GetMetric()); ok && labelMap(m.GetLabel())["version"] != runtime.Version() {
		t.Errorf("go_info %v", m.GetLabel())
	}
	// The runtime families come after queue's own, which stay first.
	if !strings.HasPrefix(string(body), "# HELP queue_") || strings.Index(string(body), "go_goroutines") < strings.Index(string(body), "target_info") {
		t.Error("the exposition does not start with queue's families and end with the runtime's")
	}
}

// TestPrometheusNoConcurrencyLimit: without a concurrency limit there is no
// queue, so no kn_serving_queue_depth series, as in Knative; with no
// Knative environment there are no identity labels.
func TestPrometheusNoConcurrencyLimit(t *testing.T) {
	t.Parallel()
	a := &app{stats: stats.New(stats.Config{}), resource: resourceAttrs(Config{})}
	rec := httptest.NewRecorder()
	a.metricsHandler(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		t.Fatalf("Prometheus cannot parse the exposition: %v\n%s", err, rec.Body.Bytes())
	}
	if _, ok := families["kn_serving_queue_depth"]; ok {
		t.Error("kn_serving_queue_depth without a concurrency limit")
	}
	m, ok := firstMetric(t, "target_info", families["target_info"].GetMetric())
	if !ok {
		t.FailNow()
	}
	if got := labelMap(m.GetLabel()); got["kn_revision_name"] != "" || got["k8s_container_name"] != "queue-proxy" {
		t.Errorf("target_info %v", got)
	}
}

// firstMetric returns the first of the series of the family name; ok is
// false, and the test failed, when there is none (a missing family has
// none).
func firstMetric[M any](t *testing.T, name string, series []M) (m M, ok bool) {
	t.Helper()
	if len(series) == 0 {
		t.Errorf("no %s series", name)
		return m, false
	}
	return series[0], true
}

func labelMap[L interface {
	GetName() string
	GetValue() string
}](ls []L) map[string]string {
	m := map[string]string{}
	for _, l := range ls {
		m[l.GetName()] = l.GetValue()
	}
	return m
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
