package main

import (
	"bytes"
	"cmp"
	"maps"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/queue-dev/queue/ingress"
	"github.com/queue-dev/queue/otlp"
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
// (serving/pkg/autoscaler/metrics/stat.proto), seven fields: pod_name = 1,
// average_concurrent_requests = 2, average_proxied_concurrent_requests = 3,
// request_count = 4, proxied_request_count = 5, process_uptime = 6 (the
// doubles are left out when zero), timestamp = 7 (Unix nanoseconds).
// protowire writes the wire format from field numbers: no generated code
// and no descriptor in the binary.
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
			b = protowire.AppendFixed64(b, math.Float64bits(f.v))
		}
	}
	b = protowire.AppendTag(b, 7, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(now.UnixNano()))
}

// statsHandler serves the window as a Stat protobuf: the scrape closes it
// when it is a second old or more (stats.Recorder.Snapshot).
func (a *app) statsHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/protobuf")
	w.Write(encodeStat(a.cfg.Labels.Pod, a.stats.Snapshot(), time.Now()))
}

// metricsHandler serves the Prometheus text exposition: queue's own
// metrics, then the families Knative's queue-proxy exports under the names
// it exports them (knativeMetrics), then the Go runtime and process
// metrics.
func (a *app) metricsHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if err := a.stats.WritePrometheus(w, a.promLabels, stats.Gauges{Depth: a.depth, Limit: a.limit}); err != nil {
		return
	}
	var g ingress.Glitches
	if a.ingress != nil {
		g = a.ingress.Glitches()
	}
	if _, err := w.Write(appendGlitchMetrics(make([]byte, 0, 1024), a.promLabels, g)); err != nil {
		return
	}
	if _, err := w.Write(a.appendExportMetrics(make([]byte, 0, 256))); err != nil {
		return
	}
	if _, err := w.Write(a.knativeMetrics()); err != nil {
		return
	}
	w.Write(appendRuntimeMetrics(make([]byte, 0, 8192)))
}

// appendGlitchMetrics appends the glitch counters of the serving ports
// (docs/contract.md section 5), by protocol, with the labels of the
// queue_* series.
func appendGlitchMetrics(b []byte, labels string, g ingress.Glitches) []byte {
	for _, fam := range [...]struct {
		name, help    string
		http1, h2, h3 uint64
	}{
		{"queue_glitches_total", "Protocol abuse counted against the connections of the serving ports: requests queue refused itself, and on HTTP/2 and HTTP/3 frames and streams that served nothing.", g.HTTP1, g.HTTP2, g.HTTP3},
		{"queue_glitch_closes_total", "Connections of the serving ports closed for going past their glitch budget.", g.HTTP1Closed, g.HTTP2Closed, g.HTTP3Closed},
	} {
		b = stats.AppendMetricHeader(b, fam.name, "counter", fam.help)
		for _, p := range [...]struct {
			proto string
			v     uint64
		}{{"http1", fam.http1}, {"h2", fam.h2}, {"h3", fam.h3}} {
			b = append(b, fam.name...)
			b = append(b, `{protocol="`...)
			b = append(b, p.proto...)
			b = append(b, '"')
			if labels != "" {
				b = append(b, ',')
				b = append(b, labels...)
			}
			b = append(b, "} "...)
			b = strconv.AppendUint(b, p.v, 10)
			b = append(b, '\n')
		}
	}
	return b
}

// exporters are the OTLP exporters running: traces' and metrics'.
func (a *app) exporters() []*otlp.Exporter {
	var exps []*otlp.Exporter
	for _, e := range [...]*otlp.Exporter{a.tracer.Exporter(), a.pushExporter} {
		if e != nil {
			exps = append(exps, e)
		}
	}
	return exps
}

// appendExportMetrics appends queue_otlp_dropped_total, the export
// requests dropped because the collector was down or slow while the queue
// was full (package otlp), one series per signal exported over OTLP, with
// the labels of the queue_* series; nothing without an OTLP exporter.
func (a *app) appendExportMetrics(b []byte) []byte {
	exps := a.exporters()
	if len(exps) == 0 {
		return b
	}
	b = stats.AppendMetricHeader(b, "queue_otlp_dropped_total", "counter",
		"OTLP export requests dropped, the oldest first, because the collector was down or slow and the export queue was full.")
	for _, e := range exps {
		b = append(b, `queue_otlp_dropped_total{signal="`...)
		b = append(b, e.Signal().String()...)
		b = append(b, '"')
		if a.promLabels != "" {
			b = append(b, ',')
			b = append(b, a.promLabels...)
		}
		b = append(b, "} "...)
		b = strconv.AppendUint(b, e.Dropped(), 10)
		b = append(b, '\n')
	}
	return b
}

