package deploy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// scaledObjectGVK is KEDA's ScaledObject.
var scaledObjectGVK = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}

// scaledObject is KEDA's ScaledObject (keda.sh/v1alpha1), copied field for
// field, with the same JSON names, from KEDA v2.21's apis/keda/v1alpha1, less
// its status (a manifest has none). KEDA's own API module is not used: it
// imports client-go and controller-runtime (about 240 MB of modules), and its
// latest release did not resolve against this module's k8s.io/api. decode
// fills this struct as strictly as the Kubernetes types, so a misspelt or
// unknown field fails the same way.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              scaledObjectSpec `json:"spec"`
}

type scaledObjectSpec struct {
	ScaleTargetRef        *kedaScaleTarget `json:"scaleTargetRef"`
	PollingInterval       *int32           `json:"pollingInterval,omitempty"`
	InitialCooldownPeriod *int32           `json:"initialCooldownPeriod,omitempty"`
	CooldownPeriod        *int32           `json:"cooldownPeriod,omitempty"`
	IdleReplicaCount      *int32           `json:"idleReplicaCount,omitempty"`
	MinReplicaCount       *int32           `json:"minReplicaCount,omitempty"`
	MaxReplicaCount       *int32           `json:"maxReplicaCount,omitempty"`
	Advanced              *kedaAdvanced    `json:"advanced,omitempty"`
	Triggers              []kedaTrigger    `json:"triggers"`
	Fallback              *kedaFallback    `json:"fallback,omitempty"`
}

type kedaScaleTarget struct {
	Name                   string `json:"name"`
	APIVersion             string `json:"apiVersion,omitempty"`
	Kind                   string `json:"kind,omitempty"`
	EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
}

type kedaAdvanced struct {
	HorizontalPodAutoscalerConfig *struct {
		Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
		Name     string                                         `json:"name,omitempty"`
	} `json:"horizontalPodAutoscalerConfig,omitempty"`
	RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
	ScalingModifiers              struct {
		Formula          string                         `json:"formula,omitempty"`
		Target           string                         `json:"target,omitempty"`
		ActivationTarget string                         `json:"activationTarget,omitempty"`
		MetricType       autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
	} `json:"scalingModifiers,omitempty"`
}

type kedaTrigger struct {
	Type              string            `json:"type"`
	Name              string            `json:"name,omitempty"`
	UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
	Metadata          map[string]string `json:"metadata"`
	AuthenticationRef *struct {
		Name string `json:"name"`
		Kind string `json:"kind,omitempty"`
	} `json:"authenticationRef,omitempty"`
	MetricType autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
}

type kedaFallback struct {
	FailureThreshold int32  `json:"failureThreshold"`
	Replicas         int32  `json:"replicas"`
	Behavior         string `json:"behavior,omitempty"`
}

