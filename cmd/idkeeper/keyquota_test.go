package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
)

// quotaStores are a bolt file and a Redis, each initialised with a pool of 16
// node IDs: the server's default quota is then 4.
func quotaStores(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"bolt": func(t *testing.T) string {
			store := "bolt:" + filepath.Join(t.TempDir(), "idkeeper.db")
			initInProcess(t, store, "--nodes", "16")
			return store
		},
		"redis": func(t *testing.T) string {
			store := redistest.Start(t).URL()
			initInProcess(t, store, "--nodes", "16")
			return store
		},
	}
}

// startQuotaServer starts a server on store with the bootstrap key and the admin
// key of the tests; extra are more flags.
func startQuotaServer(t *testing.T, store string, extra ...string) *inProcess {
	t.Helper()
	args := append([]string{"--store", store, "--state-file", filepath.Join(t.TempDir(), "state")}, extra...)
	if strings.HasPrefix(store, "redis") {
		args = append(args, "--accept-lost-writes-on-redis-restart")
	}
	s, code := startInProcess(t, args, map[string]string{BootstrapKeyEnv: bootstrapKey, AdminKeyEnv: adminKey})
	if s.base == "" {
		t.Fatalf("server exited with %d:\n%s", code, s.logs)
	}
	stop := sync.OnceValue(s.stop)
	s.stop = stop
	t.Cleanup(func() { stop() })
	return s
}

func quotaAlloc(i, count int) string {
	return fmt.Sprintf(`{"requester":{"machineId":"m","pid":%d,"startedAt":"2026-11-30T10:00:00Z","instance":"q"},"count":%d}`, i, count)
}

func quotaRequester(i int) string {
	return fmt.Sprintf(`{"requester":{"machineId":"m","pid":%d,"startedAt":"2026-11-30T10:00:00Z","instance":"q"}}`, i)
}

// wantQuotaProblem checks a 409 API_KEY_QUOTA_EXCEEDED body.
func wantQuotaProblem(t *testing.T, r map[string]any, maxNodes, held, cooling int) {
	t.Helper()
	if r["code"] != "API_KEY_QUOTA_EXCEEDED" || r["maxNodes"] != float64(maxNodes) || r["held"] != float64(held) ||
		r["cooling"] != float64(cooling) {
		t.Fatalf("refusal %v, want API_KEY_QUOTA_EXCEEDED with maxNodes %d, held %d, cooling %d", r, maxNodes, held, cooling)
	}
}

// Issue #29 finding 3: on a server with the default settings, a key without a
// quota of its own (the bootstrap key) cannot take the whole pool: the default
// quota, a quarter of the pool, applies; another key still gets node IDs; the
// admin API shows the quota as the default.
func TestDefaultKeyQuotaStopsPoolGrab(t *testing.T) {
	for name, open := range quotaStores(t) {
		t.Run(name, func(t *testing.T) {
			s := startQuotaServer(t, open(t))
			boot, admin := s.client(bootstrapKey), s.client(adminKey)
			wantQuotaProblem(t, boot.do("POST", "/v1/leases", quotaAlloc(1, 16), 409), 4, 0, 0)
			if !strings.Contains(s.logs.String(), `"keyMaxNodesDefault":4`) {
				t.Fatalf("the start log does not name the default quota 4:\n%s", s.logs)
			}
			boot.do("POST", "/v1/leases", quotaAlloc(1, 4), 200)
			wantQuotaProblem(t, boot.do("POST", "/v1/leases", quotaAlloc(2, 1), 409), 4, 4, 0)
			admin.do("POST", "/v1/leases", quotaAlloc(3, 4), 200) // the admin key's own default quota
			wantQuotaProblem(t, admin.do("POST", "/v1/leases", quotaAlloc(4, 1), 409), 4, 4, 0)

			keys := admin.do("GET", "/admin/api/keys", "", 200)["keys"].([]any)
			if len(keys) != 2 {
				t.Fatalf("keys %v", keys)
			}
			for _, k := range keys {
				k := k.(map[string]any)
				if k["maxNodes"] != 0.0 || k["effectiveMaxNodes"] != 4.0 || k["maxNodesIsDefault"] != true || k["nodesHeld"] != 4.0 {
					t.Errorf("key %v, want no quota of its own, the default 4 in effect, 4 held", k)
				}
			}
			// A key's own quota overrides the default.
			created := admin.do("POST", "/admin/api/keys", `{"description":"big","maxNodes":8}`, 201)
			if k := created["key"].(map[string]any); k["effectiveMaxNodes"] != 8.0 || k["maxNodesIsDefault"] != false {
				t.Errorf("created key %v, want its own quota 8 in effect", k)
			}
			big := s.client(created["secret"].(string))
			big.do("POST", "/v1/leases", quotaAlloc(5, 8), 200)
			if r := boot.do("GET", "/v1/leases/remaining", "", 200); r["remaining"] != 0.0 {
				t.Fatalf("remaining %v", r)
			}
		})
	}
}