// knativeMetrics renders what Knative's queue-proxy exports through
// OpenTelemetry's Prometheus exporter, with the same names, label names and
// buckets: the invocation duration histogram by status code, the queue
// depth gauge (only with a concurrency limit, as Knative records it only
// with a breaker), and target_info carrying the revision's identity as the
// OpenTelemetry resource does. The identity is also on every kn_ series,
// so that no join is needed.
func (a *app) knativeMetrics() []byte {
	id := a.cfg.Labels.knative()
	b := make([]byte, 0, 2048)
	b = stats.AppendDurationHistogram(b, "kn_serving_invocation_duration_seconds",
		"The duration of task execution (queue: from arrival, time waiting for a slot included).", id,
		stats.ByStatus(a.stats.Durations()))
	if a.depth != nil {
		b = append(b, "# HELP kn_serving_queue_depth Number of current requests in the queue (queue: in flight, waiting or proxied).\n# TYPE kn_serving_queue_depth gauge\nkn_serving_queue_depth"...)
		if id != "" {
			b = append(b, '{')
			b = append(b, id...)
			b = append(b, '}')
		}
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(a.stats.Active()), 10)
		b = append(b, '\n')
	}
	b = append(b, "# HELP target_info Target metadata\n# TYPE target_info gauge\ntarget_info{"...)
	for i, kv := range a.resource {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendLabelName(b, kv.Key)
		b = append(b, `="`...)
		b = append(b, escapeLabel(kv.Str)...)
		b = append(b, '"')
	}
	b = append(b, "} 1\n"...)
	return b
}

// appendLabelName appends an OpenTelemetry attribute key as a Prometheus
// label name, as OpenTelemetry's Prometheus exporter writes it: every
// character other than a letter, a digit or _ becomes _.
func appendLabelName(b []byte, key string) []byte {
	for i := 0; i < len(key); i++ {
		c := key[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' {
			b = append(b, c)
		} else {
			b = append(b, '_')
		}
	}
	return b
}

// otelResource is what describes queue to OpenTelemetry, as Knative's
// queue-proxy describes itself (pkg/queue/sharedmain/otel.go): the
// container, the version, the revision's identity, and the service name,
// the first of the service, configuration, revision and pod that is set.
// otlp.ResourceAttributes adds OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME; traces, pushed metrics and target_info all carry the
// result.
func (c Config) otelResource() (base map[string]string, service string) {
	v, _ := buildInfo()
	base = map[string]string{"k8s.container.name": "queue-proxy", "service.version": v}
	for _, kv := range [...][2]string{{"k8s.namespace.name", c.Labels.Namespace}, {"k8s.pod.name", c.Labels.Pod},
		{"service.instance.id", c.Labels.Pod}, {"kn.service.name", c.Labels.Service},
		{"kn.configuration.name", c.Labels.Configuration}, {"kn.revision.name", c.Labels.Revision}} {
		if kv[1] != "" {
			base[kv[0]] = kv[1]
		}
	}
	return base, cmp.Or(c.Labels.Service, c.Labels.Configuration, c.Labels.Revision, c.Labels.Pod)
}

// resourceAttrs is the resource of c with the environment's additions, in
// key order. A malformed OTEL_RESOURCE_ATTRIBUTES, which tracing and the
// metrics push refuse at start, leaves them out.
func resourceAttrs(c Config) []otlp.Attr {
	base, service := c.otelResource()
	kv, err := otlp.ResourceAttributes(c.Getenv, base, service)
	if err != nil {
		kv, _ = otlp.ResourceAttributes(nil, base, service)
	}
	attrs := make([]otlp.Attr, 0, len(kv))
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		attrs = append(attrs, otlp.String(k, kv[k]))
	}
	return attrs
}

