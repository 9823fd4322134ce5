package knativetest

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	collectormetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// TestKnativeOperatorTelemetry runs queue as Knative's reconciler makes it
// for a gRPC app (an h2c-only server on a port named h2c, an httpGet
// readiness probe, config-features' autodetect-http2 on) under each OTLP
// protocol an operator can choose for request metrics and tracing,
// against a real OTLP receiver (the collector's protobuf services, over
// gRPC on 4317 and HTTP on 4318), and checks what arrives: the metric and
// span names, their attributes and resource, and the log's keys.
func TestKnativeOperatorTelemetry(t *testing.T) {
	if !inNamespace(t, "TestKnativeOperatorTelemetry") {
		return
	}
	rcv := startReceiver(t)
	app := startH2COnlyApp(t)
	certDir, caPEM, _ := writeCert(t)

	for _, tc := range []struct {
		protocol, tracing, metrics string
		logging                    map[string]string
	}{
		// config-logging as Knative ships it.
		{"grpc", "http://127.0.0.1:4317", "http://127.0.0.1:4317", map[string]string{"zap-logger-config": knativeExampleLogging}},
		// config-logging left empty: knative.dev/pkg's defaults.
		{"http/protobuf", "http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:4318", nil},
	} {
		t.Run(strings.ReplaceAll(tc.protocol, "/", "-"), func(t *testing.T) {
			rcv.reset()
			const interval = time.Second
			container := queueContainer(t, operator{rootCA: string(caPEM), logging: tc.logging, portName: "h2c",
				observability: map[string]string{
					"tracing-protocol":                tc.protocol,
					"tracing-endpoint":                tc.tracing,
					"tracing-sampling-rate":           "1",
					"request-metrics-protocol":        tc.protocol,
					"request-metrics-endpoint":        tc.metrics,
					"request-metrics-export-interval": interval.String(),
				}})
			env := resolve(t, container.Env)
			// The serving port: 8013 for a port named h2c, which also makes
			// the upstream h2c.
			listen := ""
			for _, kv := range env {
				if v, ok := strings.CutPrefix(kv, "QUEUE_SERVING_PORT="); ok {
					listen = "127.0.0.1:" + v
				}
			}
			if listen != "127.0.0.1:8013" {
				t.Fatalf("serving port %q, want Knative's 8013 for an h2c app", listen)
			}

			// Ready: the httpGet probe found the app's h2c.
			q := startQueue(t, env, certDir)
			if app.h2cProbes() == 0 {
				t.Error("the app never saw an h2c probe")
			}

			// A request through queue to the h2c app.
			res, err := client.Get("http://" + listen + "/greet")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || string(body) != "hello over HTTP/2.0" {
				t.Fatalf("through queue: %d %q", res.StatusCode, body)
			}
			served := time.Now()

			// kn.serving.invocation.duration at the next export: a point
			// is due within two export intervals of the request; the wait
			// allows ten times that, for a loaded machine, and the time it
			// took is logged.
			deadline := time.NewTimer(20 * interval)
			defer deadline.Stop()
			var point, resource map[string]string
			for point == nil {
				point, resource = rcv.invocation()
				if point != nil {
					break
				}
				select {
				case <-rcv.got:
				case <-deadline.C:
					t.Fatalf("no kn.serving.invocation.duration within %v of the request (export interval %v)", 20*interval, interval)
				}
			}
			t.Logf("kn.serving.invocation.duration arrived %v after the request", time.Since(served))
			if point["http.response.status_code"] != "200" {
				t.Errorf("kn.serving.invocation.duration attributes %v, want http.response.status_code 200", point)
			}
			for k, want := range map[string]string{"service.name": service, "k8s.namespace.name": namespace, "k8s.pod.name": pod,
				"kn.service.name": service, "kn.configuration.name": service, "kn.revision.name": revision} {
				if resource[k] != want {
					t.Errorf("metrics resource %s = %q, want %q", k, resource[k], want)
				}
			}

			// SIGINT: drain, flush the spans, exit 0.
			q.interrupt(t)
			spans := rcv.spanNames()
			if spans["kn.queueproxy.proxy"] != 1 || spans["GET"] != 1 {
				t.Errorf("spans %v, want the server span GET and kn.queueproxy.proxy", spans)
			}

			// Every line of the log has Knative's keys and fields, wherever
			// config-logging sends it; the request log is off.
			n := 0
			for _, out := range []string{q.stdout.String(), q.stderr.String()} {
				for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
					if l == "" {
						continue
					}
					n++
					var m map[string]any
					if err := json.Unmarshal([]byte(l), &m); err != nil {
						t.Errorf("log line not JSON: %s", l)
						continue
					}
					for _, k := range []string{"timestamp", "severity", "message", "logger", "caller"} {
						if _, ok := m[k]; !ok {
							t.Errorf("log line without %s: %s", k, l)
						}
					}
					if m["knative.dev/key"] != namespace+"/"+revision || m["knative.dev/pod"] != pod {
						t.Errorf("log line without Knative's fields: %s", l)
					}
				}
			}
			if n == 0 {
				t.Error("no log line")
			}
		})
	}
}

