package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// queueImage is the repository of queue's image; a container whose image is in
// it is the queue sidecar.
const queueImage = "ghcr.io/queue-dev/queue"

// Queue's defaults, from docs/contract.md section 1.1.
const (
	defaultListen        = ":8012"
	defaultAdminListen   = ":8022"
	defaultMetricsListen = ":9091"
	defaultTimeout       = 300 * time.Second
	// The quiet period's default depends on the mode: none standalone, 30 s
	// in Knative mode, which SERVING_REVISION in the environment selects.
	defaultDrainQuietPeriod = 0
	knativeDrainQuietPeriod = 30 * time.Second
	knativeModeVar          = "SERVING_REVISION"
	// Kubernetes' default terminationGracePeriodSeconds.
	defaultGracePeriod = 30 * time.Second
	// measuredRSS1000Conns is queue's RSS with 1000 keep-alive connections, from
	// bench/compare.sh: its memory limit must not be below it.
	measuredRSS1000Conns = "80Mi"
)

// kinds maps every kind that may appear under deploy/ to a new typed object.
// A document of any other kind fails the test, so that a new manifest cannot
// go unchecked: add its kind here.
var kinds = map[schema.GroupVersionKind]func() any{
	appsv1.SchemeGroupVersion.WithKind("Deployment"):                     func() any { return new(appsv1.Deployment) },
	corev1.SchemeGroupVersion.WithKind("Service"):                        func() any { return new(corev1.Service) },
	corev1.SchemeGroupVersion.WithKind("ConfigMap"):                      func() any { return new(corev1.ConfigMap) },
	autoscalingv2.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"): func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	scaledObjectGVK: func() any { return new(scaledObject) },
}

// decode decodes one YAML document strictly, as the API server's strict field
// validation does: duplicate keys, unknown fields and fields in the wrong case
// are errors (sigs.k8s.io/json is the API server's decoder; encoding/json would
// match field names case-insensitively). It returns nil, nil for an empty
// document (only comments).
func decode(doc []byte) (any, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	if s := string(bytes.TrimSpace(j)); s == "null" || s == "" {
		return nil, nil
	}
	var tm metav1.TypeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(j, &tm); err != nil {
		return nil, fmt.Errorf("apiVersion/kind: %w", err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return nil, fmt.Errorf("missing apiVersion or kind (apiVersion=%q kind=%q)", tm.APIVersion, tm.Kind)
	}
	gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
	newObj, ok := kinds[gvk]
	if !ok {
		return nil, fmt.Errorf("unknown kind %s: add it to kinds in manifests_test.go", gvk)
	}
	obj := newObj()
	strict, err := sigsjson.UnmarshalStrict(j, obj)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", gvk.Kind, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("decode %s strictly: %w", gvk.Kind, errors.Join(strict...))
	}
	return obj, nil
}

// manifest is one decoded document.
type manifest struct {
	where string // file and document number, for messages
	file  string // the file's path, relative to the module
	obj   any
}

// loaded holds every document under the module's directory, decoded once for
// all the tests.
var loaded = sync.OnceValues(load)