// knative renders the labels under the names Knative's OpenTelemetry
// resource uses, or "".
func (l Labels) knative() string {
	var parts []string
	for _, kv := range [...][2]string{{"k8s_namespace_name", l.Namespace}, {"kn_service_name", l.Service},
		{"kn_configuration_name", l.Configuration}, {"kn_revision_name", l.Revision}, {"k8s_pod_name", l.Pod}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+`="`+escapeLabel(kv[1])+`"`)
		}
	}
	return strings.Join(parts, ",")
}

// appendRuntimeMetrics appends the Go runtime and process families that
// every Go exporter has, under the names, types and meanings of
// client_golang's Go and process collectors (which Knative's queue-proxy
// serves through its default registry), so that dashboards and alerts
// built on them work unchanged. They are written here rather than by
// client_golang because its registry, protobuf descriptors and procfs
// would add megabytes to the binary and to idle RSS for some forty
// numbers.
// runtime.ReadMemStats stops the world for microseconds: once per scrape.
func appendRuntimeMetrics(b []byte) []byte {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	metric := func(name, typ, help string, v float64) {
		b = stats.AppendMetricHeader(b, name, typ, help)
		b = append(b, name...)
		b = append(b, ' ')
		b = appendNum(b, v)
		b = append(b, '\n')
	}

	var gc debug.GCStats
	gc.PauseQuantiles = make([]time.Duration, 5)
	debug.ReadGCStats(&gc)
	b = append(b, "# HELP go_gc_duration_seconds A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.\n# TYPE go_gc_duration_seconds summary\n"...)
	for i, q := range [...]string{"0", "0.25", "0.5", "0.75", "1"} {
		b = append(b, `go_gc_duration_seconds{quantile="`+q+`"} `...)
		b = appendNum(b, gc.PauseQuantiles[i].Seconds())
		b = append(b, '\n')
	}
	b = append(b, "go_gc_duration_seconds_sum "...)
	b = appendNum(b, gc.PauseTotal.Seconds())
	b = append(b, "\ngo_gc_duration_seconds_count "...)
	b = strconv.AppendInt(b, gc.NumGC, 10)
	b = append(b, '\n')

	samples := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	rtmetrics.Read(samples)
	for i, m := range [...]struct{ name, help string }{
		{"go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function."},
		{"go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function."},
	} {
		if samples[i].Value.Kind() == rtmetrics.KindUint64 {
			metric(m.name, "gauge", m.help, float64(samples[i].Value.Uint64()))
		}
	}
	metric("go_goroutines", "gauge", "Number of goroutines that currently exist.", float64(runtime.NumGoroutine()))
	b = append(b, "# HELP go_info Information about the Go environment.\n# TYPE go_info gauge\ngo_info{version=\""+runtime.Version()+"\"} 1\n"...)
	for _, m := range [...]struct {
		name, typ, help string
		v               uint64
	}{
		{"go_memstats_alloc_bytes", "gauge", "Number of heap bytes allocated and currently in use, same as go_memstats_heap_alloc_bytes.", ms.Alloc},
		{"go_memstats_alloc_bytes_total", "counter", "Total number of heap bytes allocated, even if freed.", ms.TotalAlloc},
		{"go_memstats_buck_hash_sys_bytes", "gauge", "Number of bytes used by the profiling bucket hash table.", ms.BuckHashSys},
		{"go_memstats_frees_total", "counter", "Total number of heap objects frees.", ms.Frees},
		{"go_memstats_gc_sys_bytes", "gauge", "Number of bytes used for garbage collection system metadata.", ms.GCSys},
		{"go_memstats_heap_alloc_bytes", "gauge", "Number of heap bytes allocated and currently in use.", ms.HeapAlloc},
		{"go_memstats_heap_idle_bytes", "gauge", "Number of heap bytes waiting to be used.", ms.HeapIdle},
		{"go_memstats_heap_inuse_bytes", "gauge", "Number of heap bytes that are in use.", ms.HeapInuse},
		{"go_memstats_heap_objects", "gauge", "Number of currently allocated objects.", ms.HeapObjects},
		{"go_memstats_heap_released_bytes", "gauge", "Number of heap bytes released to OS.", ms.HeapReleased},
		{"go_memstats_heap_sys_bytes", "gauge", "Number of heap bytes obtained from system.", ms.HeapSys},
		{"go_memstats_mallocs_total", "counter", "Total number of heap objects allocated, both live and gc-ed.", ms.Mallocs},
		{"go_memstats_mcache_inuse_bytes", "gauge", "Number of bytes in use by mcache structures.", ms.MCacheInuse},
		{"go_memstats_mcache_sys_bytes", "gauge", "Number of bytes used for mcache structures obtained from system.", ms.MCacheSys},
		{"go_memstats_mspan_inuse_bytes", "gauge", "Number of bytes in use by mspan structures.", ms.MSpanInuse},
		{"go_memstats_mspan_sys_bytes", "gauge", "Number of bytes used for mspan structures obtained from system.", ms.MSpanSys},
		{"go_memstats_next_gc_bytes", "gauge", "Number of heap bytes when next garbage collection will take place.", ms.NextGC},
		{"go_memstats_other_sys_bytes", "gauge", "Number of bytes used for other system allocations.", ms.OtherSys},
		{"go_memstats_stack_inuse_bytes", "gauge", "Number of bytes obtained from system for stack allocator in non-CGO environments.", ms.StackInuse},
		{"go_memstats_stack_sys_bytes", "gauge", "Number of bytes obtained from system for stack allocator.", ms.StackSys},
		{"go_memstats_sys_bytes", "gauge", "Number of bytes obtained from system.", ms.Sys},
	} {
		metric(m.name, m.typ, m.help, float64(m.v))
	}
	metric("go_memstats_last_gc_time_seconds", "gauge", "Number of seconds since 1970 of last garbage collection.", float64(ms.LastGC)/1e9)
	metric("go_sched_gomaxprocs_threads", "gauge", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously.", float64(runtime.GOMAXPROCS(0)))
	threads, _ := runtime.ThreadCreateProfile(nil)
	metric("go_threads", "gauge", "Number of OS threads created.", float64(threads))

	p, ok := readProcess()
	if !ok {
		return b // no /proc: the process families are left out, as client_golang does
	}
	metric("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", p.cpu)
	if p.maxFDs > 0 {
		metric("process_max_fds", "gauge", "Maximum number of open file descriptors.", p.maxFDs)
	}
	metric("process_open_fds", "gauge", "Number of open file descriptors.", p.openFDs)
	metric("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", p.rss)
	metric("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", p.start)
	metric("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", p.vsize)
	return b
}

// processStats are the process_* values, read from Linux's /proc.
type processStats struct {
	cpu, rss, vsize, start, openFDs, maxFDs float64
}

// userHZ is the unit of /proc's CPU times and start time: USER_HZ, which
// Linux fixes at 100 on every architecture Go supports.
const userHZ = 100

// readProcess reads /proc/self/stat, /proc/stat (the boot time),
// /proc/self/fd and /proc/self/limits. ok is false off Linux.
func readProcess() (p processStats, ok bool) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return p, false
	}
	// The command name, in parentheses, may hold spaces: fields start after
	// the last ')'. Field 3 (state) is f[0]; utime is field 14.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return p, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 22 {
		return p, false
	}
	num := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	p.cpu = (num(f[11]) + num(f[12])) / userHZ
	p.vsize = num(f[20])
	p.rss = num(f[21]) * float64(os.Getpagesize())
	if st, err := os.ReadFile("/proc/stat"); err == nil {
		for line := range strings.Lines(string(st)) {
			if v, found := strings.CutPrefix(line, "btime "); found {
				p.start = num(strings.TrimSpace(v)) + num(f[19])/userHZ
			}
		}
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		p.openFDs = float64(len(fds))
	}
	if lim, err := os.ReadFile("/proc/self/limits"); err == nil {
		for line := range strings.Lines(string(lim)) {
			if rest, found := strings.CutPrefix(line, "Max open files"); found {
				if fs := strings.Fields(rest); len(fs) > 0 {
					p.maxFDs = num(fs[0])
				}
			}
		}
	}
	return p, true
}

// appendNum appends v as Prometheus writes a sample value; the runtime's
// numbers are always finite.
func appendNum(b []byte, v float64) []byte { return strconv.AppendFloat(b, v, 'g', -1, 64) }
