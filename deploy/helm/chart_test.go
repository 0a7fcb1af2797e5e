package helm_test

import (
	"encoding/base64"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// storeCase is one store the chart is rendered for.
type storeCase struct {
	name   string
	values map[string]any
	shared bool // a store every replica shares (a Job initialises it), not bolt
}

// storeCases are the default values and one rendering per store, plus the
// monitoring objects on: each is linted, rendered, decoded strictly and checked.
var storeCases = []storeCase{
	{name: "defaults (bolt, one replica)", values: nil},
	{name: "bolt explicit", values: map[string]any{"store": map[string]any{"type": "bolt"}, "registry": map[string]any{"replicas": 1}}},
	{name: "redis by URL", shared: true, values: map[string]any{
		"store":    map[string]any{"type": "redis", "url": "redis://redis.data.svc:6379/0"},
		"registry": map[string]any{"replicas": 3}}},
	{name: "redis URL in a Secret", shared: true, values: map[string]any{
		"store":    map[string]any{"type": "redis", "existingSecret": "idk-store", "redis": map[string]any{"prefix": "idk:"}},
		"registry": map[string]any{"replicas": 2}, "secrets": map[string]any{"existingSecret": "idk-secrets"}}},
	{name: "redis sentinel", shared: true, values: map[string]any{
		"store": map[string]any{"type": "redis-sentinel", "existingSecret": "idk-store", "existingSecretKey": "url",
			"redis": map[string]any{"waitReplicas": 1}},
		"registry": map[string]any{"replicas": 3}}},
	{name: "etcd", shared: true, values: map[string]any{
		"store": map[string]any{"type": "etcd",
			"url": "etcds://etcd-0.etcd:2379,etcd-1.etcd:2379,etcd-2.etcd:2379/idkeeper?cacert=/run/idkeeper/etcd-tls/ca.pem"},
		"registry": map[string]any{"replicas": 2,
			"extraVolumes":      []any{map[string]any{"name": "etcd-tls", "secret": map[string]any{"secretName": "etcd-client-tls"}}},
			"extraVolumeMounts": []any{map[string]any{"name": "etcd-tls", "mountPath": "/run/idkeeper/etcd-tls", "readOnly": true}}},
		"gateway": map[string]any{
			"extraVolumes":      []any{map[string]any{"name": "etcd-tls", "secret": map[string]any{"secretName": "etcd-client-tls"}}},
			"extraVolumeMounts": []any{map[string]any{"name": "etcd-tls", "mountPath": "/run/idkeeper/etcd-tls", "readOnly": true}}},
		"clockAgent": map[string]any{"source": "ntp"}}},
	{name: "postgres", shared: true, values: map[string]any{
		"store":    map[string]any{"type": "postgres", "existingSecret": "idk-pg"},
		"registry": map[string]any{"replicas": 2}, "pool": map[string]any{"nodes": "1024"}}},
	{name: "monitoring on", shared: true, values: map[string]any{
		"store":      map[string]any{"type": "redis", "url": "redis://redis:6379/0"},
		"registry":   map[string]any{"replicas": 2},
		"monitoring": map[string]any{"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}}}},
}

// TestChartRendersEveryStore lints and renders the chart for every store case and
// checks every property issue #34 asks for on the typed objects.
func TestChartRendersEveryStore(t *testing.T) {
	for _, c := range storeCases {
		t.Run(c.name, func(t *testing.T) {
			r := renderChart(t, c.values)
			checkPodsHardened(t, r)
			checkNoSecretOutsideSecrets(t, r)
			checkRegistry(t, r, c)
			checkGateway(t, r, c)
			checkClockAgent(t, r)
			checkNetworkPolicies(t, r)
			checkInit(t, r, c)
		})
	}
}

// podTemplates returns the pod template of every workload, by workload name.
func podTemplates(r rendered) map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for _, s := range all[appsv1.StatefulSet](r) {
		out["StatefulSet/"+s.Name] = &s.Spec.Template
	}
	for _, d := range all[appsv1.Deployment](r) {
		out["Deployment/"+d.Name] = &d.Spec.Template
	}
	for _, d := range all[appsv1.DaemonSet](r) {
		out["DaemonSet/"+d.Name] = &d.Spec.Template
	}
	for _, j := range all[batchv1.Job](r) {
		out["Job/"+j.Name] = &j.Spec.Template
	}
	return out
}

// checkPodsHardened: every pod runs as non-root under RuntimeDefault seccomp with
// no service-account token, and every container (init containers too) has a
// read-only root file system, no privilege escalation, every capability dropped,
// and CPU and memory requests and limits.
func checkPodsHardened(t *testing.T, r rendered) {
	t.Helper()
	pods := podTemplates(r)
	if len(pods) == 0 {
		t.Fatal("no workload rendered")
	}
	for name, p := range pods {
		sc := p.Spec.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
			t.Errorf("%s: the pod does not run as non-root: %+v", name, sc)
		}
		if sc != nil && (sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
			t.Errorf("%s: the pod's seccomp profile is not RuntimeDefault", name)
		}
		if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
			t.Errorf("%s: the pod mounts a service-account token (none of IdKeeper's processes uses the Kubernetes API)", name)
		}
		if p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC {
			t.Errorf("%s: the pod shares a host namespace", name)
		}
		containers := append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...)
		for _, c := range containers {
			where := name + " container " + c.Name
			cs := c.SecurityContext
			switch {
			case cs == nil:
				t.Errorf("%s: no securityContext", where)
				continue
			case cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem:
				t.Errorf("%s: the root file system is writable", where)
			case cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation:
				t.Errorf("%s: privilege escalation is not turned off", where)
			case cs.Privileged != nil && *cs.Privileged:
				t.Errorf("%s: privileged", where)
			case cs.Capabilities == nil || !slices.Equal(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(cs.Capabilities.Add) > 0:
				t.Errorf("%s: capabilities are not all dropped: %+v", where, cs.Capabilities)
			case cs.RunAsNonRoot == nil || !*cs.RunAsNonRoot:
				t.Errorf("%s: runAsNonRoot is not set", where)
			}
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, okReq := c.Resources.Requests[res]
				lim, okLim := c.Resources.Limits[res]
				if !okReq || !okLim || req.IsZero() || lim.IsZero() {
					t.Errorf("%s: no %s request and limit (%v / %v)", where, res, c.Resources.Requests, c.Resources.Limits)
				} else if req.Cmp(lim) > 0 {
					t.Errorf("%s: the %s request %s is above its limit %s", where, res, req.String(), lim.String())
				}
			}
			if c.Ports != nil {
				for _, port := range c.Ports {
					if port.HostPort != 0 {
						t.Errorf("%s: hostPort %d (the chart reaches the node's agent through a node-local Service)", where, port.HostPort)
					}
				}
			}
		}
	}
}