// h2cOnlyApp is a user container that speaks nothing but HTTP/2 with
// prior knowledge, as a gRPC server does.
type h2cOnlyApp struct {
	mu     sync.Mutex
	probes int // readiness probes that arrived over h2c
}

func (a *h2cOnlyApp) h2cProbes() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.probes
}

func startH2COnlyApp(t *testing.T) *h2cOnlyApp {
	t.Helper()
	a := &h2cOnlyApp{}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			a.mu.Lock()
			a.probes++
			a.mu.Unlock()
			return
		}
		io.WriteString(w, "hello over "+r.Proto)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return a
}

// receiver is an OTLP receiver for both signals over both transports:
// grpc-go serving the collector's TraceService and MetricsService on 4317,
// and OTLP/HTTP (/v1/traces, /v1/metrics) decoding the same messages on
// 4318.
type receiver struct {
	collectortracepb.UnimplementedTraceServiceServer
	got chan struct{} // a signal per export

	mu      sync.Mutex
	metrics []*collectormetricspb.ExportMetricsServiceRequest
	traces  []*collectortracepb.ExportTraceServiceRequest
}

type metricsService struct {
	collectormetricspb.UnimplementedMetricsServiceServer
	r *receiver
}

func (s metricsService) Export(_ context.Context, req *collectormetricspb.ExportMetricsServiceRequest) (*collectormetricspb.ExportMetricsServiceResponse, error) {
	s.r.add(req)
	return &collectormetricspb.ExportMetricsServiceResponse{}, nil
}

func (r *receiver) Export(_ context.Context, req *collectortracepb.ExportTraceServiceRequest) (*collectortracepb.ExportTraceServiceResponse, error) {
	r.add(req)
	return &collectortracepb.ExportTraceServiceResponse{}, nil
}

func (r *receiver) add(m proto.Message) {
	r.mu.Lock()
	switch m := m.(type) {
	case *collectormetricspb.ExportMetricsServiceRequest:
		r.metrics = append(r.metrics, m)
	case *collectortracepb.ExportTraceServiceRequest:
		r.traces = append(r.traces, m)
	}
	r.mu.Unlock()
	select {
	case r.got <- struct{}{}:
	default:
	}
}

func (r *receiver) reset() {
	r.mu.Lock()
	r.metrics, r.traces = nil, nil
	r.mu.Unlock()
}

// invocation returns the attributes and resource of the latest
// kn.serving.invocation.duration point that counts a request.
func (r *receiver) invocation() (point, resource map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, req := range r.metrics {
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					if m.GetName() != "kn.serving.invocation.duration" || m.GetUnit() != "s" {
						continue
					}
					for _, p := range m.GetHistogram().GetDataPoints() {
						if p.GetCount() > 0 {
							point, resource = attrs(p.GetAttributes()), attrs(rm.GetResource().GetAttributes())
						}
					}
				}
			}
		}
	}
	return point, resource
}

// spanNames counts the spans received by name; each must carry the
// revision in its resource.
func (r *receiver) spanNames() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, req := range r.traces {
		for _, rs := range req.GetResourceSpans() {
			if attrs(rs.GetResource().GetAttributes())["kn.revision.name"] != revision {
				out["without kn.revision.name"]++
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					out[s.GetName()]++
				}
			}
		}
	}
	return out
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			out[kv.GetKey()] = v.GetStringValue()
		default:
			out[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
		}
	}
	return out
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{got: make(chan struct{}, 64)}
	gln, err := net.Listen("tcp", "127.0.0.1:4317")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortracepb.RegisterTraceServiceServer(gs, r)
	collectormetricspb.RegisterMetricsServiceServer(gs, metricsService{r: r})
	go gs.Serve(gln)
	t.Cleanup(gs.Stop)

	hln, err := net.Listen("tcp", "127.0.0.1:4318")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var m proto.Message
		switch req.URL.Path {
		case "/v1/traces":
			m = &collectortracepb.ExportTraceServiceRequest{}
		case "/v1/metrics":
			m = &collectormetricspb.ExportMetricsServiceRequest{}
		default:
			http.NotFound(w, req)
			return
		}
		if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a POST of application/x-protobuf", http.StatusUnsupportedMediaType)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err == nil {
			err = proto.Unmarshal(b, m)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(m)
		w.Header().Set("Content-Type", "application/x-protobuf")
	})}
	go hs.Serve(hln)
	t.Cleanup(func() { hs.Close() })
	return r
}