// load walks the module's directory for YAML files, splits each into its
// documents and decodes every document with decode. It returns what decoded,
// and one error for each document or file that did not.
func load() ([]manifest, []error) {
	var out []manifest
	var errs []error
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		r := utilyaml.NewYAMLReader(bufio.NewReader(f))
		n := 0 // documents that are not empty
		for i := 1; ; i++ {
			doc, err := r.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			where := fmt.Sprintf("%s#%d", path, i)
			obj, err := decode(doc)
			if err != nil {
				n++
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
				continue
			}
			if obj != nil {
				n++
				out = append(out, manifest{where: where, file: path, obj: obj})
			}
		}
		if n == 0 {
			errs = append(errs, fmt.Errorf("%s: no Kubernetes object in it", path))
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return out, errs
}

// manifests returns the decoded documents for a test of their invariants; a
// document that did not decode fails TestManifestsDecodeStrictly, and stops
// the others here.
func manifests(t *testing.T) []manifest {
	t.Helper()
	ms, errs := loaded()
	if len(errs) > 0 {
		t.Fatalf("%d manifests do not decode; see TestManifestsDecodeStrictly", len(errs))
	}
	return ms
}

func all[T any](ms []manifest) []T {
	var out []T
	for _, m := range ms {
		if o, ok := m.obj.(T); ok {
			out = append(out, o)
		}
	}
	return out
}

// TestManifestsDecodeStrictly: every document under deploy/ decodes
// strictly as its kind, and each kind the other tests check is there.
func TestManifestsDecodeStrictly(t *testing.T) {
	ms, errs := loaded()
	for _, err := range errs {
		t.Error(err)
	}
	// Each of these must exist; without them the other tests would pass on nothing.
	for _, want := range []struct {
		what  string
		found bool
	}{
		{"Deployment", len(all[*appsv1.Deployment](ms)) > 0},
		{"Service", len(all[*corev1.Service](ms)) > 0},
		{"HorizontalPodAutoscaler", len(all[*autoscalingv2.HorizontalPodAutoscaler](ms)) > 0},
		{"ConfigMap knative-serving/config-deployment", slices.ContainsFunc(all[*corev1.ConfigMap](ms), isKnativeDeploymentConfig)},
		{"KEDA ScaledObject", len(all[*scaledObject](ms)) > 0},
		{"Prometheus Adapter configuration", slices.ContainsFunc(all[*corev1.ConfigMap](ms), func(cm *corev1.ConfigMap) bool {
			_, ok := cm.Data[adapterConfigKey]
			return ok
		})},
	} {
		if !want.found {
			t.Errorf("no %s under deploy/", want.what)
		}
	}
}

// TestDecodeRejects proves that decode is strict: each document is wrong in
// one way and must not decode, for that fault (the error names it), not
// another.
func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown field", "apiVersion: v1\nkind: Service\nspec:\n  portz: []\n", "spec.portz"},
		{"unknown nested field", "apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n        - name: a\n          securityContext:\n            readOnlyRootFileSystem: true\n", "securityContext.readOnlyRootFileSystem"},
		{"field in the wrong case", "apiVersion: v1\nkind: Service\nSpec: {}\n", `"Spec"`},
		{"duplicate key", "apiVersion: v1\nkind: ConfigMap\ndata:\n  a: x\n  a: y\n", `"a" already set`},
		{"unknown kind", "apiVersion: example.com/v1\nkind: Widget\nspec: {}\n", "Kind=Widget"},
		{"KEDA kind in the wrong version", "apiVersion: keda.sh/v1alpha2\nkind: ScaledObject\nspec: {}\n", "keda.sh/v1alpha2"},
		{"kind in the wrong version", "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\n", "autoscaling/v1"},
		{"no kind", "apiVersion: v1\ndata: {}\n", "kind"},
		{"bad quantity", "apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n        - name: a\n          resources:\n            limits:\n              memory: lots\n", "quantities"},
		{"wrong type", "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: two\n", "replicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj, err := decode([]byte(tc.doc))
			if err == nil {
				t.Fatalf("decode(%q) = %T, nil; want an error", tc.doc, obj)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decode(%q) = %v, want an error naming %s", tc.doc, err, tc.want)
			}
		})
	}
}

// queueSettings is what the manifests must agree with, read from the queue
// container's command line and environment as queue itself reads them.
type queueSettings struct {
	servingPort, adminPort, metricsPort int32
	quietPeriod, drainTimeout           time.Duration
}

// boolFlags are queue's flags that take no value.
var boolFlags = []string{"access-log", "pprof", "version", "help", "h"}

