package helm_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeAPI is the least of a Kubernetes API server that `helm template
// --dry-run=server` needs to render the chart's lookups against objects of the
// test's choosing: discovery, the version, and GET and LIST of the objects it
// holds; everything else is 404. It runs on loopback and changes nothing: the
// rendering only reads. It is not a cluster: it answers what the chart's lookup
// calls ask, so that their logic runs against real API answers.
type fakeAPI struct {
	mu      sync.Mutex
	objects map[string]any // by API path: /api/v1/namespaces/NS/secrets/NAME
	lists   map[string]any // by API path of the collection
	seen    []string
}

// resources of the discovery documents: group/version → kinds by plural.
var fakeResources = map[string][][3]string{ // plural, kind, namespaced
	"v1": {{"secrets", "Secret", "t"}, {"persistentvolumeclaims", "PersistentVolumeClaim", "t"}, {"services", "Service", "t"},
		{"serviceaccounts", "ServiceAccount", "t"}, {"configmaps", "ConfigMap", "t"}, {"namespaces", "Namespace", ""}},
	"apps/v1":                  {{"statefulsets", "StatefulSet", "t"}, {"deployments", "Deployment", "t"}, {"daemonsets", "DaemonSet", "t"}},
	"batch/v1":                 {{"jobs", "Job", "t"}},
	"policy/v1":                {{"poddisruptionbudgets", "PodDisruptionBudget", "t"}},
	"networking.k8s.io/v1":     {{"networkpolicies", "NetworkPolicy", "t"}},
	"monitoring.coreos.com/v1": {{"servicemonitors", "ServiceMonitor", "t"}, {"prometheusrules", "PrometheusRule", "t"}},
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.seen = append(f.seen, r.Method+" "+r.URL.Path)
	f.mu.Unlock()
	if r.Method != http.MethodGet {
		writeStatus(w, http.StatusMethodNotAllowed, "the fake API server only reads")
		return
	}
	path := r.URL.Path
	switch {
	case path == "/version":
		writeJSON(w, map[string]string{"major": "1", "minor": "37", "gitVersion": "v1.37.0", "platform": "linux/amd64"})
		return
	case path == "/api":
		writeJSON(w, map[string]any{"kind": "APIVersions", "versions": []string{"v1"}})
		return
	case path == "/apis":
		var groups []map[string]any
		for gv := range fakeResources {
			if gv == "v1" {
				continue
			}
			g, v, _ := strings.Cut(gv, "/")
			ver := map[string]string{"groupVersion": gv, "version": v}
			groups = append(groups, map[string]any{"name": g, "versions": []any{ver}, "preferredVersion": ver})
		}
		writeJSON(w, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
		return
	}
	gv := strings.TrimPrefix(strings.TrimPrefix(path, "/api/"), "/apis/")
	if res, ok := fakeResources[gv]; ok {
		var list []map[string]any
		for _, x := range res {
			list = append(list, map[string]any{"name": x[0], "kind": x[1], "namespaced": x[2] != "",
				"verbs": []string{"get", "list"}, "singularName": ""})
		}
		writeJSON(w, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list})
		return
	}
	f.mu.Lock()
	obj, isObj := f.objects[path]
	list, isList := f.lists[path]
	f.mu.Unlock()
	switch {
	case isObj:
		writeJSON(w, obj)
	case isList:
		writeJSON(w, list)
	case strings.HasSuffix(path, "/persistentvolumeclaims") || strings.HasSuffix(path, "/secrets"):
		kind := "SecretList"
		if strings.HasSuffix(path, "/persistentvolumeclaims") {
			kind = "PersistentVolumeClaimList"
		}
		writeJSON(w, map[string]any{"kind": kind, "apiVersion": "v1", "metadata": map[string]any{}, "items": []any{}})
	default:
		writeStatus(w, http.StatusNotFound, path+" not found")
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeStatus(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	reason := metav1.StatusReasonNotFound
	if code != http.StatusNotFound {
		reason = metav1.StatusReasonMethodNotAllowed
	}
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code)})
}

