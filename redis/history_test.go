package redis_test

import (
	"maps"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/redis"
	"github.com/idkeeper/idkeeper/snapshot"
)

// Leases written before the history existed have no record, and the lease
// scripts write none for them: Renew, Remove, RevokeLease and Reclaim go through
// and the history stays empty.
func TestHistoryLeasesWithoutRecords(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	clk := fakeclock.New(t0)
	s := open(t, srv, redis.Options{Clock: clk.Now, Prefix: "nohist"})
	g := initGuard(t, s, 4)
	for i := 1; i <= 3; i++ {
		if _, err := s.Alloc(ctx, g, allocP(who(i), 1, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	raw := rawClient(t, srv)
	if err := raw.Del(ctx, "{nohist}:history", "{nohist}:history:index", "{nohist}:history:ended").Err(); err != nil {
		t.Fatal(err)
	}
	wantNone := func(what string) {
		t.Helper()
		if n, err := s.HistoryCount(ctx); err != nil || n != 0 {
			t.Fatalf("after %s: HistoryCount = %d, %v; want 0", what, n, err)
		}
		if n, err := raw.Exists(ctx, "{nohist}:history", "{nohist}:history:index", "{nohist}:history:ended").Result(); err != nil || n != 0 {
			t.Fatalf("after %s: %d history keys, %v", what, n, err)
		}
	}
	clk.Advance(10 * time.Second)
	if _, err := s.Renew(ctx, g, renewP(who(1), time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantNone("Renew")
	if _, err := s.Alloc(ctx, g, allocP(who(2), 1, time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantNone("an idempotent Alloc")
	if _, err := s.Remove(ctx, g, removeP(who(1), clk.Now())); err != nil {
		t.Fatal(err)
	}
	wantNone("Remove")
	ls, err := s.Leases(ctx)
	if err != nil || len(ls) != 2 {
		t.Fatalf("Leases = %v, %v", ls, err)
	}
	if _, err := s.RevokeLease(ctx, g, ls[0].NodeID, ls[0].FencingToken, time.Minute); err != nil {
		t.Fatal(err)
	}
	wantNone("RevokeLease")
	clk.Advance(time.Hour)
	if n, err := s.Reclaim(ctx, g, time.Minute); err != nil || n != 1 {
		t.Fatalf("Reclaim = %d, %v", n, err)
	}
	wantNone("Reclaim")
}

// A record keeps requester keys and key IDs with commas, and every client the
// limits allow, through the store and through a snapshot; so does a record
// learned from a receipt, which LeaseAt finds in the loaded store.
func TestHistoryRecordsRoundTrip(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	clk := fakeclock.New(t0)
	s := open(t, srv, redis.Options{Clock: clk.Now})
	g := initGuard(t, s, 3)
	r := idkeeper.Requester{MachineID: "m,1:x/é", PID: 7, StartedAt: t0.Add(1500 * time.Microsecond), Instance: "i-_9"}
	labels := map[string]string{"a/b.c-d_e": `x,y:z"é\n`, "empty": "", "html": "<&>"}
	for i := range protocol.MaxLabels - 3 {
		labels[string(rune('k'+i))] = "v" + string(rune('0'+i))
	}
	host := ""
	for len(host) < protocol.MaxHostLen {
		host += "h"
	}
	client := idkeeper.ClientInfo{Host: host, Labels: labels}
	p := idkeeper.AllocParams{Requester: r, KeyID: "key,with:commas", Count: 2, First: time.Minute, Client: client}
	gr, err := s.Alloc(ctx, g, p)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, st *redis.Store) {
		t.Helper()
		for _, l := range gr.Leases {
			hs, err := st.NodeHistory(ctx, l.NodeID, 0, 10)
			if err != nil || len(hs) != 1 {
				t.Fatalf("%s: NodeHistory(%d) = %v, %v", what, l.NodeID, hs, err)
			}
			h := hs[0]
			if h.Requester.Key() != r.Key() || h.KeyID != p.KeyID || h.Client.Host != host || !maps.Equal(h.Client.Labels, labels) ||
				h.Token != l.FencingToken || !h.NotBefore.Equal(l.NotBefore) || !h.WindowEnd.Equal(l.ExpiresAt) {
				t.Fatalf("%s: record %+v of lease %+v", what, h, l)
			}
		}
	}
	check("in the store", s)
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := s.Reset(ctx, idkeeper.ResetParams{Seen: st.Generation, Pool: idkeeper.PoolSpec{Nodes: 3}, Until: t0.Add(time.Hour), MinFence: 10})
	if err != nil {
		t.Fatal(err)
	}
	g.Generation = rr.Generation.ID
	clk.Advance(time.Second)
	c := idkeeper.Claim{NodeID: 2, Token: 9, NotBefore: t0.Add(-time.Hour), ExpiresAt: t0.Add(time.Minute)}
	if gr, err := s.Renew(ctx, g, idkeeper.RenewParams{Requester: who(5), KeyID: testKey, Duration: time.Minute,
		Claims: []idkeeper.Claim{c}}); err != nil || len(gr.Restored) != 1 {
		t.Fatalf("Renew with a claim = %+v, %v; want it restored", gr, err)
	}
	var meta snapshot.Meta
	var recs sliceSource
	if err := s.ReadSnapshot(ctx, func(m snapshot.Meta) error { meta = m; return nil },
		func(r snapshot.Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, srv, redis.Options{Clock: clk.Now})
	if err := s2.LoadSnapshot(ctx, meta, &recs); err != nil {
		t.Fatal(err)
	}
	check("loaded from a snapshot", s2)
	if hs, err := s2.LeaseAt(ctx, gr.Leases[1].NodeID, gr.Leases[1].ExpiresAt); err != nil || len(hs) != 1 {
		t.Fatalf("LeaseAt after the load = %v, %v", hs, err)
	}
	if hs, err := s2.LeaseAt(ctx, 2, c.NotBefore); err != nil || len(hs) != 1 || hs[0].Token != 9 || !hs[0].FromReceipt {
		t.Fatalf("LeaseAt of the restored grant after the load = %v, %v", hs, err)
	}
}
