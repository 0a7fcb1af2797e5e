package postgres_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
	"github.com/idkeeper/idkeeper/postgres"
	"github.com/idkeeper/idkeeper/protocol"
)

// Two replicas on one schema under contention: 200 requesters allocate, renew
// and remove through both at once, on a pool of 64. No node ID is ever held
// by two leases, every fencing token is handed out once, and the counts add up
// to the pool at the end.
func TestTwoReplicas_LeaseContention(t *testing.T) {
	srv := sharedServer(t)
	a := open(t, srv, postgres.Options{Schema: "leasereplicas"})
	b := open(t, srv, postgres.Options{Schema: "leasereplicas"})
	ctx := t.Context()
	res, err := a.Init(ctx, idkeeper.PoolSpec{Nodes: 64})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	var mu sync.Mutex
	tokens := map[uint64]idkeeper.NodeID{}
	var wg sync.WaitGroup
	for i := range 200 {
		s := []*postgres.Store{a, b}[i%2]
		wg.Go(func() {
			r := idkeeper.Requester{MachineID: "m", PID: 1 + i, StartedAt: time.Unix(1, 0)}
			for range 3 {
				gr, err := s.Alloc(ctx, g, idkeeper.AllocParams{Requester: r, KeyID: "k", Count: 1, First: time.Minute})
				var de *idkeeper.Error
				if errors.As(err, &de) && de.Code == protocol.CodeNodeIDsExhausted {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, l := range gr.Leases {
					if n, dup := tokens[l.FencingToken]; dup {
						t.Errorf("token %d handed out for node %d and %d", l.FencingToken, n, l.NodeID)
					}
					tokens[l.FencingToken] = l.NodeID
				}
				mu.Unlock()
				if _, err := s.Renew(ctx, g, idkeeper.RenewParams{Requester: r, KeyID: "k", Duration: time.Minute}); err != nil {
					t.Error(err)
				}
				if _, err := s.Remove(ctx, g, idkeeper.RemoveParams{Requester: r, KeyID: "k", MintedUpTo: gr.Now}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	c, err := b.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Leased+c.InGrace != 0 || c.Total != 64 || c.Remaining+c.Quarantined != 64 {
		t.Fatalf("counts at the end: %+v", c)
	}
	st, err := a.Status(ctx)
	if err != nil || st.Fence != uint64(len(tokens)) {
		t.Fatalf("fence %d after %d grants: %v", st.Fence, len(tokens), err)
	}
}

// A kill -9 of PostgreSQL while allocations run: the calls in flight fail, the
// store serves again after the restart, and every acknowledged grant is there
// (fsync on: what a crash keeps).
func TestServerKilled_KeepsGrants(t *testing.T) {
	srv := pgtest.StartWith(t, pgtest.Options{Fsync: true})
	s := open(t, srv, postgres.Options{})
	ctx := t.Context()
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 256})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	var mu sync.Mutex
	acked := map[idkeeper.NodeID]uint64{}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 30 {
				r := idkeeper.Requester{MachineID: "m", PID: 1 + i*100 + j, StartedAt: time.Unix(1, 0)}
				gr, err := s.Alloc(ctx, g, idkeeper.AllocParams{Requester: r, KeyID: "k", Count: 1, First: time.Hour})
				if err != nil {
					continue // the server is down
				}
				mu.Lock()
				acked[gr.Leases[0].NodeID] = gr.Leases[0].FencingToken
				mu.Unlock()
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	srv.Kill(t)
	wg.Wait()
	srv.Resume(t)
	var leases []idkeeper.Lease
	for range 3 { // the pool may hand out connections of the killed server
		if leases, err = s.Leases(ctx); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	held := map[idkeeper.NodeID]uint64{}
	for _, l := range leases {
		held[l.NodeID] = l.FencingToken
	}
	for n, tok := range acked {
		if held[n] != tok {
			t.Errorf("acknowledged grant of node %d token %d lost (held: %d)", n, tok, held[n])
		}
	}
	if len(acked) == 0 {
		t.Log("no grant was acknowledged before the kill")
	}
}
