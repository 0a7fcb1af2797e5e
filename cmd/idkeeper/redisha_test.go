package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/redistest"
)

// The server runs on Redis Sentinel from the command line (issue #15): the
// store URL in the environment (it holds the sentinels' and the data nodes'
// passwords, kept apart), AOF always, --redis-wait-replicas 1. The master is
// killed with SIGKILL; once the sentinels promote a replica the holder renews
// the same lease, a newcomer is served, and no reset was needed: every grant
// was acknowledged by a replica before it was answered.
func TestServerOnSentinelFailover(t *testing.T) {
	st := redistest.StartSentinel(t, redistest.WithDataOptions(redistest.WithAOF(), redistest.WithPassword("data-password-0123456789")),
		redistest.WithSentinelPassword("sentinel-password-0123456789"))
	env := map[string]string{BootstrapKeyEnv: bootstrapKey, "IDKEEPER_STORE": st.URL()}
	if code, _, stderr := runInProcess(context.Background(), []string{"init"}, env); code != exitOK {
		t.Fatalf("init: %d %s", code, stderr)
	}
	s, code := startInProcess(t, []string{"--redis-wait-replicas", "1", "--unsafe-no-clock-agent",
		"--state-file", filepath.Join(t.TempDir(), "state")}, env)
	if s == nil || s.base == "" {
		t.Fatalf("server exited %d", code)
	}
	defer s.stop()
	if strings.Contains(s.logs.String(), "data-password") || strings.Contains(s.logs.String(), "sentinel-password") {
		t.Fatalf("a password in the log:\n%s", s.logs.String())
	}
	c := s.client(bootstrapKey)
	who := `{"machineId":"m","pid":1,"startedAt":"2026-11-30T00:00:00Z","instance":"a"}`
	a := c.do("POST", "/v1/leases", `{"requester":`+who+`,"count":2}`, 200)

	old := st.KillMaster(t)
	st.WaitFailover(t, old, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, r := c.post("/v1/leases/renew", `{"requester":`+who+`}`)
		if status == 200 {
			if got, want := fmt.Sprint(nodeIDs(r)), fmt.Sprint(nodeIDs(a)); got != want {
				t.Fatalf("renew after the failover: %v, want the node IDs %s", r, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no renewal within 30 s of the failover (last %d %v):\n%s", status, r, s.logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.do("POST", "/v1/leases", `{"requester":{"machineId":"n","pid":2,"startedAt":"2026-11-30T00:00:00Z","instance":"b"},"count":1}`, 200)
	if logs := s.logs.String(); strings.Contains(logs, "store reset detected") {
		t.Fatalf("a reset after an acknowledged failover:\n%s", logs)
	}
}

// The server runs from the command line on a three-master Redis Cluster, the
// store URL in the redis+cluster form: the README's session round trip.
func TestServerOnCluster(t *testing.T) {
	cl := redistest.StartCluster3(t, redistest.WithAOF())
	env := map[string]string{BootstrapKeyEnv: bootstrapKey, "IDKEEPER_STORE": cl.URL()}
	if code, _, stderr := runInProcess(context.Background(), []string{"init"}, env); code != exitOK {
		t.Fatalf("init: %d %s", code, stderr)
	}
	s, code := startInProcess(t, []string{"--unsafe-no-clock-agent", "--state-file", filepath.Join(t.TempDir(), "state")}, env)
	if s == nil || s.base == "" {
		t.Fatalf("server exited %d", code)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(s.logs.String())
		}
	})
	curlSession(s.client(bootstrapKey), 4096, 0, 10*time.Minute)
	if code := s.stop(); code != exitOK {
		t.Fatalf("exit %d:\n%s", code, s.logs.String())
	}
}

// post sends body and returns the status and the JSON answer, without failing
// the test on the status.
func (c *client) post(path, body string) (int, map[string]any) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.base+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// Without replica acknowledgement a failover may lose the last grants: the
// registry cannot tell, so it treats the promotion as a store reset (DESIGN §7):
// the pool is quarantined, and the holder keeps its lease by renewing with its
// receipts.
func TestServerOnSentinelFailoverWithoutWait(t *testing.T) {
	st := redistest.StartSentinel(t, redistest.WithDataOptions(redistest.WithAOF()))
	env := map[string]string{BootstrapKeyEnv: bootstrapKey, "IDKEEPER_STORE": st.URL()}
	if code, _, stderr := runInProcess(context.Background(), []string{"init"}, env); code != exitOK {
		t.Fatalf("init: %d %s", code, stderr)
	}
	s, code := startInProcess(t, []string{"--unsafe-no-clock-agent", "--state-file", filepath.Join(t.TempDir(), "state")}, env)
	if s == nil || s.base == "" {
		t.Fatalf("server exited %d", code)
	}
	defer s.stop()
	c := s.client(bootstrapKey)
	who := `{"machineId":"m","pid":1,"startedAt":"2026-11-30T00:00:00Z","instance":"a"}`
	a := c.do("POST", "/v1/leases", `{"requester":`+who+`,"count":1}`, 200)
	receipt := a["leases"].([]any)[0].(map[string]any)["receipt"].(string)

	old := st.KillMaster(t)
	st.WaitFailover(t, old, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.logs.String(), "store reset detected and recovered") {
		if time.Now().After(deadline) {
			t.Fatalf("no reset recovered within 30 s of an unacknowledged failover:\n%s", s.logs.String())
		}
		c.post("/v1/leases/renew", `{"requester":`+who+`,"receipts":["`+receipt+`"]}`)
		time.Sleep(200 * time.Millisecond)
	}
	// The recovery is logged before its last steps (the bootstrap key written
	// again): until they are done the registry answers 503 STORE_RECOVERING.
	status, r := c.post("/v1/leases/renew", `{"requester":`+who+`,"receipts":["`+receipt+`"]}`)
	for deadline := time.Now().Add(10 * time.Second); status == 503 && r["code"] == "STORE_RECOVERING" && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		status, r = c.post("/v1/leases/renew", `{"requester":`+who+`,"receipts":["`+receipt+`"]}`)
	}
	if status != 200 || fmt.Sprint(nodeIDs(r)) != fmt.Sprint(nodeIDs(a)) {
		t.Fatalf("renew with the receipt after the reset: %d %v, want the node ID %v", status, r, nodeIDs(a))
	}
	if r := c.do("GET", "/v1/leases/remaining", "", 200); r["quarantined"] != 4095.0 {
		t.Fatalf("remaining after the reset: %v, want every other node ID quarantined", r)
	}
}