// secretEnv are environment variables that hold a secret when they hold a value:
// they must never be literal, only their _FILE variants pointing into a Secret.
var secretEnv = regexp.MustCompile(`^IDKEEPER_(RECEIPT_SECRET|CLOCK_SECRET|BOOTSTRAP_API_KEY|ADMIN_API_KEY|ADMIN_PASSWORD|API_KEY|CONSUMER_KEYS)$`)

// secretFileEnv are the _FILE variants of the secret settings (and of the store URLs,
// which may hold a password): they must name a file of a mounted Secret.
var secretFileEnv = regexp.MustCompile(`^IDKEEPER_(RECEIPT_SECRET|CLOCK_SECRET|BOOTSTRAP_API_KEY|ADMIN_API_KEY|ADMIN_PASSWORD|API_KEY|CONSUMER_KEYS|STORE|IDEMPOTENCY_STORE)_FILE$`)

// checkNoSecretOutsideSecrets: no generated secret value appears outside its
// Secret (no ConfigMap, no env literal, no argument), no secret setting is an env
// literal or a valueFrom other than a Secret, no store URL literal carries a
// password, and every *_FILE variable names a file of a mounted Secret volume.
func checkNoSecretOutsideSecrets(t *testing.T, r rendered) {
	t.Helper()
	var secretValues []string
	for _, s := range all[corev1.Secret](r) {
		if len(s.StringData) > 0 {
			t.Errorf("Secret %s uses stringData: the chart writes data only", s.Name)
		}
		for k, v := range s.Data {
			if len(v) < 16 {
				t.Errorf("Secret %s key %s: a generated secret of %d bytes", s.Name, k, len(v))
			}
			secretValues = append(secretValues, string(v), base64.StdEncoding.EncodeToString(v))
		}
	}
	for _, o := range r.Objects {
		if o.Kind == "Secret" {
			continue
		}
		for _, v := range secretValues {
			if strings.Contains(string(o.Text), v) {
				t.Errorf("%s %s holds a secret value of the release's Secret", o.Kind, o.Name)
			}
		}
	}
	for _, cm := range all[corev1.ConfigMap](r) {
		for k, v := range cm.Data {
			if regexp.MustCompile(`(?i)secret|password|api.?key|://[^/]*:[^/]*@`).MatchString(k + " " + v) {
				t.Errorf("ConfigMap %s key %s looks like a secret", cm.Name, k)
			}
		}
	}
	for name, p := range podTemplates(r) {
		secretMounts := map[string]bool{} // mount paths of Secret volumes
		secretVolumes := map[string]bool{}
		for _, v := range p.Spec.Volumes {
			if v.Secret != nil {
				secretVolumes[v.Name] = true
			}
		}
		for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			for _, m := range c.VolumeMounts {
				if secretVolumes[m.Name] {
					secretMounts[m.MountPath] = true
					if !m.ReadOnly {
						t.Errorf("%s container %s mounts the Secret volume %s writable", name, c.Name, m.Name)
					}
				}
			}
			for _, arg := range append(slices.Clone(c.Command), c.Args...) {
				if strings.Contains(arg, "://") && strings.Contains(arg, "@") {
					t.Errorf("%s container %s has a URL with credentials in its arguments: %s", name, c.Name, arg)
				}
			}
			for _, e := range c.Env {
				where := name + " container " + c.Name + " env " + e.Name
				if secretEnv.MatchString(e.Name) {
					if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
						t.Errorf("%s: a secret setting that is not from a Secret (use its _FILE variable)", where)
					}
					continue
				}
				if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil && secretEnv.MatchString(e.Name) {
					t.Errorf("%s: a secret from a ConfigMap", where)
				}
				if strings.HasSuffix(e.Name, "STORE") && strings.Contains(e.Value, "@") {
					t.Errorf("%s: a store URL with credentials as a literal: %s", where, e.Value)
				}
				if strings.HasSuffix(e.Name, "_FILE") && e.Name != "IDKEEPER_STATE_FILE" {
					if !secretFileEnv.MatchString(e.Name) {
						t.Errorf("%s: a _FILE variable the test does not know: is it a secret?", where)
					}
					dir := e.Value[:strings.LastIndexByte(e.Value, '/')]
					if !secretMounts[dir] {
						t.Errorf("%s = %s: not a file of a Secret volume mounted in the container (mounts %v)", where, e.Value, secretMounts)
					}
				}
			}
		}
	}
}

