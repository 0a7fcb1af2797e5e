// Package helm_test checks the Helm chart deploy/helm/idkeeper (issue #34) offline,
// as charts are checked in CI: `helm lint --strict` and `helm template` for the
// default values and for every store, every rendered object decoded strictly into
// its typed Kubernetes API struct (an unknown field fails), and the properties that
// matter asserted on those structs (chart_test.go, policy_test.go, values_test.go).
// No cluster is involved: lookup finds nothing in a plain `helm template`; the
// chart's lookups (a Secret kept on upgrade, a state volume left by an earlier
// release) are rendered against a fake API server on loopback (lookup_test.go).
//
// helm v4 is required: the tests fail, never skip, without it. scripts/test builds
// it once per machine (go install helm.sh/helm/v4/cmd/helm@v4.3.2 into a cache) and
// names it in IDKEEPER_HELM; otherwise helm is looked up on PATH.
package helm_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The chart and the files it must agree with, relative to this package's directory.
const (
	chartDir    = "idkeeper"
	alertsFile  = "../prometheus/alerts.yaml"
	alertsCopy  = "idkeeper/files/alerts.yaml"
	examplesDir = "examples"
	// release and namespace of every rendering.
	release   = "idk"
	namespace = "ids"
	// helmVersion is the helm scripts/test installs; the tests want its major version.
	helmVersion = "v4.3.2"
)

// helm returns the helm binary's path, or fails the test saying how to get it.
func helm(t *testing.T) string {
	t.Helper()
	path := os.Getenv("IDKEEPER_HELM")
	if path == "" {
		p, err := exec.LookPath("helm")
		if err != nil {
			t.Fatalf("helm is not installed (IDKEEPER_HELM unset, none on PATH): it lints and renders deploy/helm/idkeeper. "+
				"scripts/test builds it once per machine; by hand: GOBIN=$HOME/.cache/idkeeper-test/helm-%s "+
				"go install helm.sh/helm/v4/cmd/helm@%s, then IDKEEPER_HELM=$HOME/.cache/idkeeper-test/helm-%s/helm", helmVersion, helmVersion, helmVersion)
		}
		path = p
	}
	out, err := exec.Command(path, "version", "--short").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version --short: %v\n%s", path, err, out)
	}
	if v := strings.TrimSpace(string(out)); !strings.HasPrefix(v, "v4.") {
		t.Fatalf("%s is helm %s: the chart is checked with helm v4 (%s; scripts/test installs it)", path, v, helmVersion)
	}
	return path
}

// writeValues writes values as a YAML values file in a test directory, or returns
// "" for none.
func writeValues(t *testing.T, values map[string]any) string {
	t.Helper()
	if values == nil {
		return ""
	}
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runHelm runs helm with args and returns its stdout, its stderr and its error.
func runHelm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// No repository configuration or cache of the user's is read or written.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache",
		"HELM_DATA_HOME="+home+"/data", "KUBECONFIG="+home+"/no-kubeconfig")
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// lint runs `helm lint --strict` on the chart with the values file, failing the
// test on any error or warning.
func lint(t *testing.T, valuesFile string) {
	t.Helper()
	args := []string{"lint", "--strict", chartDir}
	if valuesFile != "" {
		args = append(args, "-f", valuesFile)
	}
	stdout, stderr, err := runHelm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout, stderr)
	}
	if !strings.Contains(stdout, "1 chart(s) linted, 0 chart(s) failed") {
		t.Fatalf("helm lint did not pass the chart:\n%s%s", stdout, stderr)
	}
}

// template renders the chart with the values file (and extra flags), returning the
// output, or the error and stderr of a rendering that failed.
func template(t *testing.T, valuesFile string, extra ...string) (string, string, error) {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", namespace}
	if valuesFile != "" {
		args = append(args, "-f", valuesFile)
	}
	args = append(args, extra...)
	stdout, stderr, err := runHelm(t, args...)
	return stdout, stderr, err
}

// object is one rendered document: its kind, name, source text and typed value
// (a pointer to the k8s.io/api or monitoring struct of its kind).
type object struct {
	Kind, Name, Source string
	Text               []byte
	Value              any
}