// setting returns a queue setting as queue reads it: the flag (-name v,
// --name v, -name=v or --name=v, until the first non-flag argument or "--",
// as Go's flag package parses them), else the environment variable
// QUEUE_<NAME>, else def.
func setting(c corev1.Container, name, def string) (string, error) {
	args := c.Args
	if len(c.Command) > 0 {
		args = append(slices.Clone(c.Command[1:]), c.Args...)
	}
	val, found := "", false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		n, v, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if !hasValue && !slices.Contains(boolFlags, n) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("flag -%s has no value", n)
			}
			i++
			v = args[i]
		}
		if n == name {
			val, found = v, true // the last one wins, as with Go's flag package
		}
	}
	if found {
		return val, nil
	}
	env := "QUEUE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	for _, e := range c.Env {
		if e.Name == env {
			if e.ValueFrom != nil {
				return "", fmt.Errorf("%s comes from valueFrom, which this test cannot check", env)
			}
			return e.Value, nil
		}
	}
	return def, nil
}

func settingPort(c corev1.Container, name, def string) (int32, string, error) {
	addr, err := setting(c, name, def)
	if err != nil {
		return 0, "", err
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, "", fmt.Errorf("--%s %q: %w", name, addr, err)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return 0, "", fmt.Errorf("--%s %q: %w", name, addr, err)
	}
	return int32(port), host, nil
}

func settingDuration(c corev1.Container, name, def string) (time.Duration, error) {
	s, err := setting(c, name, def)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: %w", name, s, err)
	}
	return d, nil
}

func readSettings(c corev1.Container) (queueSettings, error) {
	var s queueSettings
	var errs []error
	var err error
	var adminHost string
	s.servingPort, _, err = settingPort(c, "listen", defaultListen)
	errs = append(errs, err)
	s.adminPort, adminHost, err = settingPort(c, "admin-listen", defaultAdminListen)
	errs = append(errs, err)
	if adminHost != "" && adminHost != "0.0.0.0" && adminHost != "::" {
		// The kubelet sends the preStop request to the pod IP.
		errs = append(errs, fmt.Errorf("--admin-listen binds %q: the app's preStop hook cannot reach it", adminHost))
	}
	s.metricsPort, _, err = settingPort(c, "metrics-listen", defaultMetricsListen)
	errs = append(errs, err)
	quiet := time.Duration(defaultDrainQuietPeriod)
	if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == knativeModeVar && (e.Value != "" || e.ValueFrom != nil) }) {
		quiet = knativeDrainQuietPeriod
	}
	s.quietPeriod, err = settingDuration(c, "drain-quiet-period", quiet.String())
	errs = append(errs, err)
	timeout, err := settingDuration(c, "timeout", defaultTimeout.String())
	errs = append(errs, err)
	s.drainTimeout, err = settingDuration(c, "drain-timeout", timeout.String())
	errs = append(errs, err)
	// A malformed command line fails every setting alike: say it once.
	var once []error
	for _, err := range errs {
		if err != nil && !slices.ContainsFunc(once, func(e error) bool { return e.Error() == err.Error() }) {
			once = append(once, err)
		}
	}
	return s, errors.Join(once...)
}

func isQueue(c corev1.Container) bool {
	return strings.HasPrefix(c.Image, queueImage+":") || strings.HasPrefix(c.Image, queueImage+"@")
}

// queueContainer returns the pod's one queue container.
func queueContainer(t *testing.T, where string, spec corev1.PodSpec) (corev1.Container, bool) {
	t.Helper()
	for _, c := range spec.InitContainers {
		if isQueue(c) {
			t.Errorf("%s: init container %q runs queue: as a native sidecar it would be stopped after the app, not before", where, c.Name)
		}
	}
	var qs []corev1.Container
	for _, c := range spec.Containers {
		if isQueue(c) {
			qs = append(qs, c)
		}
	}
	if len(qs) != 1 {
		t.Errorf("%s: %d containers run %s, want 1", where, len(qs), queueImage)
		return corev1.Container{}, false
	}
	return qs[0], true
}

