package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The store's health shows the job locks (every replica's) and this replica's
// last job runs, on the API and on the store page, with their empty states.
func TestStoreJobs(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		tok := e.login("root", rootPW)
		var s wire.StoreHealth
		e.do("GET", "/admin/api/store", "", "X-API-Key", adminKey).ok(t).decode(t, &s)
		if s.JobLocks == nil || len(s.JobLocks) != 0 || s.JobRuns == nil || len(s.JobRuns) != 0 || s.Reset != nil {
			t.Fatalf("a new server: locks %v, runs %v, reset %v", s.JobLocks, s.JobRuns, s.Reset)
		}
		page := string(e.do("GET", "/admin/store", "", "Cookie", tok).status1(t, 200).raw)
		for _, want := range []string{"No job lock is held now", "No job has run on this replica since it started"} {
			if !strings.Contains(page, want) {
				t.Errorf("the store page lacks %q", want)
			}
		}
		if strings.Contains(page, "offers no read") {
			t.Error("the store page still says the job locks cannot be shown")
		}

		// Another replica holds the cleanup lock: this one's run is skipped.
		other, ok, err := e.store.TryLock(ctx, idkeeper.CleanupJob, "replica-b:7:beef", 10*time.Minute)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		if _, ran, err := e.reg.Cleanup(ctx); ran || err != nil {
			t.Fatalf("cleanup under another's lock: ran %v, %v", ran, err)
		}
		e.do("GET", "/admin/api/store", "", "X-API-Key", adminKey).ok(t).decode(t, &s)
		wantLock := wire.JobLock{Name: idkeeper.CleanupJob, Owner: "replica-b:7:beef", LockedAt: ts(other.LockedAt), Until: ts(other.Until)}
		if len(s.JobLocks) != 1 || s.JobLocks[0] != wantLock {
			t.Fatalf("jobLocks %+v, want %+v", s.JobLocks, wantLock)
		}
		if len(s.JobRuns) != 1 || s.JobRuns[0].Job != idkeeper.CleanupJob || s.JobRuns[0].Outcome != "skipped" ||
			!strings.Contains(s.JobRuns[0].Detail, "replica-b:7:beef") || s.JobRuns[0].Started != ts(start) {
			t.Fatalf("jobRuns %+v", s.JobRuns)
		}
		page = string(e.do("GET", "/admin/store", "", "Cookie", tok).status1(t, 200).raw)
		for _, want := range []string{`<span class="mono">replica-b:7:beef</span>`, "reclaims the leases past their expiry",
			`<span class="badge none">skipped</span>`, "its job lock is held by replica-b:7:beef"} {
			if !strings.Contains(page, want) {
				t.Errorf("the store page lacks %q", want)
			}
		}

		// Once it lapses, this replica runs the job; its lock stays for the
		// lock-at-least-for, marked as this replica's.
		e.clk.Set(other.Until)
		if _, ran, err := e.reg.Cleanup(ctx); !ran || err != nil {
			t.Fatalf("cleanup: ran %v, %v", ran, err)
		}
		e.do("GET", "/admin/api/store", "", "X-API-Key", adminKey).ok(t).decode(t, &s)
		if len(s.JobLocks) != 1 || s.JobLocks[0].Owner != e.reg.Config().Owner || len(s.JobRuns) != 1 ||
			s.JobRuns[0].Outcome != "ran" || s.JobRuns[0].Detail != "reclaimed 0 leases" {
			t.Fatalf("after a run: locks %+v, runs %+v", s.JobLocks, s.JobRuns)
		}
		page = string(e.do("GET", "/admin/store", "", "Cookie", tok).status1(t, 200).raw)
		if !strings.Contains(page, "this replica") || !strings.Contains(page, `<span class="badge ok">ran</span>`) {
			t.Errorf("the store page after a run: %s", page)
		}
	})
}