// env returns the container's variable name (literal value), failing when absent.
func env(t *testing.T, c corev1.Container, name string) string {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("container %s has no %s", c.Name, name)
	return ""
}

func hasEnv(c corev1.Container, name string) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
}

// checkRegistry: the StatefulSet restarts its pods Always (a replica whose clock
// check latched exits with status 75 and comes back as a fresh container), keeps a
// state volume per replica (volumeClaimTemplates, retained on delete and scale),
// probes /livez and /readyz, and the Services, the PDB and the store settings agree.
func checkRegistry(t *testing.T, r rendered, c storeCase) {
	t.Helper()
	s := one[appsv1.StatefulSet](t, r, named("registry"))
	pod := s.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("the registry's restartPolicy is %q: a replica that exits with status 75 must come back (Always)", pod.RestartPolicy)
	}
	if s.Spec.PersistentVolumeClaimRetentionPolicy == nil ||
		s.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
		s.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("the state volumes are not retained on delete and scale-down: %+v", s.Spec.PersistentVolumeClaimRetentionPolicy)
	}
	if len(s.Spec.VolumeClaimTemplates) != 1 || s.Spec.VolumeClaimTemplates[0].Name != "state" {
		t.Fatalf("the registry's volumeClaimTemplates are not one state volume: %+v", s.Spec.VolumeClaimTemplates)
	}
	if slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "state" }) {
		t.Error("a pod volume named state shadows the per-replica state volume")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("the registry pod has %d containers", len(pod.Containers))
	}
	ctr := pod.Containers[0]
	if !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "state" && m.MountPath == "/var/lib/idkeeper" }) {
		t.Errorf("the state volume is not mounted at /var/lib/idkeeper: %+v", ctr.VolumeMounts)
	}
	if f := env(t, ctr, "IDKEEPER_STATE_FILE"); !strings.HasPrefix(f, "/var/lib/idkeeper/") {
		t.Errorf("IDKEEPER_STATE_FILE %s is not on the state volume", f)
	}
	checkHTTPProbe(t, "registry liveness", ctr.LivenessProbe, "/livez", "api")
	checkHTTPProbe(t, "registry readiness", ctr.ReadinessProbe, "/readyz", "api")
	want := int32(1)
	if c.values != nil {
		if reg, ok := c.values["registry"].(map[string]any); ok {
			want = int32(reg["replicas"].(int))
		}
	}
	if s.Spec.Replicas == nil || *s.Spec.Replicas != want {
		t.Errorf("replicas %v, want %d", s.Spec.Replicas, want)
	}
	if c.shared {
		if hasEnv(ctr, "IDKEEPER_STORE") == hasEnv(ctr, "IDKEEPER_STORE_FILE") {
			t.Error("the registry has neither or both of IDKEEPER_STORE and IDKEEPER_STORE_FILE")
		}
		if !hasEnv(ctr, "IDKEEPER_CLOCK_AGENT") || !hasEnv(ctr, "IDKEEPER_CLOCK_SECRET_FILE") {
			t.Error("a registry on a shared store has no clock agent")
		}
	} else if got := env(t, ctr, "IDKEEPER_STORE"); got != "bolt:/var/lib/idkeeper/idkeeper.db" {
		t.Errorf("the bolt store is %s, not on the state volume", got)
	}
	if hasEnv(ctr, "IDKEEPER_UNSAFE_NO_CLOCK_AGENT") {
		t.Error("the registry runs without its clock agent")
	}
	sel := labels.SelectorFromSet(s.Spec.Selector.MatchLabels)
	if !sel.Matches(labels.Set(s.Spec.Template.Labels)) {
		t.Error("the StatefulSet's selector does not match its pods")
	}
	client := one[corev1.Service](t, r, named("registry"))
	headless := one[corev1.Service](t, r, named("registry-headless"))
	if s.Spec.ServiceName != headless.Name || headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("the StatefulSet's serviceName %s is not the headless Service", s.Spec.ServiceName)
	}
	for _, svc := range []*corev1.Service{client, headless} {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)) {
			t.Errorf("Service %s does not select the registry pods", svc.Name)
		}
	}
	pdb := one[policyv1.PodDisruptionBudget](t, r, named("registry"))
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("the registry's PDB is not maxUnavailable 1: %+v", pdb.Spec)
	}
	if !labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(labels.Set(s.Spec.Template.Labels)) {
		t.Error("the registry's PDB does not select its pods")
	}
}

