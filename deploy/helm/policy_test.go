package helm_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// checkNetworkPolicies: the agent's port is open to the release's registry pods
// only; the registry's API to the gateway and networkPolicy.apiFrom; metrics to the
// monitoring namespace only.
func checkNetworkPolicies(t *testing.T, r rendered) {
	t.Helper()
	agentPods := labels.Set(one[appsv1.DaemonSet](t, r, named("clock-agent")).Spec.Template.Labels)
	registryPods := labels.Set(one[appsv1.StatefulSet](t, r, named("registry")).Spec.Template.Labels)
	gatewayPods := labels.Set(one[appsv1.Deployment](t, r, named("gateway")).Spec.Template.Labels)
	strangers := []labels.Set{gatewayPods, agentPods, {"app": "anything"}, {}}
	var agentPolicies int
	for _, np := range all[networkingv1.NetworkPolicy](r) {
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("NetworkPolicy %s: policyTypes %v", np.Name, np.Spec.PolicyTypes)
		}
		sel, err := metaSelector(np.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(agentPods) {
			continue
		}
		agentPolicies++
		for _, rule := range np.Spec.Ingress {
			if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || rule.Ports[0].Port.String() != "tckclk" {
				t.Errorf("NetworkPolicy %s opens the agent on %v, not its port only", np.Name, rule.Ports)
			}
			if len(rule.From) == 0 {
				t.Errorf("NetworkPolicy %s opens the agent's port to everyone", np.Name)
			}
			for _, peer := range rule.From {
				if peer.NamespaceSelector != nil || peer.IPBlock != nil || peer.PodSelector == nil {
					t.Errorf("NetworkPolicy %s: the agent's port is open beyond the release's registry pods: %+v", np.Name, peer)
					continue
				}
				ps, err := metaSelector(*peer.PodSelector)
				if err != nil {
					t.Fatal(err)
				}
				if !ps.Matches(registryPods) {
					t.Errorf("NetworkPolicy %s: a peer of the agent's port that is not the registry: %v", np.Name, ps)
				}
				for _, s := range strangers {
					if ps.Matches(s) {
						t.Errorf("NetworkPolicy %s: the agent's port is open to pods labelled %v", np.Name, s)
					}
				}
			}
		}
	}
	if agentPolicies != 1 {
		t.Errorf("%d NetworkPolicies select the clock agent, want 1", agentPolicies)
	}
	reg := one[networkingv1.NetworkPolicy](t, r, named("registry"))
	checkAPIAndMetrics(t, reg, "api", registryPods, gatewayPods)
	gw := one[networkingv1.NetworkPolicy](t, r, named("gateway"))
	checkAPIAndMetrics(t, gw, "http", gatewayPods, nil)
}

// checkAPIAndMetrics checks a workload's policy: it selects pods, opens port api to
// the peers of the default values (every pod of the namespace, podSelector {}) and
// to mustAllow, and metrics to the namespace "monitoring" only.
func checkAPIAndMetrics(t *testing.T, np *networkingv1.NetworkPolicy, api string, pods labels.Set, mustAllow labels.Set) {
	t.Helper()
	sel, err := metaSelector(np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(pods) {
		t.Fatalf("NetworkPolicy %s does not select its pods", np.Name)
	}
	var sawAPI, sawMetrics bool
	for _, rule := range np.Spec.Ingress {
		if len(rule.Ports) != 1 || rule.Ports[0].Port == nil {
			t.Errorf("NetworkPolicy %s: a rule on %v", np.Name, rule.Ports)
			continue
		}
		switch port := rule.Ports[0].Port.String(); port {
		case api:
			sawAPI = true
			if mustAllow != nil && !slices.ContainsFunc(rule.From, func(p networkingv1.NetworkPolicyPeer) bool {
				if p.PodSelector == nil || p.NamespaceSelector != nil {
					return false
				}
				s, err := metaSelector(*p.PodSelector)
				return err == nil && s.Matches(mustAllow)
			}) {
				t.Errorf("NetworkPolicy %s: %s is closed to %v", np.Name, api, mustAllow)
			}
		case "metrics":
			sawMetrics = true
			if len(rule.From) != 1 || rule.From[0].PodSelector != nil || rule.From[0].NamespaceSelector == nil ||
				rule.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
				t.Errorf("NetworkPolicy %s: metrics are open to %+v, not the namespace monitoring alone", np.Name, rule.From)
			}
		default:
			t.Errorf("NetworkPolicy %s opens port %s", np.Name, port)
		}
	}
	if !sawAPI || !sawMetrics {
		t.Errorf("NetworkPolicy %s: %s rule %v, metrics rule %v", np.Name, api, sawAPI, sawMetrics)
	}
}