// The store's health shows the store's pool (issue #22): its node range, its
// size and its layout with the ceiling per node ID and the end of its range, on
// the API and on the store page; a store on the default layout shows that one.
func TestStorePool(t *testing.T) {
	layout, err := idkeeper.ParseLayout("41/10/12@2025-01-01T00:00:00.000Z")
	if err != nil {
		t.Fatal(err)
	}
	stores(t, func(t *testing.T, e *env) {
		var s wire.StoreHealth
		raw := e.do("GET", "/admin/api/store", "", "X-API-Key", adminKey).ok(t)
		raw.decode(t, &s)
		want := wire.StorePool{First: 100, Last: 163, Nodes: 64, Layout: wire.LayoutLimits{Layout: wire.Layout{
			Epoch: "2025-01-01T00:00:00.000Z", TimestampBits: 41, NodeBits: 10, SequenceBits: 12},
			IDsPerSecond: 4_096_000, End: "2094-09-07T15:47:35.552Z"}}
		if s.Pool == nil || *s.Pool != want || s.Nodes != 64 {
			t.Fatalf("pool %+v (nodes %d), want %+v", s.Pool, s.Nodes, want)
		}
		for _, member := range []string{`"pool":{"first":100,"last":163,"nodes":64,"layout":{"epoch":"2025-01-01T00:00:00.000Z",` +
			`"timestampBits":41,"nodeBits":10,"sequenceBits":12,"idsPerSecond":4096000,"end":"2094-09-07T15:47:35.552Z"}}`} {
			if !strings.Contains(string(raw.raw), member) {
				t.Errorf("GET /admin/api/store lacks %s:\n%s", member, raw.raw)
			}
		}
		page := string(e.do("GET", "/admin/store", "", "Cookie", e.login("root", rootPW)).status1(t, 200).raw)
		for _, want := range []string{"<dd>100–163 (64 node IDs)</dd>", `<span class="mono">41/10/12</span>`,
			`<time datetime="2025-01-01T00:00:00.000Z">2025-01-01T00:00:00.000Z</time>`, "4,096,000 IDs/s", "(4,096 a millisecond)",
			"<dd>0–1023</dd>", `<time datetime="2094-09-07T15:47:35.552Z">2094-09-07</time>`} {
			if !strings.Contains(page, want) {
				t.Errorf("the store page lacks %q", want)
			}
		}
		if strings.Contains(page, "This server does not serve the store") {
			t.Error("the store page reports a pool mismatch")
		}
	}, func(s *setup) { s.first, s.nodes, s.layout = 100, 64, layout })

	// The default pool: node IDs 0..nodes−1 on DefaultLayout.
	e := newEnv(t)
	var s wire.StoreHealth
	e.do("GET", "/admin/api/store", "", "X-API-Key", adminKey).ok(t).decode(t, &s)
	want := wire.StorePool{First: 0, Last: 127, Nodes: 128, Layout: wire.LayoutLimits{Layout: wire.Layout{
		Epoch: "2026-01-01T00:00:00.000Z", TimestampBits: 41, NodeBits: 12, SequenceBits: 10},
		IDsPerSecond: 1_024_000, End: "2095-09-07T15:47:35.552Z"}}
	if s.Pool == nil || *s.Pool != want {
		t.Fatalf("the default pool %+v, want %+v", s.Pool, want)
	}
	page := string(e.do("GET", "/admin/store", "", "Cookie", e.login("root", rootPW)).status1(t, 200).raw)
	for _, want := range []string{"<dd>0–127 (128 node IDs)</dd>", `<span class="mono">41/12/10</span>`, "1,024,000 IDs/s",
		`>2095-09-07</time>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the store page of the default pool lacks %q", want)
		}
	}
}

// After a store reset, the store's health says when and why, which node IDs are
// quarantined until when (as ranges), and which holders restored their leases
// from the audit log: at most 50, then "and N more".
func TestStoreResetReport(t *testing.T) {
	e := newEnv(t, func(s *setup) { s.redis, s.receipt = true, true })
	ctx := context.Background()
	plainID, _ := idkeeper.HashAPIKey(plainKey)
	who := idkeeper.Requester{MachineID: "billing-7f9c", PID: 4242, StartedAt: start.Add(-time.Hour), Instance: "i1"}
	g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who, Count: 2, Key: idkeeper.APIKey{ID: plainID}})
	if err != nil {
		t.Fatal(err)
	}
	rcpts := []string{g.Leases[0].Receipt, g.Leases[1].Receipt}

	// The store loses everything: the registry recovers it at its next check.
	c, err := goredis.ParseURL(e.redis)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(c)
	defer rdb.Close()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Second)
	if err := e.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.reg.EnsureAdminKey(ctx, adminKey); err != nil {
		t.Fatal(err)
	}
	if _, err := e.acct.EnsureFirstAdmin(ctx, "root", rootPW); err != nil {
		t.Fatal(err)
	}
	// The holder shows its receipts a minute later and keeps its leases.
	e.clk.Advance(time.Minute)
	rg, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who, Receipts: rcpts, KeyID: plainID})
	if err != nil || len(rg.Restored) != 2 {
		t.Fatalf("renew with receipts: %+v, %v", rg, err)
	}
	restored := e.waitAudit(audit.LeaseRestore, fmt.Sprintf("nodes:%d-%d", g.Leases[0].NodeID, g.Leases[1].NodeID))

	resetAt := start.Add(time.Second)
	cfg := e.reg.Config()
	end := resetAt.Add(cfg.LeaseDuration + cfg.Grace)
	var s wire.StoreHealth
	e.do("GET", "/admin/api/store", "", "X-API-Key", adminKey).ok(t).decode(t, &s)
	r := s.Reset
	switch {
	case r == nil:
		t.Fatalf("no reset in %s", e.do("GET", "/admin/api/store", "", "X-API-Key", adminKey).raw)
	case s.LastReset == nil || *s.LastReset != ts(resetAt) || r.At != ts(resetAt) || r.Generation != 2 || r.QuarantineEnd != ts(end):
		t.Fatalf("reset %+v (lastReset %v), want at %s, generation 2, quarantine to %s", r, s.LastReset, ts(resetAt), ts(end))
	case r.Why == nil || !strings.Contains(*r.Why, "empty"):
		t.Fatalf("reset why %v", r.Why)
	case len(r.Quarantined) != 1 || r.Quarantined[0].Count != 126 || r.Quarantined[0].Until != ts(end) ||
		r.Quarantined[0].Nodes != quarantinedRanges(g.Leases[0].NodeID, g.Leases[1].NodeID, 128):
		t.Fatalf("quarantined %+v", r.Quarantined)
	case len(r.Restored) != 1 || r.Restored[0].Seq != restored.Seq || r.RestoredMore != 0 || !r.RestoredComplete:
		t.Fatalf("restored %+v, more %d, complete %v", r.Restored, r.RestoredMore, r.RestoredComplete)
	}
	tok := e.login("root", rootPW)
	page := string(e.do("GET", "/admin/store", "", "Cookie", tok).status1(t, 200).raw)
	for _, want := range []string{"This server recovered it", r.Quarantined[0].Nodes, "restored 2 from receipts after a store reset",
		"billing-7f9c", "key:" + plainID} {
		if !strings.Contains(page, want) {
			t.Errorf("the store page lacks %q", want)
		}
	}
	if strings.Contains(page, "more: the audit log") {
		t.Error("the store page counts more restorations than there are")
	}

	// Many restorations: the first 50 are listed, the rest counted.
	for i := range admin.MaxRestoredShown + 4 {
		if err := e.acct.Audit(ctx, audit.Entry{Actor: "key:" + plainID, Action: audit.LeaseRestore,
			Target: fmt.Sprintf("node:%d", 10+i), Detail: "restored 1 from receipts after a store reset"}); err != nil {
			t.Fatal(err)
		}
	}
	e.do("GET", "/admin/api/store", "", "X-API-Key", adminKey).ok(t).decode(t, &s)
	if r := s.Reset; len(r.Restored) != admin.MaxRestoredShown || r.RestoredMore != 5 || !r.RestoredComplete ||
		r.Restored[0].Target != fmt.Sprintf("node:%d", 10+admin.MaxRestoredShown+3) {
		t.Fatalf("restored %d, more %d, complete %v, newest %+v", len(r.Restored), r.RestoredMore, r.RestoredComplete, r.Restored[0])
	}
	page = string(e.do("GET", "/admin/store", "", "Cookie", tok).status1(t, 200).raw)
	if !strings.Contains(page, "And 5 more") {
		t.Error("the store page does not say how many more restorations there are")
	}
}

// quarantinedRanges is 0..n-1 without a and b (a < b), as ranges.
func quarantinedRanges(a, b idkeeper.NodeID, n int) string {
	var parts []string
	from := 0
	for _, skip := range []int{int(a), int(b), n} {
		switch {
		case skip-1 > from:
			parts = append(parts, fmt.Sprintf("%d-%d", from, skip-1))
		case skip-1 == from:
			parts = append(parts, fmt.Sprint(from))
		}
		from = skip + 1
	}
	return strings.Join(parts, ",")
}

// GET /admin/api/nodes/{node}: a node ID's state in the store, with its lease;
// 404 outside the pool, 400 for a path that is no node ID or a query.
func TestNodeAPI(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var n wire.AdminNode
		e.do("GET", "/admin/api/nodes/3", "", "X-API-Key", adminKey).ok(t).decode(t, &n)
		if n != (wire.AdminNode{NodeID: 3, Status: "free", At: ts(start)}) {
			t.Fatalf("a new node ID: %+v", n)
		}
		plainID, _ := idkeeper.HashAPIKey(plainKey)
		who := idkeeper.Requester{MachineID: "m", PID: 1, StartedAt: start}
		g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who, Count: 1, Key: idkeeper.APIKey{ID: plainID}})
		if err != nil {
			t.Fatal(err)
		}
		l := g.Leases[0]
		e.do("GET", fmt.Sprintf("/admin/api/nodes/%d", l.NodeID), "", "X-API-Key", adminKey).ok(t).decode(t, &n)
		if n.Status != "leased" || n.Lease == nil || n.Lease.FencingToken != l.FencingToken || n.Lease.KeyID != plainID ||
			n.LastToken != l.FencingToken || n.Watermark == nil || *n.Watermark != ts(l.ExpiresAt) || n.Fenced == nil ||
			*n.Fenced != ts(l.ExpiresAt) || n.Floor != nil || n.QuarantinedUntil != nil || n.Restorable {
			t.Fatalf("a leased node ID: %+v", n)
		}
		if _, err := e.reg.RevokeLease(ctx, l.NodeID, l.FencingToken); err != nil {
			t.Fatal(err)
		}
		e.do("GET", fmt.Sprintf("/admin/api/nodes/%d", l.NodeID), "", "X-API-Key", adminKey).ok(t).decode(t, &n)
		if n.Status != "quarantined" || n.Lease != nil || n.QuarantinedUntil == nil ||
			*n.QuarantinedUntil != ts(l.ExpiresAt.Add(e.reg.Config().Grace)) {
			t.Fatalf("a revoked node ID: %+v", n)
		}
		r := e.do("GET", "/admin/api/nodes/128", "", "X-API-Key", adminKey).problem(t, protocol.CodeNotFound)
		if !strings.Contains(r.str("detail"), "pool of 128") {
			t.Errorf("404: %s", r.raw)
		}
		for _, bad := range []string{"/admin/api/nodes/x", "/admin/api/nodes/-1", "/admin/api/nodes/99999999999", "/admin/api/nodes/3?x=1"} {
			e.do("GET", bad, "", "X-API-Key", adminKey).problem(t, protocol.CodeInvalidRequest)
		}
	})
}
