package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/etcd"
	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/protocol"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func who(i int) idkeeper.Requester {
	return idkeeper.Requester{MachineID: "host", PID: 1, StartedAt: t0, Instance: fmt.Sprintf("i%d", i)}
}

func allocP(r idkeeper.Requester, count int) idkeeper.AllocParams {
	return idkeeper.AllocParams{Requester: r, KeyID: "k", Count: count, First: 10 * time.Minute}
}

// Stores in different processes share a prefix and serialise through the meta
// key's revision only: four Stores (four clients, as four registry replicas) race
// 24 requesters for 4 node IDs each out of 64. Exactly 16 win, no node ID or
// token is granted twice, and the counters agree; then they churn.
func TestStoresRaceAcrossClients(t *testing.T) {
	srv := etcdtest.Start(t)
	clock := fakeclock.New(t0)
	prefix := fmt.Sprintf("race%d/", prefixSeq.Add(1))
	var stores []*etcd.Store
	for range 4 {
		c, err := srv.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		stores = append(stores, open(t, c, etcd.Options{Clock: clock.Now, Prefix: prefix}))
	}
	checked(t, stores[0])
	res, err := stores[0].Init(t.Context(), idkeeper.PoolSpec{Nodes: 64})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	var (
		mu        sync.Mutex
		nodes     = map[idkeeper.NodeID]int{}
		tokens    = map[uint64]bool{}
		exhausted int
		wg        sync.WaitGroup
	)
	for i := range 24 {
		wg.Go(func() {
			gr, err := stores[i%4].Alloc(t.Context(), g, allocP(who(i), 4))
			mu.Lock()
			defer mu.Unlock()
			if protocol.ErrorCode(err) == protocol.CodeNodeIDsExhausted {
				exhausted++
				return
			}
			if err != nil {
				t.Errorf("Alloc: %v", err)
				return
			}
			for _, l := range gr.Leases {
				if j, dup := nodes[l.NodeID]; dup {
					t.Errorf("node %d granted to %d and %d", l.NodeID, j, i)
				}
				if tokens[l.FencingToken] {
					t.Errorf("token %d granted twice", l.FencingToken)
				}
				nodes[l.NodeID], tokens[l.FencingToken] = i, true
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(nodes) != 64 || exhausted != 8 {
		t.Fatalf("%d node IDs granted, %d Allocs exhausted; want 64 and 8", len(nodes), exhausted)
	}
	if c, err := stores[1].Counts(t.Context()); err != nil || !c.Equal(idkeeper.Counts{Total: 64, Leased: 64}) {
		t.Fatalf("Counts = %+v, %v", c, err)
	}
	var conflicts int64
	for _, s := range stores {
		conflicts += s.ConflictsForTest()
	}
	t.Logf("%d attempts started over", conflicts)

	// Churn: each winner renews and removes, then allocates again, through
	// another Store each time, while a fifth goroutine reclaims and counts.
	g.MinFence = 64
	done := make(chan struct{})
	var side sync.WaitGroup
	side.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := stores[3].Reclaim(t.Context(), g, 0); err != nil {
				t.Errorf("Reclaim: %v", err)
				return
			}
		}
	})
	for i := range 24 {
		if _, held := holders(nodes)[i]; !held {
			continue
		}
		wg.Go(func() {
			for round := range 5 {
				s := stores[(i+round)%4]
				if gr, err := s.Renew(t.Context(), g, idkeeper.RenewParams{Requester: who(i), KeyID: "k", Duration: time.Hour}); err != nil || len(gr.Leases) != 4 {
					t.Errorf("Renew: %d leases, %v", len(gr.Leases), err)
					return
				}
				if n, err := s.Remove(t.Context(), g, idkeeper.RemoveParams{Requester: who(i), KeyID: "k", MintedUpTo: clock.Now()}); err != nil || n != 4 {
					t.Errorf("Remove = %d, %v", n, err)
					return
				}
				if _, err := stores[(i+round+1)%4].Alloc(t.Context(), g, allocP(who(i), 4)); err != nil {
					t.Errorf("Alloc: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	side.Wait()
	ls, err := stores[2].Leases(t.Context())
	if err != nil || len(ls) != 64 {
		t.Fatalf("Leases = %d, %v; want 64", len(ls), err)
	}
	st, err := stores[0].Status(t.Context())
	if err != nil || st.Fence != 64+16*5*4 {
		t.Fatalf("Status = %+v, %v; want fence %d", st, err, 64+16*5*4)
	}
}

// A lease transaction that another Store's commit overtakes between its reads and
// its commit writes nothing and starts over on the new state: its Alloc takes
// another node ID and the next token.
func TestOvertakenCommitStartsOver(t *testing.T) {
	srv := etcdtest.Start(t)
	clock := fakeclock.New(t0)
	prefix := fmt.Sprintf("overtaken%d/", prefixSeq.Add(1))
	a := checked(t, open(t, srv.Client(), etcd.Options{Clock: clock.Now, Prefix: prefix}))
	c, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	b := open(t, c, etcd.Options{Clock: clock.Now, Prefix: prefix})
	res, err := a.Init(t.Context(), idkeeper.PoolSpec{Nodes: 4})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	var bGrant idkeeper.Grant
	a.SetBeforeCommitForTest(func() {
		a.SetBeforeCommitForTest(nil)
		var berr error
		if bGrant, berr = b.Alloc(t.Context(), g, allocP(who(2), 1)); berr != nil {
			t.Errorf("Alloc through the other Store: %v", berr)
		}
	})
	aGrant, err := a.Alloc(t.Context(), g, allocP(who(1), 1))
	if err != nil || t.Failed() {
		t.Fatalf("Alloc: %v", err)
	}
	if n := a.ConflictsForTest(); n != 1 {
		t.Fatalf("%d attempts started over, want 1", n)
	}
	// b took node 0, the first in the free order, with token 1; a started over.
	if bl, al := bGrant.Leases[0], aGrant.Leases[0]; bl.NodeID != 0 || bl.FencingToken != 1 || al.NodeID != 1 || al.FencingToken != 2 {
		t.Fatalf("the overtaking Alloc got node %d token %d, the overtaken one node %d token %d; want 0/1 and 1/2",
			bl.NodeID, bl.FencingToken, al.NodeID, al.FencingToken)
	}
}

func holders(nodes map[idkeeper.NodeID]int) map[int]bool {
	out := map[int]bool{}
	for _, i := range nodes {
		out[i] = true
	}
	return out
}

// A pool of 4,096 node IDs in the largest transactions the store makes: Init,
// an Alloc of all 4,096 at once, a Reset of every node, their Reclaim, and an
// Alloc after the reset's quarantine, which first moves 4,096 ended quarantines
// in preparatory transactions of 256. They fit the limits etcdtest runs with,
// the ones the package doc asks for.
func TestLargestTransactions(t *testing.T) {
	srv := etcdtest.Start(t)
	clock := fakeclock.New(t0)
	s := checked(t, open(t, srv.Client(), etcd.Options{Clock: clock.Now}))
	ctx := t.Context()
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	big := allocP(who(1), 4096)
	big.Client = idkeeper.ClientInfo{Host: "host-a", Labels: map[string]string{"service": "orders", "version": "1.2.3"}}
	gr, err := s.Alloc(ctx, g, big)
	if err != nil || len(gr.Leases) != 4096 || gr.Fence != 4096 {
		t.Fatalf("Alloc(4096) = %d leases, fence %d, %v", len(gr.Leases), gr.Fence, err)
	}
	g.MinFence = 4096
	until := clock.Now().Add(time.Hour)
	rr, err := s.Reset(ctx, idkeeper.ResetParams{Seen: res.Generation, Pool: idkeeper.PoolSpec{Nodes: 4096}, Until: until, MinFence: 4096})
	if err != nil || !rr.NewGeneration {
		t.Fatalf("Reset = %+v, %v", rr, err)
	}
	g.Generation = rr.Generation.ID
	clock.Advance(2 * time.Hour)
	if n, err := s.Reclaim(ctx, g, 0); err != nil || n != 4096 {
		t.Fatalf("Reclaim = %d, %v; want 4096", n, err)
	}
	c, err := s.Counts(ctx)
	if err != nil || c.Total != 4096 || c.Remaining != 4096 || c.Cooling != 0 {
		t.Fatalf("Counts after the reclaim = %+v, %v", c, err)
	}
	gr, err = s.Alloc(ctx, g, allocP(who(2), 1))
	if err != nil || gr.Leases[0].FencingToken != 4097 {
		t.Fatalf("Alloc after the reset = %+v, %v", gr, err)
	}
	if want := protocol.Millis(until).Add(time.Millisecond); !gr.Leases[0].NotBefore.Equal(want) {
		t.Fatalf("NotBefore after the reset = %v, want the floor + 1 ms, %v", gr.Leases[0].NotBefore, want)
	}
	if n, err := s.HistoryCount(ctx); err != nil || n != 4097 {
		t.Fatalf("HistoryCount = %d, %v; want 4097", n, err)
	}
	if n, err := s.PruneHistory(ctx, clock.Now().Add(time.Second), idkeeper.MaxHistoryPrune); err != nil || n != 4096 {
		t.Fatalf("PruneHistory = %d, %v; want the 4096 reclaimed records", n, err)
	}
}

// Preparatory transactions move the index entries that time has moved on, 256
// at a time, before the Alloc: 600 quarantines that end together.
func TestManyEndedQuarantines(t *testing.T) {
	srv := etcdtest.Start(t)
	clock := fakeclock.New(t0)
	s := checked(t, open(t, srv.Client(), etcd.Options{Clock: clock.Now}))
	ctx := t.Context()
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 600})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	ids := make([]idkeeper.NodeID, 600)
	for i := range ids {
		ids[i] = idkeeper.NodeID(i)
	}
	if err := s.Quarantine(ctx, g, clock.Now().Add(time.Minute), ids...); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Counts(ctx); err != nil || c.Quarantined != 600 {
		t.Fatalf("Counts = %+v, %v; want 600 quarantined", c, err)
	}
	clock.Advance(time.Minute)
	want := idkeeper.Counts{Total: 600, Remaining: 600}
	if c, err := s.Counts(ctx); err != nil || !c.Equal(want) {
		t.Fatalf("Counts with 600 ended quarantines = %+v, %v; want %+v", c, err, want)
	}
	gr, err := s.Alloc(ctx, g, allocP(who(1), 2))
	if err != nil {
		t.Fatal(err)
	}
	// Quarantine kept each node's place in the free order: the first two.
	if gr.Leases[0].NodeID != 0 || gr.Leases[1].NodeID != 1 {
		t.Fatalf("Alloc after the quarantines took %d and %d, want 0 and 1", gr.Leases[0].NodeID, gr.Leases[1].NodeID)
	}
	want = idkeeper.Counts{Total: 600, Remaining: 598, Leased: 2}
	if c, err := s.Counts(ctx); err != nil || !c.Equal(want) {
		t.Fatalf("Counts = %+v, %v; want %+v", c, err, want)
	}
}

// A server that allows fewer operations than a transaction needs refuses it;
// the error names the setting, and nothing is written.
func TestServerLimitsNamed(t *testing.T) {
	srv := etcdtest.StartWith(t, etcdtest.Options{MaxTxnOps: 128})
	s := open(t, srv.Client(), etcd.Options{})
	_, err := s.Init(t.Context(), idkeeper.PoolSpec{Nodes: 4096})
	if err == nil || !strings.Contains(err.Error(), "--max-txn-ops") {
		t.Fatalf("Init(4096) on a server of 128 operations: %v; want an error naming --max-txn-ops", err)
	}
	if st, err := s.Status(t.Context()); err != nil || st.Initialised || st.Pool.Nodes != 0 {
		t.Fatalf("Status after the refused Init = %+v, %v", st, err)
	}
	if _, err := s.Init(t.Context(), idkeeper.PoolSpec{Nodes: 32}); err != nil {
		t.Fatalf("Init(32), within 128 operations: %v", err)
	}
}

// A stopped server makes every call fail within the store's timeout with a plain
// error (STORE_UNAVAILABLE to clients), never a contract error.
func TestServerDown(t *testing.T) {
	srv := etcdtest.Start(t)
	s := open(t, srv.Client(), etcd.Options{Timeout: 2 * time.Second})
	res, err := s.Init(t.Context(), idkeeper.PoolSpec{Nodes: 4})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	srv.Stop(t)
	calls := map[string]func(ctx context.Context) error{
		"Ping":   s.Ping,
		"Status": func(ctx context.Context) error { _, err := s.Status(ctx); return err },
		"Alloc":  func(ctx context.Context) error { _, err := s.Alloc(ctx, g, allocP(who(1), 1)); return err },
		"Counts": func(ctx context.Context) error { _, err := s.Counts(ctx); return err },
		"TryLock": func(ctx context.Context) error {
			_, _, err := s.TryLock(ctx, "job", "a", time.Minute)
			return err
		},
	}
	for name, call := range calls {
		start := time.Now()
		err := call(t.Context())
		var de *idkeeper.Error
		if err == nil || errors.As(err, &de) || errors.Is(err, idkeeper.ErrStoreReset) {
			t.Errorf("%s with the server down: %v; want a plain error", name, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s took %v with a timeout of 2s", name, d)
		}
	}
}

// Alloc's first read starts in the ready index where the Store last saw its
// start; when another Store has put entries below that since, Alloc reads again
// from the start the meta record names, and still takes the least recently freed.
func TestReadyStartStale(t *testing.T) {
	srv := etcdtest.Start(t)
	clock := fakeclock.New(t0)
	s := checked(t, open(t, srv.Client(), etcd.Options{Clock: clock.Now}))
	ctx := t.Context()
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 8})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	for i, want := range []idkeeper.NodeID{0, 1, 2} {
		s.SetReadyFromForTest(1 << 40)
		gr, err := s.Alloc(ctx, g, allocP(who(i), 1))
		if err != nil || gr.Leases[0].NodeID != want {
			t.Fatalf("Alloc %d with a stale start = %+v, %v; want node %d", i, gr, err, want)
		}
		g.MinFence = gr.Fence
	}
}
