//go:build unix

package client_test

import (
	"context"
	"os"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
)

// podRequesterConfig is docs/client.md's "Kubernetes: the pod as the machine": the
// requester's machine ID from the pod's UID (the downward API's metadata.uid in
// POD_UID), the PID and start time of ProcessRequester.
func podRequesterConfig(t *testing.T, serverURL, apiKey string) client.Config {
	t.Helper()
	r, err := client.ProcessRequester()
	if err != nil {
		t.Fatal(err)
	}
	r.MachineID = "k8s-pod:" + os.Getenv("POD_UID")
	return client.Config{ServerURL: serverURL, APIKey: apiKey, Requester: r, Host: os.Getenv("POD_NAME"),
		Labels: map[string]string{"namespace": os.Getenv("POD_NAMESPACE")}}
}

// TestRequesterFromPodUID: a session started with the pod's UID as its machine ID
// sends it, and adds an instance of its own, so that two sessions of one pod (or a
// restarted container of the same pod, whose PID and start time may repeat) hold
// different leases.
func TestRequesterFromPodUID(t *testing.T) {
	const uid = "6a4d3c2b-1f0e-4d9c-8b7a-0123456789ab"
	t.Setenv("POD_UID", uid)
	t.Setenv("POD_NAME", "orders-7d9f8c6b5-x2x4q")
	t.Setenv("POD_NAMESPACE", "shop")
	serverURL, apiKey, stop := startDemoRegistry(idkeeper.Config{})
	defer stop()

	ctx := context.Background()
	a, err := client.Start(ctx, podRequesterConfig(t, serverURL, apiKey))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := client.Start(ctx, podRequesterConfig(t, serverURL, apiKey))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	ra, rb := a.Requester(), b.Requester()
	if ra.MachineID != "k8s-pod:"+uid || rb.MachineID != ra.MachineID {
		t.Fatalf("machine IDs %q and %q, want k8s-pod:%s", ra.MachineID, rb.MachineID, uid)
	}
	if ra.PID != os.Getpid() || !ra.StartedAt.Equal(rb.StartedAt) {
		t.Errorf("the process part of the requester: %+v / %+v", ra, rb)
	}
	if ra.Instance == "" || ra.Instance == rb.Instance {
		t.Fatalf("instances %q and %q: each session must add one of its own", ra.Instance, rb.Instance)
	}
	la, lb := a.Leases(), b.Leases()
	if len(la) != 1 || len(lb) != 1 || la[0].NodeID == lb[0].NodeID {
		t.Fatalf("two sessions of one pod share a node ID: %+v / %+v", la, lb)
	}
}