// validate checks what KEDA's CRD schema and admission webhook refuse, for
// the fields these manifests use.
func (s *scaledObject) validate() error {
	var errs []error
	sp := s.Spec
	if sp.ScaleTargetRef == nil || sp.ScaleTargetRef.Name == "" {
		errs = append(errs, errors.New("spec.scaleTargetRef.name is required"))
	}
	if len(sp.Triggers) == 0 {
		errs = append(errs, errors.New("spec.triggers: at least one is required"))
	}
	if sp.PollingInterval != nil && *sp.PollingInterval < 1 {
		errs = append(errs, fmt.Errorf("spec.pollingInterval %d: want 1 or more", *sp.PollingInterval))
	}
	lo, hi := int32(0), int32(100) // KEDA's defaults
	if sp.MinReplicaCount != nil {
		lo = *sp.MinReplicaCount
	}
	if sp.MaxReplicaCount != nil {
		hi = *sp.MaxReplicaCount
	}
	if lo < 0 || hi < 1 || lo > hi {
		errs = append(errs, fmt.Errorf("spec.minReplicaCount %d, maxReplicaCount %d: want 0 <= min <= max, max >= 1", lo, hi))
	}
	for i, tr := range sp.Triggers {
		switch tr.MetricType {
		case "", autoscalingv2.AverageValueMetricType, autoscalingv2.ValueMetricType, autoscalingv2.UtilizationMetricType:
		default:
			errs = append(errs, fmt.Errorf("spec.triggers[%d].metricType %q: want AverageValue, Value or Utilization", i, tr.MetricType))
		}
		if sp.Fallback != nil && tr.MetricType != "" && tr.MetricType != autoscalingv2.AverageValueMetricType {
			errs = append(errs, fmt.Errorf("spec.triggers[%d]: a fallback needs metricType AverageValue, not %s", i, tr.MetricType))
		}
	}
	if f := sp.Fallback; f != nil {
		if f.FailureThreshold < 0 || f.Replicas < 0 {
			errs = append(errs, fmt.Errorf("spec.fallback %+v: want numbers 0 or more", *f))
		}
		if f.Behavior != "" && !slices.Contains([]string{"static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower", "scalingModifiers"}, f.Behavior) {
			errs = append(errs, fmt.Errorf("spec.fallback.behavior %q: not one of KEDA's", f.Behavior))
		}
	}
	return errors.Join(errs...)
}

// prometheusTriggerKeys are the metadata keys KEDA v2.21's Prometheus scaler
// reads from a trigger (pkg/scalers/prometheus_scaler.go and its
// authentication); any other key is a typo that KEDA would ignore.
var prometheusTriggerKeys = []string{
	"serverAddress", "query", "queryParameters", "threshold", "activationThreshold",
	"namespace", "customHeaders", "ignoreNullValues", "unsafeSsl", "awsRegion", "timeout",
	"identityOwner", "authModes", "authMode", "apiKey", "method", "keyParamName",
}

// adapterConfig is the Prometheus Adapter's configuration file
// (MetricsDiscoveryConfig in kubernetes-sigs/prometheus-adapter's
// pkg/config), with the same field names. The adapter reads it with
// yaml.UnmarshalStrict; decodeAdapterConfig is as strict.
type adapterConfig struct {
	Rules         []adapterRule `json:"rules"`
	ResourceRules *struct {
		CPU    adapterResourceRule `json:"cpu"`
		Memory adapterResourceRule `json:"memory"`
		Window string              `json:"window"`
	} `json:"resourceRules,omitempty"`
	ExternalRules []adapterRule `json:"externalRules,omitempty"`
}

type adapterRule struct {
	SeriesQuery   string `json:"seriesQuery"`
	SeriesFilters []struct {
		Is    string `json:"is,omitempty"`
		IsNot string `json:"isNot,omitempty"`
	} `json:"seriesFilters"`
	Resources adapterResources `json:"resources"`
	Name      struct {
		Matches string `json:"matches"`
		As      string `json:"as"`
	} `json:"name"`
	MetricsQuery           string `json:"metricsQuery,omitempty"`
	LabelValueReplacements []struct {
		Find    string `json:"find,omitempty"`
		Replace string `json:"replace,omitempty"`
	} `json:"labelValueReplacements,omitempty"`
}

type adapterResources struct {
	Template  string `json:"template,omitempty"`
	Overrides map[string]struct {
		Group    string `json:"group,omitempty"`
		Resource string `json:"resource"`
	} `json:"overrides,omitempty"`
}

type adapterResourceRule struct {
	ContainerQuery string           `json:"containerQuery"`
	NodeQuery      string           `json:"nodeQuery"`
	Resources      adapterResources `json:"resources"`
	ContainerLabel string           `json:"containerLabel"`
}

// adapterConfigKey is the ConfigMap key that holds the adapter's
// configuration file; a ConfigMap with it is the adapter's.
const adapterConfigKey = "config.yaml"