// startFakeAPI serves f on loopback and returns a kubeconfig file pointing at it.
func startFakeAPI(t *testing.T, f *fakeAPI) string {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {token: fake}}]
contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: %s}}]
current-context: fake
`, srv.URL, namespace)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// templateAgainst renders the chart with `--dry-run=server` against the fake API.
func templateAgainst(t *testing.T, f *fakeAPI, values map[string]any, extra ...string) rendered {
	t.Helper()
	kubeconfig := startFakeAPI(t, f)
	args := []string{"template", release, chartDir, "--namespace", namespace, "--dry-run=server",
		"--disable-openapi-validation", "--kubeconfig", kubeconfig}
	if file := writeValues(t, values); file != "" {
		args = append(args, "-f", file)
	}
	args = append(args, extra...)
	stdout, stderr, err := runHelm(t, args...)
	if err != nil {
		f.mu.Lock()
		seen := strings.Join(f.seen, "\n  ")
		f.mu.Unlock()
		t.Fatalf("helm %s: %v\n%s\nrequests:\n  %s", strings.Join(args, " "), err, stderr, seen)
	}
	return rendered{Objects: decodeAll(t, stdout), Output: stdout}
}

var redisValues = map[string]any{"store": map[string]any{"type": "redis", "url": "redis://redis:6379/0"}, "registry": map[string]any{"replicas": 2}}

// TestSecretKeptOnUpgrade: with the release's Secret in the namespace, the chart
// renders it with the data it holds (looked up), not new random values: an upgrade
// never changes the receipt secret, the clock secret or the keys.
func TestSecretKeptOnUpgrade(t *testing.T) {
	name := named("secrets")
	data := map[string][]byte{}
	for _, k := range []string{"receipt-secret", "clock-secret", "bootstrap-api-key", "admin-password", "consumer-keys"} {
		data[k] = []byte("kept-" + k + "-0123456789abcdef0123456789")
	}
	existing := corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Data: data}
	f := &fakeAPI{objects: map[string]any{"/api/v1/namespaces/" + namespace + "/secrets/" + name: existing}}
	r := templateAgainst(t, f, redisValues, "--is-upgrade")
	s := one[corev1.Secret](t, r, name)
	for k, v := range data {
		if string(s.Data[k]) != string(v) {
			t.Errorf("the upgrade renders %s = %q, not the Secret's %q", k, s.Data[k], v)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t.Logf("requests: %v", f.seen)
	if !strings.Contains(strings.Join(f.seen, "\n"), "GET /api/v1/namespaces/"+namespace+"/secrets/"+name) {
		t.Errorf("the chart never looked the Secret up: %v", f.seen)
	}
}

// TestInitJobLeftOutWhenAStateVolumeIsLeft: an install that finds a state volume of
// an earlier release of its name renders no init Job (a registry of it saw the
// store, issue #30), and one that finds only others' volumes renders it.
func TestInitJobLeftOutWhenAStateVolumeIsLeft(t *testing.T) {
	pvcs := func(names ...string) map[string]any {
		var items []corev1.PersistentVolumeClaim
		for _, n := range names {
			items = append(items, corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: namespace}})
		}
		return map[string]any{"/api/v1/namespaces/" + namespace + "/persistentvolumeclaims": corev1.PersistentVolumeClaimList{
			TypeMeta: metav1.TypeMeta{Kind: "PersistentVolumeClaimList", APIVersion: "v1"}, Items: items}}
	}
	left := templateAgainst(t, &fakeAPI{lists: pvcs("data-postgres-0", "state-"+named("registry")+"-1")}, redisValues)
	if jobs := all[batchv1.Job](left); len(jobs) != 0 {
		t.Errorf("with the state volume of an earlier release left, the install renders %d init Jobs", len(jobs))
	}
	others := templateAgainst(t, &fakeAPI{lists: pvcs("data-postgres-0", "state-other-idkeeper-registry-0")}, redisValues)
	if jobs := all[batchv1.Job](others); len(jobs) != 1 {
		t.Errorf("with only other releases' volumes, the install renders %d init Jobs, want 1", len(jobs))
	}
}