// kinds maps each kind the chart may render to its apiVersion and a constructor of
// its typed struct. A kind not listed fails the test.
var kinds = map[string]struct {
	apiVersion string
	new        func() any
}{
	"ServiceAccount":      {"v1", func() any { return new(corev1.ServiceAccount) }},
	"Secret":              {"v1", func() any { return new(corev1.Secret) }},
	"ConfigMap":           {"v1", func() any { return new(corev1.ConfigMap) }},
	"Service":             {"v1", func() any { return new(corev1.Service) }},
	"StatefulSet":         {"apps/v1", func() any { return new(appsv1.StatefulSet) }},
	"Deployment":          {"apps/v1", func() any { return new(appsv1.Deployment) }},
	"DaemonSet":           {"apps/v1", func() any { return new(appsv1.DaemonSet) }},
	"Job":                 {"batch/v1", func() any { return new(batchv1.Job) }},
	"PodDisruptionBudget": {"policy/v1", func() any { return new(policyv1.PodDisruptionBudget) }},
	"NetworkPolicy":       {"networking.k8s.io/v1", func() any { return new(networkingv1.NetworkPolicy) }},
	"ServiceMonitor":      {"monitoring.coreos.com/v1", func() any { return new(monitoringv1.ServiceMonitor) }},
	"PrometheusRule":      {"monitoring.coreos.com/v1", func() any { return new(monitoringv1.PrometheusRule) }},
}

var (
	docSep    = regexp.MustCompile(`(?m)^---\s*$`)
	sourceTag = regexp.MustCompile(`(?m)^# Source: (\S+)`)
)

// decodeAll splits a multi-document YAML stream and decodes every document that is
// not empty strictly into its typed struct: an unknown field, a wrong type, an
// unknown kind or an apiVersion other than the kind's fails the test.
func decodeAll(t *testing.T, stream string) []object {
	t.Helper()
	var objs []object
	for _, doc := range docSep.Split(stream, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		src := ""
		if m := sourceTag.FindStringSubmatch(doc); m != nil {
			src = m[1]
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s: not YAML: %v\n%s", src, err, doc)
		}
		k, ok := kinds[tm.Kind]
		if !ok {
			t.Fatalf("%s: kind %q is none the tests know (add its typed struct to kinds):\n%s", src, tm.Kind, doc)
		}
		if tm.APIVersion != k.apiVersion {
			t.Fatalf("%s: %s has apiVersion %q, want %q", src, tm.Kind, tm.APIVersion, k.apiVersion)
		}
		v := k.new()
		if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
			t.Fatalf("%s: %s does not decode strictly into its API struct: %v\n%s", src, tm.Kind, err, doc)
		}
		name := ""
		if m, ok := v.(metav1.Object); ok {
			name = m.GetName()
		}
		if name == "" {
			t.Fatalf("%s: %s has no name", src, tm.Kind)
		}
		objs = append(objs, object{Kind: tm.Kind, Name: name, Source: src, Text: []byte(doc), Value: v})
	}
	if len(objs) == 0 {
		t.Fatal("the rendering holds no object")
	}
	return objs
}

// stripComments drops the lines that are YAML comments only.
func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// rendered is the chart rendered for one set of values, decoded.
type rendered struct {
	Objects []object
	Output  string
}

// renderChart lints the chart with values, renders it and decodes every object.
func renderChart(t *testing.T, values map[string]any, extra ...string) rendered {
	t.Helper()
	file := writeValues(t, values)
	lint(t, file)
	out, stderr, err := template(t, file, extra...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	return rendered{Objects: decodeAll(t, out), Output: out}
}

// all returns the typed objects of kind T, in rendering order.
func all[T any](r rendered) []*T {
	var out []*T
	for _, o := range r.Objects {
		if v, ok := o.Value.(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

// one returns the object of kind T named name, failing the test when there is none.
func one[T any](t *testing.T, r rendered, name string) *T {
	t.Helper()
	for _, o := range r.Objects {
		if v, ok := o.Value.(*T); ok && o.Name == name {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T named %s among the rendered objects", zero, name)
	return nil
}

// named is the full name of one of the release's objects.
func named(suffix string) string { return fmt.Sprintf("%s-idkeeper-%s", release, suffix) }
