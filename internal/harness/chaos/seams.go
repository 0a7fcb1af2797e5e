package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/chaos/history"
	"github.com/idkeeper/idkeeper/protocol"
)

// This file holds what the scenarios of issue #8 need of a cluster: restarting
// every replica across a Redis wipe, forging calls with another API key, and
// reading what the servers logged.

// Messages the servers log, counted by serverLogCounts.
const (
	logReset     = "store reset detected and recovered"
	logRestored  = "leases restored from their receipts after a store reset"
	logContested = "node IDs claimed twice after a store reset"
)

// serverLogCounts counts, in every server log of the run, the recoveries from a
// store reset, the restores from receipts and the contests.
func (c *Cluster) serverLogCounts() (resets, restored, contested int) {
	files, _ := filepath.Glob(filepath.Join(c.dir, "server*.log"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		resets += bytes.Count(b, []byte(logReset))
		restored += bytes.Count(b, []byte(logRestored))
		contested += bytes.Count(b, []byte(logContested))
	}
	return resets, restored, contested
}

// RestartServersDuringWipe kills every replica (SIGKILL, as a host reboot would),
// restarts Redis empty meanwhile, and starts the replicas again on their state
// files: each must find the store lost what it saw and recover it before serving.
func (c *Cluster) RestartServersDuringWipe(ctx context.Context) error {
	at := time.Now()
	c.mu.Lock()
	servers := append([]*serverProc(nil), c.servers...)
	c.mu.Unlock()
	if c.opts.AOF || c.Redis == nil {
		return fmt.Errorf("RestartServersDuringWipe needs a single Redis without persistence")
	}
	for _, s := range servers {
		s.p.kill()
	}
	c.Redis.Restart(c.t)
	for _, s := range servers {
		if err := c.startServer(s); err != nil {
			return err
		}
	}
	c.record(Fault{Kind: "restart-servers-during-redis-wipe", Global: true, At: at, Heal: time.Now()})
	return nil
}

// forger sends Renew and Remove calls for the clients' requesters with an API key
// of its own, and counts how the registry answered.
type forger struct {
	mu                      sync.Mutex
	sent, refused, accepted int
	examples                []string
}

func (c *Cluster) forgeries() (sent, refused, accepted int) {
	c.mu.Lock()
	f := c.forger
	c.mu.Unlock()
	if f == nil {
		return 0, 0, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent, f.refused, f.accepted
}

// Forge creates another API key and, every period until ctx ends or d passes,
// sends for a requester the clients hold leases with (read from their histories):
// a Remove with mintedUpTo at the epoch, and a Renew with the highest fencing
// token and a receipt that does not verify. Every call goes straight to a replica. The registry must refuse each with 403 LEASE_NOT_OWNED (or, for a
// requester that holds nothing any more, answer that it released or holds
// nothing); any call that removed or renewed a lease is counted as accepted.
func (c *Cluster) Forge(ctx context.Context, d, period time.Duration) error {
	out, err := exec.Command(c.bins.Server, "apikey", "create", "--store", c.store, "--description", "forger",
		"--expires", "0").Output()
	if err != nil {
		return fmt.Errorf("apikey create: %w", err)
	}
	key := strings.TrimSpace(string(out))
	f := &forger{}
	c.mu.Lock()
	c.forger = f
	c.mu.Unlock()
	at := time.Now()
	hc := &http.Client{Timeout: 2 * time.Second}
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		if !sleepCtx(ctx, period) {
			break
		}
		req, ok := c.someHeldRequester(i)
		if !ok {
			continue
		}
		bs := c.backends()
		base := "http://" + bs[i%len(bs)]
		r := map[string]any{"machineId": req.MachineID, "pid": req.PID,
			"startedAt": req.StartedAt.Format(time.RFC3339Nano), "instance": req.Instance}
		calls := []struct {
			path string
			body map[string]any
		}{
			{"/v1/leases/remove", map[string]any{"requester": r, "mintedUpTo": "2026-01-01T00:00:00Z"}},
			{"/v1/leases/renew", map[string]any{"requester": r, "fencingTokens": []uint64{idkeeper.MaxFencingToken},
				"receipts": []string{strings.Repeat("A", 60)}}},
		}
		for _, call := range calls {
			f.send(hc, base+call.path, key, call.body)
		}
	}
	c.record(Fault{Kind: "forged-calls", Global: true, At: at, Heal: time.Now()})
	return nil
}

func (f *forger) send(hc *http.Client, url, key string, body map[string]any) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	resp, err := hc.Do(req)
	if err != nil {
		return // a replica restarting: nothing happened
	}
	defer resp.Body.Close()
	var ans struct {
		Code    string `json:"code"`
		Removed int    `json:"removed"`
		Leases  []any  `json:"leases"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&ans)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent++
	switch {
	case resp.StatusCode == http.StatusForbidden && ans.Code == string(protocol.CodeLeaseNotOwned):
		f.refused++
	case resp.StatusCode == http.StatusOK && (ans.Removed > 0 || len(ans.Leases) > 0):
		f.accepted++
	}
}

// someHeldRequester returns the requester of a session that acquired a lease,
// the i-th found in the clients' histories (cycling), preferring recent ones.
func (c *Cluster) someHeldRequester(i int) (idkeeper.Requester, bool) {
	var reqs []string
	for _, cl := range c.Clients() {
		evs, err := history.ReadEvents(cl.Dir)
		if err != nil {
			continue
		}
		for j := len(evs) - 1; j >= 0 && len(reqs) < 64; j-- {
			if evs[j].Ev == history.EvAcquired && evs[j].Req != "" {
				reqs = append(reqs, evs[j].Req)
				break
			}
		}
	}
	if len(reqs) == 0 {
		return idkeeper.Requester{}, false
	}
	r, err := idkeeper.ParseRequesterKey(reqs[i%len(reqs)])
	return r, err == nil
}