func checkHTTPProbe(t *testing.T, what string, p *corev1.Probe, path, port string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no HTTP probe", what)
		return
	}
	if p.HTTPGet.Path != path || p.HTTPGet.Port.String() != port {
		t.Errorf("%s probes %s on %s, want %s on %s", what, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, port)
	}
}

// checkGateway: the gateway's probes, its keys from the Secret, and its server.
func checkGateway(t *testing.T, r rendered, c storeCase) {
	t.Helper()
	d := one[appsv1.Deployment](t, r, named("gateway"))
	ctr := d.Spec.Template.Spec.Containers[0]
	// Gateway replicas share their Idempotency-Key records in every shared store
	// (Redis, etcd, PostgreSQL: issue #32); on bolt they keep none.
	switch idem := hasEnv(ctr, "IDKEEPER_IDEMPOTENCY_STORE_FILE"); {
	case c.shared && !idem && env(t, ctr, "IDKEEPER_IDEMPOTENCY_STORE") == "none":
		t.Errorf("the gateway keeps no idempotency records on the shared store")
	case !c.shared && (idem || env(t, ctr, "IDKEEPER_IDEMPOTENCY_STORE") != "none"):
		t.Errorf("the gateway of a bolt registry names an idempotency store")
	}
	checkHTTPProbe(t, "gateway liveness", ctr.LivenessProbe, "/livez", "http")
	checkHTTPProbe(t, "gateway readiness", ctr.ReadinessProbe, "/readyz", "http")
	if env(t, ctr, "IDKEEPER_SERVER") != "http://"+named("registry")+":8080" {
		t.Errorf("the gateway's server is %s", env(t, ctr, "IDKEEPER_SERVER"))
	}
	for _, f := range []string{"IDKEEPER_API_KEY_FILE", "IDKEEPER_CONSUMER_KEYS_FILE"} {
		if !strings.HasPrefix(env(t, ctr, f), "/run/idkeeper/secrets/") {
			t.Errorf("the gateway's %s is not from the Secret", f)
		}
	}
	one[policyv1.PodDisruptionBudget](t, r, named("gateway"))
}

