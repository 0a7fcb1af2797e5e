package idkeeper_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/password"
	"github.com/idkeeper/idkeeper/protocol"
)

// auditStore opens a bolt file for the audit log and Accounts over it.
func auditStore(t *testing.T, clk *fakeclock.Clock) (*bolt.Store, *account.Service) {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "admin.db"), bolt.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	acc, err := account.New(st, password.Hasher{Params: password.Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}}, account.Config{Clock: clk.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return st, acc
}

// waitAudit waits until the log holds n entries (the appender is asynchronous)
// and returns them after checking the chain.
func waitAudit(t *testing.T, st account.Store, n int) []audit.Entry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		es, err := st.AuditEntries(context.Background(), 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) >= n || time.Now().After(deadline) {
			if len(es) != n {
				t.Fatalf("audit log holds %d entries, want %d: %+v", len(es), n, es)
			}
			seq, hash, err := st.AuditHead(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := audit.Verify(es, seq, hash); err != nil {
				t.Fatalf("the chain does not verify: %v", err)
			}
			return es
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantEntry(t *testing.T, e audit.Entry, action, actor, target, remoteIP string, detail ...string) {
	t.Helper()
	if e.Action != action || e.Actor != actor || e.Target != target || e.RemoteIP != remoteIP {
		t.Fatalf("entry %d = %s by %s on %s from %q; want %s by %s on %s from %q (%+v)", e.Seq, e.Action, e.Actor,
			e.Target, e.RemoteIP, action, actor, target, remoteIP, e)
	}
	for _, d := range detail {
		if !strings.Contains(e.Detail, d) {
			t.Fatalf("entry %d (%s) detail %q lacks %q", e.Seq, action, e.Detail, d)
		}
	}
}

// Issue #10: every lease grant, removal, reclaim, revocation and skew rejection is
// audited, with its actor (the API key, an operator, the system), its target and
// its source address, in the order they happened, in a chain that verifies.
func TestRegistryAuditsLeaseEvents(t *testing.T) {
	clk := fakeclock.New(t0)
	admin, acc := auditStore(t, clk)
	lease, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Close() })
	e := openEnv(t, lease, clk, idkeeper.Config{Nodes: 8, Audit: acc})
	ctx := context.Background()
	key := idkeeper.APIKey{ID: "k1"}

	g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 3, Key: key, RemoteIP: "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	// The same Alloc again returns the leases held: no grant.
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 3, Key: key, RemoteIP: "10.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	es := waitAudit(t, admin, 1)
	tok := g.Leases[0].FencingToken
	wantEntry(t, es[0], audit.LeaseGrant, "key:k1", "nodes:0-2", "10.0.0.1",
		"count 3", fmt.Sprintf("tokens %d-%d", tok, tok+2), "requester "+who(1).Key())
	if !es[0].At.Equal(t0) {
		t.Fatalf("grant at %s, want %s", es[0].At, t0)
	}

	// A skew rejection, once a minute per requester.
	behind := clk.Now().Add(-time.Hour)
	for range 3 {
		_, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1, Key: key, RemoteIP: "10.0.0.2", ClientNow: &behind})
		wantCode(t, err, protocol.CodeClockSkewTooLarge)
	}
	es = waitAudit(t, admin, 2)
	wantEntry(t, es[1], audit.SkewReject, "key:k1", "requester:"+who(2).Key(), "10.0.0.2", "behind by 1h0m0s", "more than 10m0s")

	// Remove.
	mint := clk.Now()
	if n, err := e.reg.Remove(ctx, idkeeper.RemoveRequest{Requester: who(1), KeyID: "k1", MintedUpTo: mint, RemoteIP: "10.0.0.1"}); err != nil || n != 3 {
		t.Fatalf("remove: %d %v", n, err)
	}
	es = waitAudit(t, admin, 3)
	wantEntry(t, es[2], audit.LeaseRemove, "key:k1", "requester:"+who(1).Key(), "10.0.0.1", "count 3", "mintedUpTo "+mint.Format(time.RFC3339Nano))

	// Revoke, by the operator in the context.
	g, err = e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(3), Count: 1, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	l := g.Leases[0]
	octx := audit.WithActor(audit.WithRemoteIP(ctx, "192.0.2.7"), "user:bob")
	if _, err := e.reg.RevokeLease(octx, l.NodeID, l.FencingToken); err != nil {
		t.Fatal(err)
	}
	es = waitAudit(t, admin, 5)
	wantEntry(t, es[3], audit.LeaseGrant, "key:k1", fmt.Sprintf("node:%d", l.NodeID), "", "count 1")
	wantEntry(t, es[4], audit.LeaseRevoke, "user:bob", fmt.Sprintf("node:%d", l.NodeID), "192.0.2.7",
		fmt.Sprintf("token %d", l.FencingToken), "key k1")

	// Reclaim: two leases left to expire, by the system.
	g, err = e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(4), Count: 2, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(e.reg.Config().FirstLease + e.reg.Config().Grace + time.Second)
	if n, ran, err := e.reg.Cleanup(ctx); err != nil || !ran || n != 2 {
		t.Fatalf("cleanup: %d %v %v", n, ran, err)
	}
	es = waitAudit(t, admin, 7)
	wantEntry(t, es[6], audit.LeaseReclaim, "system", "nodes:"+nodeList(g), "", "count 2")
	for i := 1; i < len(es); i++ {
		if es[i].At.Before(es[i-1].At) {
			t.Fatalf("entries out of order: %+v", es)
		}
	}
}