// Issue #29 finding 3: Alloc, Renew, then Remove without mintedUpTo, again and
// again, stops at the key's quota, the cooling node IDs counted; another key
// still gets node IDs; a Remove with mintedUpTo charges nothing. Through HTTP on
// bolt and Redis.
func TestRemove_CyclesStopAtQuota(t *testing.T) {
	for name, open := range quotaStores(t) {
		t.Run(name, func(t *testing.T) {
			s := startQuotaServer(t, open(t))
			boot, admin := s.client(bootstrapKey), s.client(adminKey)
			for i := 1; i <= 4; i++ {
				boot.do("POST", "/v1/leases", quotaAlloc(i, 1), 200)
				boot.do("POST", "/v1/leases/renew", quotaRequester(i), 200)
				boot.do("POST", "/v1/leases/remove", quotaRequester(i), 200)
			}
			wantQuotaProblem(t, boot.do("POST", "/v1/leases", quotaAlloc(5, 1), 409), 4, 4, 4)
			if r := boot.do("GET", "/v1/leases/remaining", "", 200); r["remaining"] != 16.0 || r["cooling"] != 4.0 {
				t.Fatalf("remaining %v, want 16 free, 4 of them cooling", r)
			}
			admin.do("POST", "/v1/leases", quotaAlloc(6, 4), 200)
			bootID, _ := idkeeper.HashAPIKey(bootstrapKey)
			seen := false
			for _, k := range admin.do("GET", "/admin/api/keys", "", 200)["keys"].([]any) {
				k := k.(map[string]any)
				if k["id"] == bootID && (k["nodesCooling"] != 4.0 || k["nodesHeld"] != 0.0) {
					t.Errorf("bootstrap key %v, want 4 cooling, none held", k)
				}
				seen = seen || k["id"] == bootID
			}
			if !seen {
				t.Errorf("the admin API does not list the bootstrap key %s", bootID)
			}
			// The admin key's Remove with mintedUpTo lets its node IDs be reused at
			// once: nothing is charged.
			admin.do("POST", "/v1/leases/remove", strings.TrimSuffix(quotaRequester(6), "}")+`,"mintedUpTo":"2000-01-01T00:00:00Z"}`, 200)
			admin.do("POST", "/v1/leases", quotaAlloc(7, 4), 200)
		})
	}
}

// --key-max-nodes-default sets the default quota (IDKEEPER_KEY_MAX_NODES_DEFAULT
// too); 0 sets none, which the server warns about at start.
func TestKeyMaxNodesDefaultFlag(t *testing.T) {
	store := quotaStores(t)["bolt"](t)
	s := startQuotaServer(t, store, "--key-max-nodes-default", "0")
	if !strings.Contains(s.logs.String(), "no default API key quota") {
		t.Fatalf("no warning for --key-max-nodes-default 0:\n%s", s.logs)
	}
	s.client(bootstrapKey).do("POST", "/v1/leases", quotaAlloc(1, 16), 200)
	if code := s.stop(); code != exitOK {
		t.Fatalf("exit %d", code)
	}

	store = quotaStores(t)["bolt"](t)
	sv, code := startInProcess(t, []string{"--store", store, "--state-file", filepath.Join(t.TempDir(), "state")},
		map[string]string{BootstrapKeyEnv: bootstrapKey, "IDKEEPER_KEY_MAX_NODES_DEFAULT": "2"})
	if sv.base == "" {
		t.Fatalf("exit %d:\n%s", code, sv.logs)
	}
	wantQuotaProblem(t, sv.client(bootstrapKey).do("POST", "/v1/leases", quotaAlloc(1, 3), 409), 2, 0, 0)
	if strings.Contains(sv.logs.String(), "no default API key quota") {
		t.Fatalf("a warning with a default quota:\n%s", sv.logs)
	}
	sv.stop()

	for _, v := range []string{"-1", "x", "5000"} {
		code, _, stderr := runInProcess(context.Background(), []string{"server", "--listen", "127.0.0.1:0", "--store", "bolt:" +
			filepath.Join(t.TempDir(), "x.db"), "--key-max-nodes-default", v}, nil)
		if code != exitUsage || !strings.Contains(stderr, "key-max-nodes-default") {
			t.Errorf("--key-max-nodes-default %s: exit %d, %s", v, code, stderr)
		}
	}
}