// checkClockAgent: a DaemonSet whose readiness is an authenticated TCKCLK 2 exchange
// (as Compose's health check), reached by the registry through a Service with
// internalTrafficPolicy Local (its own node's agent).
func checkClockAgent(t *testing.T, r rendered) {
	t.Helper()
	ds := one[appsv1.DaemonSet](t, r, named("clock-agent"))
	ctr := ds.Spec.Template.Spec.Containers[0]
	if ds.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("the agent's restartPolicy is %q", ds.Spec.Template.Spec.RestartPolicy)
	}
	rp := ctr.ReadinessProbe
	want := []string{"/usr/local/bin/idkeeper", "probe", "--secret-file", "/run/idkeeper/secrets/clock-secret", "tckclk://127.0.0.1:4123"}
	if rp == nil || rp.Exec == nil || !slices.Equal(rp.Exec.Command, want) {
		t.Errorf("the agent's readiness probe is not the TCKCLK exchange %v: %+v", want, rp)
	}
	if !slices.Contains(ctr.Args, "--secret-file=/run/idkeeper/secrets/clock-secret") ||
		!slices.ContainsFunc(ctr.Args, func(a string) bool { return a == "--source=kernel" || a == "--source=ntp" }) {
		t.Errorf("the agent's arguments: %v", ctr.Args)
	}
	if allow := env(t, ctr, "IDKEEPER_ALLOW"); !strings.Contains(allow, "127.0.0.1/32") {
		t.Errorf("the agent does not serve its own readiness probe: --allow %s", allow)
	}
	svc := one[corev1.Service](t, r, named("clock-agent"))
	if svc.Spec.InternalTrafficPolicy == nil || *svc.Spec.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyLocal {
		t.Error("the agent's Service does not keep a replica's traffic on its node (internalTrafficPolicy Local)")
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Error("the agent's Service does not select the agent's pods")
	}
	reg := one[appsv1.StatefulSet](t, r, named("registry")).Spec.Template.Spec.Containers[0]
	if got := env(t, reg, "IDKEEPER_CLOCK_AGENT"); got != svc.Name+":4123" || svc.Spec.Ports[0].Port != 4123 {
		t.Errorf("the registry asks the agent at %s, the Service is %s:%d", got, svc.Name, svc.Spec.Ports[0].Port)
	}
}

// checkInit: a shared store is initialised by a pre-install hook Job only; bolt by
// the registry's init container with --unless-seen its own state volume.
func checkInit(t *testing.T, r rendered, c storeCase) {
	t.Helper()
	jobs := all[batchv1.Job](r)
	s := one[appsv1.StatefulSet](t, r, named("registry"))
	if !c.shared {
		if len(jobs) != 0 {
			t.Errorf("bolt: %d init Jobs (the file is on the replica's volume: its init container initialises it)", len(jobs))
		}
		ic := s.Spec.Template.Spec.InitContainers
		if len(ic) != 1 || !slices.Equal(ic[0].Args, []string{"init", "--unless-seen", "/var/lib/idkeeper"}) {
			t.Fatalf("bolt: the registry's init container is not init --unless-seen its state volume: %+v", ic)
		}
		if !slices.ContainsFunc(ic[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "state" && m.MountPath == "/var/lib/idkeeper" }) {
			t.Error("bolt: the init container does not see the state volume")
		}
		return
	}
	if len(s.Spec.Template.Spec.InitContainers) != 0 {
		t.Error("a shared store is initialised by an init container of every replica (a replica with a new volume would initialise a lost store)")
	}
	if len(jobs) != 1 {
		t.Fatalf("%d init Jobs, want 1", len(jobs))
	}
	j := jobs[0]
	if j.Annotations["helm.sh/hook"] != "pre-install" {
		t.Errorf("the init Job's hook is %q, want pre-install only (never on upgrade)", j.Annotations["helm.sh/hook"])
	}
	if args := j.Spec.Template.Spec.Containers[0].Args; !slices.Equal(args, []string{"init"}) {
		t.Errorf("the init Job runs %v", args)
	}
	if j.Spec.Template.Spec.RestartPolicy == corev1.RestartPolicyAlways {
		t.Error("the init Job restarts Always")
	}
}

