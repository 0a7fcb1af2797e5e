package helm_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

func metaSelector(s metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(&s)
}

// TestChartRefusesUnsafeValues: a values choice that is unsafe, or that cannot work,
// fails `helm template` with a message that names it.
func TestChartRefusesUnsafeValues(t *testing.T) {
	redis := func(extra map[string]any) map[string]any {
		store := map[string]any{"type": "redis", "url": "redis://redis:6379/0"}
		for k, v := range extra {
			store[k] = v
		}
		return map[string]any{"store": store}
	}
	cases := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"bolt with two replicas", map[string]any{"registry": map[string]any{"replicas": 2}},
			"store.type bolt with registry.replicas 2"},
		{"no store chosen", map[string]any{"store": map[string]any{"type": ""}}, "store.type is empty"},
		{"an unknown store", map[string]any{"store": map[string]any{"type": "mysql"}}, `store.type "mysql" is none of`},
		{"redis without a URL", map[string]any{"store": map[string]any{"type": "redis"}}, "needs store.url"},
		{"a password in the URL", redis(map[string]any{"url": "redis://:hunter2hunter2@redis:6379/0"}), "store.url holds a password"},
		{"a password parameter in the URL", map[string]any{"store": map[string]any{"type": "redis-sentinel",
			"url": "redis+sentinel://s1:26379/0?master_name=m&password=x", "redis": map[string]any{"waitReplicas": 1}}}, "store.url holds a password"},
		{"a scheme for another store", map[string]any{"store": map[string]any{"type": "etcd", "url": "redis://redis:6379/0"}},
			`scheme "redis" does not match store.type etcd`},
		{"sentinel without WAIT", map[string]any{"store": map[string]any{"type": "redis-sentinel", "existingSecret": "s"}},
			"store.redis.waitReplicas 0"},
		{"a shared store without the clock agent", map[string]any{"store": map[string]any{"type": "redis", "url": "redis://r:6379/0"},
			"clockAgent": map[string]any{"enabled": false}}, "clockAgent.enabled false on the shared store redis"},
		{"ntp with two servers", map[string]any{"clockAgent": map[string]any{"source": "ntp", "ntpServers": []string{"a", "b"}}},
			"at least three clockAgent.ntpServers"},
		{"an unknown clock source", map[string]any{"clockAgent": map[string]any{"source": "gps"}}, `clockAgent.source "gps"`},
		{"idempotency records in bolt", map[string]any{"gateway": map[string]any{"idempotencyStore": "store"}},
			"the store bolt cannot hold the gateway's records"},
		{"a secret literal in extraEnv", map[string]any{"registry": map[string]any{"extraEnv": []map[string]any{
			{"name": "IDKEEPER_ADMIN_API_KEY", "value": "idk_0123456789abcdef0123456789"}}}}, "extraEnv IDKEEPER_ADMIN_API_KEY is a secret setting"},
		{"a misspelt key", map[string]any{"store": map[string]any{"typ": "redis"}}, "additional properties 'typ' not allowed"},
		{"bolt with a store URL", map[string]any{"store": map[string]any{"type": "bolt", "url": "bolt:/x"}}, "store.type bolt takes no store.url"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, stderr, err := template(t, writeValues(t, c.values))
			if err == nil {
				t.Fatalf("the chart rendered:\n%.400s", out)
			}
			if !strings.Contains(stderr, c.want) {
				t.Errorf("the failure does not say %q:\n%s", c.want, stderr)
			}
			if strings.Contains(stderr, "hunter2") {
				t.Errorf("the failure repeats the password:\n%s", stderr)
			}
		})
	}
}

// secretish are value names that would hold secret material if they held a value.
var secretish = regexp.MustCompile(`(?i)secret|password|passwd|token|api.?key|consumer.?keys|credential|private`)

// secretRefs are the value names that may match secretish because they name a
// Secret or a key of it, never its content.
var secretRefs = map[string]bool{"existingSecret": true, "existingSecretKey": true, "imagePullSecrets": true}

// TestValuesHoldNoSecrets: values.yaml has no secret material (so `helm get values`
// prints none, whatever the release was installed with by default): no value whose
// name says secret holds anything but a Secret's name, and no value at all looks
// like a credential (a URL with a password, a long random string).
func TestValuesHoldNoSecrets(t *testing.T) {
	b, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.UnmarshalStrict(b, &values); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				name := path + "." + k
				if secretish.MatchString(k) && !secretRefs[k] && !isEmpty(x) {
					t.Errorf("values.yaml %s holds %v: secrets come from Secrets only", name, x)
				}
				walk(name, x)
			}
		case []any:
			for _, x := range v {
				walk(path+"[]", x)
			}
		case string:
			if regexp.MustCompile(`://[^/@]*:[^/@]*@|[A-Za-z0-9+/_-]{32,}`).MatchString(v) {
				t.Errorf("values.yaml %s = %q looks like a credential", path, v)
			}
		}
	}
	walk("", values)
	// The walk sees the names it must: it would catch a secret there.
	if _, ok := values["secrets"].(map[string]any)["existingSecret"]; !ok {
		t.Fatal("values.yaml has no secrets.existingSecret: the walk above checked something else")
	}
}

func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		for _, x := range v {
			if !isEmpty(x) {
				return false
			}
		}
		return true
	}
	return false
}

