package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/etcd"
	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
	"github.com/idkeeper/idkeeper/protocol"
)

// TestLeaderKilledLosesNoGrant (issue #17): two stores, as two registry
// replicas, grant, renew and release node IDs on a three-member cluster while
// its leader is killed mid-run. The cluster elects another; afterwards every
// grant a store acknowledged is still there (held with its token, or ended in
// the history), the fencing counter is at least every token handed out, no
// token was handed out twice, and no call ever found a store that lost writes
// (ErrStoreReset): nothing to quarantine, unlike a Redis failover.
func TestLeaderKilledLosesNoGrant(t *testing.T) {
	srv := etcdtest.StartCluster(t, 3, etcdtest.Options{})
	ctx := context.Background()
	prefix := fmt.Sprintf("failover%d/", prefixSeq.Add(1))
	var stores []*etcd.Store
	for range 2 {
		c, err := srv.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		stores = append(stores, open(t, c, etcd.Options{Prefix: prefix, Timeout: 20 * time.Second}))
	}
	res, err := stores[0].Init(ctx, idkeeper.PoolSpec{Nodes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	gen := res.Generation.ID

	type grant struct {
		node    idkeeper.NodeID
		token   uint64
		req     idkeeper.Requester
		removed bool
	}
	var (
		mu       sync.Mutex
		grants   []grant
		maxToken uint64
		failures = map[string]int{}
		resets   []error
	)
	guard := func() idkeeper.Guard {
		mu.Lock()
		defer mu.Unlock()
		return idkeeper.Guard{Generation: gen, MinFence: maxToken}
	}
	note := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		failures[string(protocol.ErrorCode(err))]++
		if errors.Is(err, idkeeper.ErrStoreReset) {
			resets = append(resets, err)
		}
	}
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for w := range 6 {
		s := stores[w%2]
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				r := idkeeper.Requester{MachineID: "failover", PID: 1000 + w, StartedAt: time.Unix(1_800_000_000, 0), Instance: fmt.Sprintf("w%d-%d", w, i)}
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				g, err := s.Alloc(cctx, guard(), idkeeper.AllocParams{Requester: r, KeyID: "key", Count: 1, First: time.Minute})
				cancel()
				if err != nil {
					note(err)
					continue
				}
				l := g.Leases[0]
				mu.Lock()
				grants = append(grants, grant{node: l.NodeID, token: l.FencingToken, req: r})
				idx := len(grants) - 1
				maxToken = max(maxToken, l.FencingToken)
				mu.Unlock()
				cctx, cancel = context.WithTimeout(ctx, 20*time.Second)
				if _, err := s.Renew(cctx, guard(), idkeeper.RenewParams{Requester: r, KeyID: "key", Duration: time.Hour}); err != nil {
					note(err)
				}
				if i%2 == 0 {
					if _, err := s.Remove(cctx, guard(), idkeeper.RemoveParams{Requester: r, KeyID: "key", MintedUpTo: time.Now()}); err != nil {
						note(err)
					} else {
						mu.Lock()
						grants[idx].removed = true
						mu.Unlock()
					}
				}
				cancel()
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	leader := srv.Leader(5 * time.Second)
	if leader < 0 {
		t.Fatal("no leader")
	}
	srv.Kill(leader)
	t.Logf("killed the leader, member %d", leader)
	wg.Wait()
	if next := srv.Leader(10 * time.Second); next < 0 || next == leader {
		t.Fatalf("no new leader after the kill: %d", next)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(resets) > 0 {
		t.Fatalf("a store that lost writes after the leader died: %v", resets[0])
	}
	if len(grants) < 20 {
		t.Fatalf("only %d grants in the run (failed calls by code: %v)", len(grants), failures)
	}
	st, err := stores[1].Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Fence < maxToken || st.Generation.ID != gen {
		t.Fatalf("after the failover: fence %d (tokens up to %d handed out), generation %s (was %s)", st.Fence, maxToken, st.Generation.ID, gen)
	}
	held := map[idkeeper.NodeID]idkeeper.Lease{}
	leases, err := stores[1].Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		held[l.NodeID] = l
	}
	tokens := map[uint64]bool{}
	for _, g := range grants {
		if tokens[g.token] {
			t.Fatalf("token %d handed out twice", g.token)
		}
		tokens[g.token] = true
		hs, err := stores[1].NodeHistory(ctx, g.node, g.token+1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) != 1 || hs[0].Token != g.token || hs[0].Requester.Key() != g.req.Key() {
			t.Fatalf("the grant of node %d token %d to %s is not in the history: %+v", g.node, g.token, g.req, hs)
		}
		if l, ok := held[g.node]; !g.removed && (!ok || l.FencingToken != g.token) && hs[0].End == idkeeper.EndHeld {
			t.Fatalf("an acknowledged grant (node %d, token %d) is neither held nor ended: lease %+v", g.node, g.token, l)
		}
	}
	if n := failures[string(protocol.CodeNodeIDsExhausted)]; n > 0 {
		t.Fatalf("%d Allocs found the pool of 4,096 exhausted", n)
	}
	t.Logf("%d grants acknowledged, failed calls by code during the failover: %v; fence %d", len(grants), failures, st.Fence)
}