// TestInitJobNeverOnUpgrade: rendered as an upgrade, a shared store gets no init
// Job: a registry of the release may have seen the store by then.
func TestInitJobNeverOnUpgrade(t *testing.T) {
	values := map[string]any{"store": map[string]any{"type": "redis", "url": "redis://redis:6379/0"}, "registry": map[string]any{"replicas": 2}}
	r := renderChart(t, values, "--is-upgrade")
	if jobs := all[batchv1.Job](r); len(jobs) != 0 {
		t.Errorf("an upgrade renders %d init Jobs", len(jobs))
	}
	install := renderChart(t, values)
	if len(all[batchv1.Job](install)) != 1 {
		t.Fatal("the install renders no init Job: the test above proves nothing")
	}
}

// TestMonitoringObjects: the ServiceMonitor scrapes the metrics Services, and the
// PrometheusRule carries deploy/prometheus/alerts.yaml's rules exactly.
func TestMonitoringObjects(t *testing.T) {
	off := renderChart(t, nil)
	if len(all[monitoringv1.ServiceMonitor](off))+len(all[monitoringv1.PrometheusRule](off)) != 0 {
		t.Error("the monitoring objects render by default (they need the Prometheus operator's CRDs)")
	}
	r := renderChart(t, storeCases[len(storeCases)-1].values)
	sm := one[monitoringv1.ServiceMonitor](t, r, release+"-idkeeper")
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" {
		t.Fatalf("the ServiceMonitor's endpoints: %+v", sm.Spec.Endpoints)
	}
	sel := labels.SelectorFromSet(sm.Spec.Selector.MatchLabels)
	var scraped []string
	for _, svc := range all[corev1.Service](r) {
		if sel.Matches(labels.Set(svc.Labels)) {
			scraped = append(scraped, svc.Name)
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
				t.Errorf("the ServiceMonitor selects Service %s, which has no metrics port", svc.Name)
			}
		}
	}
	slices.Sort(scraped)
	if want := []string{named("gateway-metrics"), named("registry-headless")}; !slices.Equal(scraped, want) {
		t.Errorf("the ServiceMonitor scrapes %v, want %v", scraped, want)
	}
	checkPrometheusRule(t, r)
}

// TestExtraVolumesReachEveryStoreClient: the files an etcds:// URL names (a CA
// here) are mounted wherever the URL is used: the registry, the init Job and the
// gateway that keeps its records in the store.
func TestExtraVolumesReachEveryStoreClient(t *testing.T) {
	i := slices.IndexFunc(storeCases, func(c storeCase) bool { return c.name == "etcd" })
	r := renderChart(t, storeCases[i].values)
	pods := podTemplates(r)
	for _, name := range []string{"StatefulSet/" + named("registry"), "Job/" + named("init"), "Deployment/" + named("gateway")} {
		p, ok := pods[name]
		if !ok {
			t.Fatalf("no %s rendered", name)
		}
		ctr := p.Spec.Containers[0]
		if !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/run/idkeeper/etcd-tls" }) ||
			!slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "etcd-client-tls" }) {
			t.Errorf("%s does not mount the store's TLS files", name)
		}
	}
}

// TestNoServiceLinks: no pod gets Kubernetes' service-link variables, which for a
// release named idkeeper would be IDKEEPER_… variables, the settings' prefix.
func TestNoServiceLinks(t *testing.T) {
	r := renderChart(t, map[string]any{"fullnameOverride": "idkeeper"})
	for name, p := range podTemplates(r) {
		if p.Spec.EnableServiceLinks == nil || *p.Spec.EnableServiceLinks {
			t.Errorf("%s: enableServiceLinks is not false", name)
		}
	}
}