// TestGeneratedSecretRendersOnce: without secrets.existingSecret the chart renders
// one Secret with the five keys, kept on uninstall, and every workload reads only
// that Secret; with it, none, and the workloads read the one named.
func TestGeneratedSecretRendersOnce(t *testing.T) {
	keys := []string{"admin-password", "bootstrap-api-key", "clock-secret", "consumer-keys", "receipt-secret"}
	gen := renderChart(t, nil)
	secrets := all[corev1.Secret](gen)
	if len(secrets) != 1 {
		t.Fatalf("%d Secrets rendered, want 1", len(secrets))
	}
	s := secrets[0]
	var got []string
	for k := range s.Data {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, keys) {
		t.Errorf("the Secret's keys are %v, want %v", got, keys)
	}
	if s.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Error("the generated Secret is not kept on uninstall (its receipt secret signs the receipts in circulation)")
	}
	checkSecretNames(t, gen, s.Name)
	again := renderChart(t, nil)
	if bytes.Equal(all[corev1.Secret](again)[0].Data["receipt-secret"], s.Data["receipt-secret"]) {
		t.Error("two renderings without a cluster generated the same receipt secret: it is not random")
	}

	ext := renderChart(t, map[string]any{"secrets": map[string]any{"existingSecret": "my-idk-secrets"}})
	if n := len(all[corev1.Secret](ext)); n != 0 {
		t.Errorf("with secrets.existingSecret the chart renders %d Secrets", n)
	}
	checkSecretNames(t, ext, "my-idk-secrets")
}

// checkSecretNames: every Secret volume of a workload is the release's secret
// (or, for the store URL, store.existingSecret of the values; none here).
func checkSecretNames(t *testing.T, r rendered, want string) {
	t.Helper()
	for name, p := range podTemplates(r) {
		for _, v := range p.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName != want {
				t.Errorf("%s reads Secret %s, want %s", name, v.Secret.SecretName, want)
			}
		}
	}
}

// TestAlertsCopyIsAlertsFile: the chart's files/alerts.yaml (a chart cannot read
// files outside its directory) is deploy/prometheus/alerts.yaml byte for byte.
func TestAlertsCopyIsAlertsFile(t *testing.T) {
	want, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(alertsCopy)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("deploy/helm/%s differs from deploy/prometheus/alerts.yaml: the PrometheusRule must carry the same rules. "+
			"Run: cp deploy/prometheus/alerts.yaml deploy/helm/%s", alertsCopy, alertsCopy)
	}
}

// checkPrometheusRule: the rendered PrometheusRule's spec is alerts.yaml decoded
// strictly into the operator's PrometheusRuleSpec, group for group, rule for rule.
func checkPrometheusRule(t *testing.T, r rendered) {
	t.Helper()
	rules := all[monitoringv1.PrometheusRule](r)
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules rendered, want 1", len(rules))
	}
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(b, &want); err != nil {
		t.Fatalf("deploy/prometheus/alerts.yaml does not decode strictly as a PrometheusRule spec: %v", err)
	}
	got := rules[0].Spec
	if len(want.Groups) == 0 || len(want.Groups[0].Rules) == 0 {
		t.Fatal("alerts.yaml decoded to no rules: the comparison below proves nothing")
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the PrometheusRule's spec differs from deploy/prometheus/alerts.yaml")
	}
	var n int
	for _, g := range got.Groups {
		n += len(g.Rules)
	}
	if n < 20 {
		t.Errorf("the PrometheusRule has %d rules", n)
	}
}

// TestEmbeddedClientExample: deploy/helm/examples/embedded-client.yaml decodes
// strictly, gives the client the pod's UID through the downward API (the
// requester's machine ID, docs/client.md), its API key from a Secret, and runs
// hardened as the chart's pods do.
func TestEmbeddedClientExample(t *testing.T) {
	b, err := os.ReadFile(examplesDir + "/embedded-client.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{Objects: decodeAll(t, string(b)), Output: string(b)}
	deps := all[appsv1.Deployment](r)
	if len(deps) != 1 {
		t.Fatalf("%d Deployments in the example, want 1", len(deps))
	}
	checkPodsHardened(t, r)
	ctr := deps[0].Spec.Template.Spec.Containers[0]
	var uid, key bool
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.uid":
			uid = e.Name == "POD_UID"
		case e.Name == "IDKEEPER_API_KEY":
			key = e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
		}
	}
	if !uid || !key {
		t.Errorf("the example's env: POD_UID from metadata.uid %v, IDKEEPER_API_KEY from a Secret %v", uid, key)
	}
}

// TestPackagedChartCarriesTheRules: `helm package` keeps files/alerts.yaml, so the
// packaged chart (what a chart repository serves) renders the same PrometheusRule
// as the directory.
func TestPackagedChartCarriesTheRules(t *testing.T) {
	dir := t.TempDir()
	if stdout, stderr, err := runHelm(t, "package", chartDir, "--destination", dir); err != nil {
		t.Fatalf("helm package: %v\n%s%s", err, stdout, stderr)
	}
	pkgs, err := filepath.Glob(filepath.Join(dir, "idkeeper-*.tgz"))
	if err != nil || len(pkgs) != 1 {
		t.Fatalf("helm package wrote %v (%v)", pkgs, err)
	}
	values := writeValues(t, map[string]any{"monitoring": map[string]any{"prometheusRule": map[string]any{"enabled": true}}})
	render := func(chart string) string {
		stdout, stderr, err := runHelm(t, "template", release, chart, "--namespace", namespace, "-f", values,
			"--show-only", "templates/monitoring.yaml")
		if err != nil {
			t.Fatalf("helm template %s: %v\n%s", chart, err, stderr)
		}
		return stdout
	}
	fromDir, fromPkg := render(chartDir), render(pkgs[0])
	if !strings.Contains(fromDir, "IdKeeperNodeIDsLow") {
		t.Fatalf("the directory's PrometheusRule has no rules:\n%.300s", fromDir)
	}
	if fromDir != fromPkg {
		t.Error("the packaged chart renders another PrometheusRule than the directory")
	}
}