// TestDeployments checks every Deployment here that runs queue: one queue
// container, not an init container; a selector of its pods; queue hardened
// (read-only root, non-root, no privilege escalation, no capabilities,
// RuntimeDefault seccomp); requests set and a memory limit at least the
// measured RSS; readiness on the serving port, liveness on /live; a grace
// period covering the drain; each app container's preStop hook on queue's
// /wait-for-drain.
func TestDeployments(t *testing.T) {
	for _, m := range manifests(t) {
		d, ok := m.obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		where := m.where + " Deployment " + d.Name
		spec := d.Spec.Template.Spec
		q, ok := queueContainer(t, where, spec)
		if !ok {
			continue
		}
		s, err := readSettings(q)
		if err != nil {
			t.Errorf("%s: queue settings: %v", where, err)
			continue
		}

		if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || sel.Empty() ||
			!sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not select the template's labels %v (err %v)", where, d.Spec.Selector, d.Spec.Template.Labels, err)
		}

		t.Run(d.Name+"/security", func(t *testing.T) {
			sc := q.SecurityContext
			if sc == nil {
				t.Fatalf("%s: queue has no securityContext", where)
			}
			pod := spec.SecurityContext
			if pod == nil {
				pod = &corev1.PodSecurityContext{}
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: queue readOnlyRootFilesystem is not true", where)
			}
			if v := cmpOr(sc.RunAsNonRoot, pod.RunAsNonRoot); v == nil || !*v {
				t.Errorf("%s: queue runAsNonRoot is not true", where)
			}
			if v := cmpOr(sc.RunAsUser, pod.RunAsUser); v != nil && *v != 65532 {
				t.Errorf("%s: queue runAsUser = %d, want 65532 (the image's user) or unset", where, *v)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: queue allowPrivilegeEscalation is not false", where)
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
				t.Errorf("%s: queue capabilities = %+v, want drop [ALL] and no add", where, sc.Capabilities)
			}
			if v := cmpOr(sc.SeccompProfile, pod.SeccompProfile); v == nil || v.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s: queue seccompProfile = %+v, want RuntimeDefault", where, v)
			}
		})

		t.Run(d.Name+"/resources", func(t *testing.T) {
			r := q.Resources
			if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() {
				t.Errorf("%s: queue requests = %v, want cpu and memory", where, r.Requests)
			}
			lim := r.Limits.Memory()
			if want := resource.MustParse(measuredRSS1000Conns); lim.Cmp(want) < 0 {
				t.Errorf("%s: queue memory limit %s is below the measured RSS with 1000 connections (%s)", where, lim, &want)
			}
			if lim.Cmp(*r.Requests.Memory()) < 0 {
				t.Errorf("%s: queue memory limit %s < request %s", where, lim, r.Requests.Memory())
			}
		})

		t.Run(d.Name+"/probes", func(t *testing.T) {
			// Readiness through the serving port: queue answers the kubelet's
			// kube-probe requests itself.
			if p := q.ReadinessProbe; p == nil || p.HTTPGet == nil || port(p.HTTPGet.Port, q) != s.servingPort {
				t.Errorf("%s: queue readinessProbe = %+v, want httpGet on the serving port %d", where, p, s.servingPort)
			}
			if p := q.LivenessProbe; p == nil || p.HTTPGet == nil || port(p.HTTPGet.Port, q) != s.adminPort || p.HTTPGet.Path != "/live" {
				t.Errorf("%s: queue livenessProbe = %+v, want httpGet /live on the admin port %d", where, p, s.adminPort)
			}
		})

		t.Run(d.Name+"/drain", func(t *testing.T) {
			if s.drainTimeout <= 0 {
				t.Fatalf("%s: queue's drain timeout is %v (no limit): no grace period covers it; set --drain-timeout", where, s.drainTimeout)
			}
			grace := defaultGracePeriod
			if spec.TerminationGracePeriodSeconds != nil {
				grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
			}
			if need := s.quietPeriod + s.drainTimeout; grace < need {
				t.Errorf("%s: terminationGracePeriodSeconds = %v < drain quiet period %v + drain timeout %v", where, grace, s.quietPeriod, s.drainTimeout)
			}
			apps := 0
			for _, c := range spec.Containers {
				if isQueue(c) {
					continue
				}
				apps++
				var h *corev1.HTTPGetAction
				if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
					h = c.Lifecycle.PreStop.HTTPGet
				}
				if h == nil || h.Path != "/wait-for-drain" || port(h.Port, q) != s.adminPort || h.Host != "" {
					t.Errorf("%s: container %q preStop httpGet = %+v, want /wait-for-drain on queue's admin port %d and no host (the pod IP; 127.0.0.1 would be the node's)",
						where, c.Name, h, s.adminPort)
				}
			}
			if apps == 0 {
				t.Errorf("%s: no app container beside queue", where)
			}
		})
	}
}