// Issue #10: a Renew that restores leases from receipts after a store reset, or
// finds a node ID claimed twice, is audited as the renewing key's.
func TestRegistryAuditsRestores(t *testing.T) {
	clk := fakeclock.New(t0)
	admin, acc := auditStore(t, clk)
	files := newBoltFiles(t, clk)
	st, _ := files.open(nil)
	sw := storetest.NewSwap(st)
	e := openEnv(t, sw, clk, idkeeper.Config{Nodes: 4, Audit: acc})
	ctx := context.Background()
	alloc := func(r idkeeper.Requester, n int) idkeeper.Grant {
		t.Helper()
		g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: r, Count: n, Key: idkeeper.APIKey{ID: "key-a"}})
		if err != nil {
			t.Fatal(err)
		}
		g, err = e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: r, Receipts: receipts(g), KeyID: "key-a"})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g1 := alloc(who(1), 2)
	g2 := alloc(who(2), 1)
	waitAudit(t, admin, 2)
	clk.Advance(time.Hour)
	empty, _ := files.open(nil)
	sw.Put(empty)
	// Each holder restores its leases with its receipts.
	g, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1), Receipts: receipts(g1), KeyID: "key-a", RemoteIP: "10.1.1.1"})
	if err != nil || len(g.Restored) != 2 {
		t.Fatalf("renew after the reset: %+v %v", g, err)
	}
	if _, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(2), Receipts: receipts(g2), KeyID: "key-a"}); err != nil {
		t.Fatal(err)
	}
	es := waitAudit(t, admin, 4)
	wantEntry(t, es[2], audit.LeaseRestore, "key:key-a", "nodes:"+nodeList(g1), "10.1.1.1", "restored 2", who(1).Key())
	wantEntry(t, es[3], audit.LeaseRestore, "key:key-a", "node:"+nodeList(g2), "", "restored 1")
}

// nodeList is the node IDs of g's leases as an audit target lists them, after
// "node:" or "nodes:".
func nodeList(g idkeeper.Grant) string {
	var s []string
	for i := 0; i < len(g.Leases); {
		j := i
		for j+1 < len(g.Leases) && g.Leases[j+1].NodeID == g.Leases[j].NodeID+1 {
			j++
		}
		r := fmt.Sprint(g.Leases[i].NodeID)
		if j > i {
			r += fmt.Sprintf("-%d", g.Leases[j].NodeID)
		}
		s = append(s, r)
		i = j + 1
	}
	return strings.Join(s, ",")
}

// blockingAuditor blocks every append until released, telling when the first one
// arrived.
type blockingAuditor struct {
	to      idkeeper.Auditor
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingAuditor) Audit(ctx context.Context, e audit.Entry) error {
	b.once.Do(func() { close(b.arrived) })
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.to.Audit(ctx, e)
}