// decodeAdapterConfig decodes the adapter's configuration file strictly:
// unknown or duplicate fields, and fields in the wrong case, are errors.
func decodeAdapterConfig(doc string) (adapterConfig, error) {
	var c adapterConfig
	j, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return c, fmt.Errorf("yaml: %w", err)
	}
	strict, err := sigsjson.UnmarshalStrict(j, &c)
	if err != nil {
		return c, fmt.Errorf("decode adapter config: %w", err)
	}
	if len(strict) > 0 {
		return c, fmt.Errorf("decode adapter config strictly: %w", errors.Join(strict...))
	}
	return c, nil
}

// served returns the custom metric a rule serves: name.as, or what the
// adapter derives when it is empty (the whole match, or the one capture).
func (r adapterRule) served() (string, error) {
	re, err := regexp.Compile(r.Name.Matches)
	if err != nil {
		return "", fmt.Errorf("name.matches %q: %w", r.Name.Matches, err)
	}
	if r.Name.As != "" {
		return r.Name.As, nil
	}
	if re.NumSubexp() > 1 {
		return "", fmt.Errorf("name.matches %q has %d groups and no name.as", r.Name.Matches, re.NumSubexp())
	}
	return "", nil // the series' own name, or its capture: known only per series
}

// contractGauges are the gauges queue exports, read from the metrics table of
// the contract (docs/contract.md section 5), so that a manifest cannot scale
// on a metric queue does not have.
var contractGauges = sync.OnceValues(func() ([]string, error) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "contract.md"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(queue_[a-z_]+)` \\| gauge \\|").FindAllSubmatch(b, -1) {
		names = append(names, string(m[1]))
	}
	if len(names) == 0 {
		return nil, errors.New("docs/contract.md lists no queue_* gauge")
	}
	return names, nil
})

// metricIn returns the queue gauge that a PromQL expression or series query
// selects, or "" when it names none or several.
func metricIn(expr string, gauges []string) string {
	found := ""
	for _, g := range gauges {
		if regexp.MustCompile(`\b` + g + `\b`).MatchString(expr) {
			if found != "" {
				return ""
			}
			found = g
		}
	}
	return found
}

func adapterConfigs(ms []manifest) map[string]adapterConfig {
	out := map[string]adapterConfig{}
	for _, cm := range all[*corev1.ConfigMap](ms) {
		if doc, ok := cm.Data[adapterConfigKey]; ok {
			c, err := decodeAdapterConfig(doc)
			if err == nil {
				out[cm.Namespace+"/"+cm.Name] = c
			}
		}
	}
	return out
}

// TestPrometheusAdapterRules checks every Prometheus Adapter configuration
// here: each rule selects one of queue's gauges (docs/contract.md section
// 5), its name.matches matches it, it serves a metric, maps the series'
// namespace and pod labels to those resources, and its metricsQuery can
// select one pod's series.
func TestPrometheusAdapterRules(t *testing.T) {
	ms := manifests(t)
	gauges, err := contractGauges()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		cm, ok := m.obj.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		doc, ok := cm.Data[adapterConfigKey]
		if !ok {
			continue
		}
		n++
		where := m.where + " ConfigMap " + cm.Name
		c, err := decodeAdapterConfig(doc)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if len(c.Rules) == 0 {
			t.Errorf("%s: no rules", where)
		}
		for i, r := range c.Rules {
			where := fmt.Sprintf("%s rules[%d]", where, i)
			metric := metricIn(r.SeriesQuery, gauges)
			if metric == "" {
				t.Errorf("%s: seriesQuery %q selects none of queue's gauges %v (docs/contract.md section 5)", where, r.SeriesQuery, gauges)
				continue
			}
			if re, err := regexp.Compile(r.Name.Matches); err != nil || !re.MatchString(metric) {
				t.Errorf("%s: name.matches %q does not match %s (err %v)", where, r.Name.Matches, metric, err)
			}
			if _, err := r.served(); err != nil {
				t.Errorf("%s: %v", where, err)
			}
			// A Pods metric needs the series' namespace and pod labels
			// mapped to those resources.
			for _, res := range []string{"namespace", "pod"} {
				if o, ok := r.Resources.Overrides[res]; (!ok || o.Resource != res || o.Group != "") && r.Resources.Template == "" {
					t.Errorf("%s: resources.overrides[%q] = %+v, want {resource: %s}", where, res, o, res)
				}
			}
			for _, v := range []string{"<<.Series>>", "<<.LabelMatchers>>", "<<.GroupBy>>"} {
				if r.MetricsQuery != "" && !strings.Contains(r.MetricsQuery, v) {
					t.Errorf("%s: metricsQuery %q lacks %s: the adapter could not select one pod's series", where, r.MetricsQuery, v)
				}
			}
		}
	}
	if n == 0 {
		t.Errorf("no Prometheus Adapter configuration (a ConfigMap with %s) under deploy/", adapterConfigKey)
	}
}

// TestAutoscalersHaveAdapterRule checks that every Pods metric an HPA asks
// for is served by a rule of the adapter's configuration here.
func TestAutoscalersHaveAdapterRule(t *testing.T) {
	ms := manifests(t)
	var served []string
	for _, c := range adapterConfigs(ms) {
		for _, r := range c.Rules {
			if as, err := r.served(); err == nil && as != "" {
				served = append(served, as)
			}
		}
	}
	pods := 0
	for _, m := range ms {
		hpa, ok := m.obj.(*autoscalingv2.HorizontalPodAutoscaler)
		if !ok {
			continue
		}
		for _, mt := range hpa.Spec.Metrics {
			if mt.Pods == nil {
				continue
			}
			pods++
			if name := mt.Pods.Metric.Name; !slices.Contains(served, name) {
				t.Errorf("%s HorizontalPodAutoscaler %s: Pods metric %q is served by no Prometheus Adapter rule here (name.as: %v)", m.where, hpa.Name, name, served)
			}
		}
	}
	if pods == 0 {
		t.Error("no HorizontalPodAutoscaler under deploy/ asks for a Pods metric: the check ran on nothing")
	}
}

// TestScaledObjects checks every KEDA ScaledObject here: valid, aimed at a
// Deployment here that sets no replicas and that no HPA of the same
// directory scales, with a prometheus trigger on one of queue's gauges
// whose keys KEDA reads, threshold positive, per pod (AverageValue), and
// equal to an HPA's target on the same gauge.
func TestScaledObjects(t *testing.T) {
	ms := manifests(t)
	gauges, err := contractGauges()
	if err != nil {
		t.Fatal(err)
	}
	deps := all[*appsv1.Deployment](ms)
	n := 0
	defer func() {
		if n == 0 {
			t.Error("no ScaledObject under deploy/: the checks ran on nothing")
		}
	}()
	for _, m := range ms {
		so, ok := m.obj.(*scaledObject)
		if !ok {
			continue
		}
		n++
		where := m.where + " ScaledObject " + so.Name
		if err := so.validate(); err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		ref := so.Spec.ScaleTargetRef
		i := slices.IndexFunc(deps, func(d *appsv1.Deployment) bool {
			return ref.Kind == "Deployment" && ref.APIVersion == "apps/v1" && ref.Name == d.Name
		})
		if i < 0 {
			t.Errorf("%s: scaleTargetRef %+v is no Deployment here", where, *ref)
			continue
		}
		if deps[i].Spec.Replicas != nil {
			t.Errorf("%s: Deployment %s sets replicas; re-applying it would override KEDA", where, deps[i].Name)
		}
		// KEDA makes its own HPA: one applied with the same kubectl apply
		// -f DIR would fight it.
		for _, o := range ms {
			if hpa, ok := o.obj.(*autoscalingv2.HorizontalPodAutoscaler); ok && hpa.Spec.ScaleTargetRef.Name == ref.Name &&
				filepath.Dir(o.file) == filepath.Dir(m.file) {
				t.Errorf("%s: HorizontalPodAutoscaler %s (%s) scales the same Deployment from the same directory", where, hpa.Name, o.where)
			}
		}
		queueTriggers := 0
		for j, tr := range so.Spec.Triggers {
			where := fmt.Sprintf("%s triggers[%d]", where, j)
			if tr.Type != "prometheus" {
				continue
			}
			for k := range tr.Metadata {
				if !slices.Contains(prometheusTriggerKeys, k) {
					t.Errorf("%s: metadata key %q is not one KEDA's prometheus scaler reads", where, k)
				}
			}
			for _, k := range []string{"serverAddress", "query", "threshold"} {
				if tr.Metadata[k] == "" {
					t.Errorf("%s: metadata.%s is required", where, k)
				}
			}
			if th, err := strconv.ParseFloat(tr.Metadata["threshold"], 64); err != nil || th <= 0 {
				t.Errorf("%s: threshold %q: want a positive number (err %v)", where, tr.Metadata["threshold"], err)
			}
			metric := metricIn(tr.Metadata["query"], gauges)
			if metric == "" {
				t.Errorf("%s: query %q selects none of queue's gauges %v (docs/contract.md section 5)", where, tr.Metadata["query"], gauges)
				continue
			}
			// The HPA alternative on the same gauge must aim at the same
			// target per pod, so that switching does not change the scaling.
			for _, hpa := range all[*autoscalingv2.HorizontalPodAutoscaler](ms) {
				for _, mt := range hpa.Spec.Metrics {
					if hpa.Spec.ScaleTargetRef.Name != ref.Name || mt.Pods == nil || mt.Pods.Metric.Name != metric || mt.Pods.Target.AverageValue == nil {
						continue
					}
					if got, want := tr.Metadata["threshold"], mt.Pods.Target.AverageValue.String(); got != want {
						t.Errorf("%s: threshold %s, but HorizontalPodAutoscaler %s aims at averageValue %s for %s", where, got, hpa.Name, want, metric)
					}
				}
			}
			// The query sums over the pods; only AverageValue turns that
			// back into a target per pod.
			if tr.MetricType != "" && tr.MetricType != autoscalingv2.AverageValueMetricType {
				t.Errorf("%s: metricType %s: want AverageValue, the threshold being per pod", where, tr.MetricType)
			}
			queueTriggers++
		}
		if queueTriggers == 0 {
			t.Errorf("%s: no prometheus trigger on one of queue's gauges", where)
		}
	}
}

// TestScaledObjectRejects proves that a ScaledObject decodes strictly and
// is validated: each document is the valid one made wrong in one way, and
// is refused for that fault (the error names it), by decode or validate.
func TestScaledObjectRejects(t *testing.T) {
	t.Parallel()
	const head = "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: a}\nspec:\n  scaleTargetRef: {name: a}\n"
	const trigger = "  triggers:\n    - type: prometheus\n      metadata: {query: q}\n"
	// check decodes and validates doc, and returns the first error.
	check := func(doc string) error {
		obj, err := decode([]byte(doc))
		if err != nil {
			return err
		}
		so, ok := obj.(*scaledObject)
		if !ok {
			return fmt.Errorf("decoded to %T, want *scaledObject", obj)
		}
		return so.validate()
	}
	// The documents below are this one made wrong: it must pass, or they
	// would be refused for its fault, not theirs.
	if err := check(head + trigger); err != nil {
		t.Fatalf("the valid ScaledObject is refused: %v", err)
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown spec field", head + trigger + "  minReplicas: 1\n", "spec.minReplicas"},
		{"unknown trigger field", head + "  triggers:\n    - type: prometheus\n      metadata: {}\n      metricName: x\n", "spec.triggers[0].metricName"},
		{"field in the wrong case", head + trigger + "  MaxReplicaCount: 3\n", "spec.MaxReplicaCount"},
		{"status", head + trigger + "status: {}\n", `"status"`},
		{"no triggers", head, "spec.triggers"},
		{"no target", "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nspec:\n" + trigger, "spec.scaleTargetRef.name"},
		{"min above max", head + trigger + "  minReplicaCount: 5\n  maxReplicaCount: 2\n", "spec.minReplicaCount"},
		{"unknown fallback behavior", head + trigger + "  fallback: {failureThreshold: 3, replicas: 2, behavior: sometimes}\n", "spec.fallback.behavior"},
		{"fallback with Value", head + "  triggers:\n    - type: prometheus\n      metricType: Value\n      metadata: {}\n  fallback: {failureThreshold: 3, replicas: 2}\n", "metricType"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := check(tc.doc)
			if err == nil {
				t.Fatalf("decode(%q) and validate() passed; want an error", tc.doc)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q refused with %v, want an error naming %s", tc.doc, err, tc.want)
			}
		})
	}
}

// TestAdapterConfigRejects proves that decodeAdapterConfig is as strict as
// the adapter: a valid configuration is read, and each document wrong in
// one way is refused for that fault (the error names it).
func TestAdapterConfigRejects(t *testing.T) {
	t.Parallel()
	const valid = "rules:\n  - seriesQuery: 'x'\n    metricsQuery: 'sum(x)'\n    name: {matches: 'x', as: 'y'}\n    resources: {overrides: {pod: {resource: pod}}}\n"
	if c, err := decodeAdapterConfig(valid); err != nil || len(c.Rules) != 1 || c.Rules[0].MetricsQuery != "sum(x)" {
		t.Fatalf("decodeAdapterConfig(%q) = %+v, %v; want its one rule", valid, c, err)
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown top-level field", "rule: []\n", `"rule"`},
		{"unknown rule field", "rules:\n  - seriesQuery: x\n    metricQuery: y\n", "rules[0].metricQuery"},
		{"unknown name field", "rules:\n  - name: {matches: x, to: y}\n", "rules[0].name.to"},
		{"field in the wrong case", "rules:\n  - SeriesQuery: x\n", "rules[0].SeriesQuery"},
		{"duplicate key", "rules:\n  - seriesQuery: x\n    seriesQuery: y\n", `"seriesQuery" already set`},
		{"wrong type", "rules:\n  - resources: {overrides: {pod: pod}}\n", "overrides"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := decodeAdapterConfig(tc.doc)
			if err == nil {
				t.Fatalf("decodeAdapterConfig(%q) = %+v, nil; want an error", tc.doc, c)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decodeAdapterConfig(%q) = %v, want an error naming %s", tc.doc, err, tc.want)
			}
		})
	}
}

func TestMetricIn(t *testing.T) {
	t.Parallel()
	gauges := []string{"queue_active_requests", "queue_average_concurrent_requests", "queue_average_proxied_concurrent_requests"}
	for _, tc := range []struct{ name, expr, want string }{
		{"series query", `queue_average_concurrent_requests{namespace!="",pod!=""}`, "queue_average_concurrent_requests"},
		{"inside a function", `sum(avg_over_time(queue_active_requests{pod=~"a-.*"}[1m]))`, "queue_active_requests"},
		{"longer name is not a match", `queue_average_concurrent_requests_total`, ""},
		{"two gauges", `queue_active_requests + queue_average_concurrent_requests`, ""},
		{"none", `up`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := metricIn(tc.expr, gauges); got != tc.want {
				t.Errorf("metricIn(%q) = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
}

// TestContractGauges checks that the contract's metrics table is read: the
// autoscaling manifests' checks depend on it.
func TestContractGauges(t *testing.T) {
	t.Parallel()
	gauges, err := contractGauges()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(gauges, "queue_average_concurrent_requests") {
		t.Errorf("contract gauges = %v, want queue_average_concurrent_requests among them", gauges)
	}
	if slices.ContainsFunc(gauges, func(g string) bool { return strings.ContainsAny(g, " `|") }) {
		t.Errorf("contract gauges = %v: a name was read with table syntax in it", gauges)
	}
}