// port resolves a probe's or hook's port, a number or the name of one of
// queue's ports, to a number (0 when the name is not found).
func port(p intstr.IntOrString, c corev1.Container) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return 0
}

func cmpOr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// TestServicesTargetQueue: every Service here selects a Deployment's pods
// and sends each of its ports to queue's serving port, one of them named
// http.
func TestServicesTargetQueue(t *testing.T) {
	ms := manifests(t)
	deps := all[*appsv1.Deployment](ms)
	for _, m := range ms {
		svc, ok := m.obj.(*corev1.Service)
		if !ok {
			continue
		}
		where := m.where + " Service " + svc.Name
		var dep *appsv1.Deployment
		for _, d := range deps {
			if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				dep = d
			}
		}
		if dep == nil {
			t.Errorf("%s: selector %v selects no Deployment's pods here", where, svc.Spec.Selector)
			continue
		}
		q, ok := queueContainer(t, where, dep.Spec.Template.Spec)
		if !ok {
			continue
		}
		s, err := readSettings(q)
		if err != nil {
			t.Errorf("%s: queue settings: %v", where, err)
			continue
		}
		named := false
		for _, p := range svc.Spec.Ports {
			named = named || p.Name == "http"
			target := p.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(p.Port) // Kubernetes' default
			}
			if got := port(target, q); got != s.servingPort {
				t.Errorf("%s: port %q targets %s (%d), want queue's serving port %d", where, p.Name, target.String(), got, s.servingPort)
			}
		}
		if !named {
			t.Errorf("%s: no port named http", where)
		}
	}
}

// TestAutoscalers: every HPA here scales a Deployment here that sets no
// replicas, on a Pods metric of queue's, with the pods annotated for
// scraping queue's metrics port.
func TestAutoscalers(t *testing.T) {
	ms := manifests(t)
	deps := all[*appsv1.Deployment](ms)
	for _, m := range ms {
		hpa, ok := m.obj.(*autoscalingv2.HorizontalPodAutoscaler)
		if !ok {
			continue
		}
		where := m.where + " HorizontalPodAutoscaler " + hpa.Name
		ref := hpa.Spec.ScaleTargetRef
		i := slices.IndexFunc(deps, func(d *appsv1.Deployment) bool {
			return ref.Kind == "Deployment" && ref.APIVersion == "apps/v1" && ref.Name == d.Name
		})
		if i < 0 {
			t.Errorf("%s: scaleTargetRef %+v is no Deployment here", where, ref)
			continue
		}
		dep := deps[i]
		if dep.Spec.Replicas != nil {
			t.Errorf("%s: Deployment %s sets replicas; re-applying it would override the autoscaler", where, dep.Name)
		}
		queueMetric := false
		for _, mt := range hpa.Spec.Metrics {
			queueMetric = queueMetric || mt.Pods != nil && strings.HasPrefix(mt.Pods.Metric.Name, "queue_")
		}
		if !queueMetric {
			t.Errorf("%s: no Pods metric from queue (queue_*)", where)
			continue
		}
		q, ok := queueContainer(t, where, dep.Spec.Template.Spec)
		if !ok {
			continue
		}
		s, err := readSettings(q)
		if err != nil {
			t.Errorf("%s: queue settings: %v", where, err)
			continue
		}
		a := dep.Spec.Template.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != strconv.Itoa(int(s.metricsPort)) {
			t.Errorf("%s: Deployment %s's pods are not annotated for scraping queue's metrics port %d: %v", where, dep.Name, s.metricsPort, a)
		}
	}
}

func isKnativeDeploymentConfig(cm *corev1.ConfigMap) bool {
	return cm.Namespace == "knative-serving" && cm.Name == "config-deployment"
}