// Issue #10: the audit log never holds up a grant. With the appender stuck and its
// queue full, Allocs answer at once; the entries they could not queue are dropped,
// counted and logged; what was queued is written, in order, once the store
// answers again, by Close at the latest.
func TestAuditQueueFullDropsWithoutBlocking(t *testing.T) {
	clk := fakeclock.New(t0)
	admin, acc := auditStore(t, clk)
	lease, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close()
	if _, err := lease.Init(context.Background(), idkeeper.PoolSpec{Nodes: 16}); err != nil {
		t.Fatal(err)
	}
	b := &blockingAuditor{to: acc, arrived: make(chan struct{}), release: make(chan struct{})}
	logs, obs := &syncWriter{}, &recorder{}
	reg, err := idkeeper.NewRegistry(lease, idkeeper.Config{Nodes: 16, Clock: clk.Now, Audit: b, Observer: obs,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), CleanupInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	idkeeper.SetAuditQueue(reg, 2)
	if err := reg.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	alloc := func(pid int) {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			_, err := reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(pid), Count: 1, Key: idkeeper.APIKey{ID: "k"}})
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Alloc %d waited for the audit log", pid)
		}
	}
	alloc(1)
	<-b.arrived // the appender holds entry 1
	for pid := 2; pid <= 6; pid++ {
		alloc(pid) // 2 and 3 queue; 4, 5 and 6 are dropped
	}
	obs.mu.Lock()
	dropped := obs.auditDropped
	obs.mu.Unlock()
	if dropped != 3 {
		t.Fatalf("AuditDropped counted %d, want 3", dropped)
	}
	if n := strings.Count(logs.String(), "audit entries dropped"); n != 1 {
		t.Fatalf("%d log lines about dropped entries, want 1 (once a minute):\n%s", n, logs)
	}
	close(b.release)
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "dropped=2") {
		t.Fatalf("Close does not report the drops held back:\n%s", logs)
	}
	es := waitAudit(t, admin, 3)
	for i, e := range es {
		if e.Action != audit.LeaseGrant || !strings.Contains(e.Detail, who(i+1).Key()) {
			t.Fatalf("entry %d = %+v, want the grant of %s", i+1, e, who(i+1).Key())
		}
	}
}

// Issue #10: the retention job prunes audit entries older than the retention and
// the ended admin sessions, under its job lock.
func TestRetentionJob(t *testing.T) {
	clk := fakeclock.New(t0)
	admin, acc := auditStore(t, clk)
	ctx := context.Background()
	if _, err := idkeeper.NewRegistry(nil, idkeeper.Config{AuditRetention: -time.Hour}); err == nil ||
		!strings.Contains(err.Error(), "audit-retention") {
		t.Fatalf("a negative retention: %v", err)
	}
	if ok, err := acc.EnsureFirstAdmin(ctx, "root", "root password 123"); !ok || err != nil { // entry 1
		t.Fatal(ok, err)
	}
	if _, _, err := acc.Login(ctx, "root", "root password 123", "10.0.0.1", "test"); err != nil { // entry 2, a session
		t.Fatal(err)
	}
	clk.Advance(48 * time.Hour)
	if err := acc.Audit(ctx, audit.Entry{Actor: "system", Action: "test.later"}); err != nil { // entry 3
		t.Fatal(err)
	}
	lease, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Close() })
	e := openEnv(t, lease, clk, idkeeper.Config{Audit: acc, AdminStore: admin, Sessions: acc, AuditRetention: 24 * time.Hour})
	entries, sessions, ran, err := e.reg.PruneAdminRecords(ctx)
	if err != nil || !ran || entries != 2 || sessions != 1 {
		t.Fatalf("PruneAdminRecords = %d entries, %d sessions, ran %v, %v; want 2, 1, true", entries, sessions, ran, err)
	}
	es := waitAudit(t, admin, 1)
	if es[0].Seq != 3 {
		t.Fatalf("kept %+v, want entry 3", es)
	}
	// The lock holds for most of the interval: a second run at once does not run.
	if _, _, ran, err := e.reg.PruneAdminRecords(ctx); ran || err != nil {
		t.Fatalf("a second run at once: ran %v, %v", ran, err)
	}
	if e.reg.Config().AuditRetention != 24*time.Hour {
		t.Fatal(e.reg.Config().AuditRetention)
	}
	if c, _ := idkeeper.NewRegistry(nil, idkeeper.Config{}); c.Config().AuditRetention != idkeeper.DefaultAuditRetention {
		t.Fatalf("default retention %s", c.Config().AuditRetention)
	}
}