// TestKnativeConfig checks that Knative is told to inject the same queue image
// that the plain Kubernetes manifests use, so that a release bumps both.
func TestKnativeConfig(t *testing.T) {
	ms := manifests(t)
	var images []string
	for _, d := range all[*appsv1.Deployment](ms) {
		for _, c := range d.Spec.Template.Spec.Containers {
			if isQueue(c) {
				images = append(images, c.Image)
			}
		}
	}
	for _, m := range ms {
		cm, ok := m.obj.(*corev1.ConfigMap)
		if !ok || !isKnativeDeploymentConfig(cm) {
			continue
		}
		img := cm.Data["queue-sidecar-image"]
		if !isQueue(corev1.Container{Image: img}) {
			t.Errorf("%s: queue-sidecar-image = %q, want an image of %s", m.where, img, queueImage)
		}
		for _, want := range images {
			if img != want {
				t.Errorf("%s: queue-sidecar-image = %q, but a Deployment runs %q", m.where, img, want)
			}
		}
	}
}

// TestSetting: readSettings reads queue's ports and drain settings as queue
// does (flags over QUEUE_ variables over the defaults, the quiet period's
// default by mode, the drain timeout following --timeout), and refuses a
// malformed value, a flag without one, and an admin port the kubelet
// cannot reach.
func TestSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    corev1.Container
		want queueSettings
		bad  string // a refusal's error names it
	}{
		{name: "defaults", c: corev1.Container{Args: []string{"--upstream", ":8080"}},
			want: queueSettings{8012, 8022, 9091, 0, 300 * time.Second}},
		{name: "Knative mode's quiet period", c: corev1.Container{Env: []corev1.EnvVar{{Name: "SERVING_REVISION", Value: "hello-00001"}}},
			want: queueSettings{8012, 8022, 9091, 30 * time.Second, 300 * time.Second}},
		{name: "drain timeout follows --timeout", c: corev1.Container{Args: []string{"--upstream=:8080", "-timeout", "20s"}},
			want: queueSettings{8012, 8022, 9091, 0, 20 * time.Second}},
		{name: "flags after a bool flag", c: corev1.Container{Args: []string{"--access-log", "--drain-timeout", "5s", "--drain-quiet-period=1s", "--listen", "127.0.0.1:9000"}},
			want: queueSettings{9000, 8022, 9091, time.Second, 5 * time.Second}},
		{name: "environment", c: corev1.Container{Env: []corev1.EnvVar{{Name: "QUEUE_DRAIN_QUIET_PERIOD", Value: "2s"}, {Name: "QUEUE_TIMEOUT", Value: "3s"}}},
			want: queueSettings{8012, 8022, 9091, 2 * time.Second, 3 * time.Second}},
		{name: "flag wins over environment", c: corev1.Container{Args: []string{"--timeout", "4s"}, Env: []corev1.EnvVar{{Name: "QUEUE_TIMEOUT", Value: "3s"}}},
			want: queueSettings{8012, 8022, 9091, 0, 4 * time.Second}},
		{name: "command", c: corev1.Container{Command: []string{"/queue", "--drain-timeout", "7s"}, Args: []string{"--admin-listen", ":9022"}},
			want: queueSettings{8012, 9022, 9091, 0, 7 * time.Second}},
		{name: "no timeout", c: corev1.Container{Args: []string{"--timeout", "0"}},
			want: queueSettings{8012, 8022, 9091, 0, 0}},
		{name: "malformed duration", c: corev1.Container{Args: []string{"--drain-timeout", "20"}}, bad: `--drain-timeout "20"`},
		{name: "missing value", c: corev1.Container{Args: []string{"--drain-timeout"}}, bad: "-drain-timeout has no value"},
		{name: "admin on loopback", c: corev1.Container{Args: []string{"--admin-listen", "127.0.0.1:8022"}}, bad: `--admin-listen binds "127.0.0.1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := readSettings(tc.c)
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Errorf("readSettings(%v) = %+v, %v; want an error naming %s", tc.c.Args, got, err, tc.bad)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("readSettings(%v) = %+v, %v; want %+v", tc.c.Args, got, err, tc.want)
			}
		})
	}
}
