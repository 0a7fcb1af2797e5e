package storetest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// testConcurrentAlloc races 20 requesters for 4 node IDs each out of 64: exactly 16
// win, the others get NODE_IDS_EXHAUSTED, and no node ID or token is granted twice.
func testConcurrentAlloc(t *testing.T, open Factory) {
	const pool, workers, each = 64, 20, 4
	e := setup(t, open, pool)
	var (
		mu        sync.Mutex
		nodes     = map[idkeeper.NodeID]int{}
		tokens    = map[uint64]bool{}
		exhausted int
		wg        sync.WaitGroup
	)
	for i := range workers {
		wg.Go(func() {
			g, err := e.allocRaw(req(i), each, 10*time.Minute)
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
			for _, l := range g.Leases {
				if j, dup := nodes[l.NodeID]; dup {
					t.Errorf("node %d granted to requesters %d and %d", l.NodeID, j, i)
				}
				nodes[l.NodeID] = i
				if tokens[l.FencingToken] {
					t.Errorf("fencing token %d granted twice", l.FencingToken)
				}
				tokens[l.FencingToken] = true
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(nodes) != pool || exhausted != workers-pool/each {
		t.Fatalf("%d node IDs granted, %d requests exhausted; want %d and %d", len(nodes), exhausted, pool, workers-pool/each)
	}
	e.fence = pool
	e.wantCounts(idkeeper.Counts{Total: pool, Leased: pool})
	e.check()
}

// testConcurrentChurn has 16 requesters alloc, renew and remove 4 node IDs each, over
// and over, on a pool of exactly 64, while Reclaim and Counts run alongside. No node
// ID is ever held by two requesters at once, no token is handed out twice, and no
// Alloc runs short, since a requester asks again only after it gave its IDs back.
func testConcurrentChurn(t *testing.T, open Factory) {
	const pool, workers, each, rounds = 64, 16, 4, 8
	e := setup(t, open, pool)
	var (
		mu     sync.Mutex
		owner  = map[idkeeper.NodeID]int{}
		tokens = map[uint64]bool{}
		wg     sync.WaitGroup
		done   = make(chan struct{})
	)
	worker := func(i int) {
		r := req(i)
		for range rounds {
			g, err := e.allocRaw(r, each, 10*time.Minute)
			if err != nil || len(g.Leases) != each {
				t.Errorf("worker %d: Alloc = %d leases, %v", i, len(g.Leases), err)
				return
			}
			mu.Lock()
			for _, l := range g.Leases {
				if j, held := owner[l.NodeID]; held {
					t.Errorf("node %d granted to %d while %d holds it", l.NodeID, i, j)
				}
				owner[l.NodeID] = i
				if tokens[l.FencingToken] {
					t.Errorf("fencing token %d granted twice", l.FencingToken)
				}
				tokens[l.FencingToken] = true
			}
			mu.Unlock()
			rg, err := e.renewRaw(r, time.Hour)
			if err != nil || !slices.Equal(nodeIDs(rg.Leases), nodeIDs(g.Leases)) {
				t.Errorf("worker %d: Renew = %v, %v; want %v", i, nodeIDs(rg.Leases), err, nodeIDs(g.Leases))
				return
			}
			mu.Lock()
			for _, l := range g.Leases {
				delete(owner, l.NodeID)
			}
			mu.Unlock()
			if n, err := e.removeRaw(r, e.now()); err != nil || n != each {
				t.Errorf("worker %d: Remove = %d, %v", i, n, err)
				return
			}
		}
	}
	for i := range workers {
		wg.Go(func() { worker(i) })
	}
	var side sync.WaitGroup
	side.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := e.reclaimRaw(0); err != nil {
				t.Errorf("Reclaim: %v", err)
				return
			}
			c, err := e.s.Counts(e.ctx)
			if err != nil || c.Total != pool || c.Remaining+c.Leased+c.InGrace+c.Quarantined != pool {
				t.Errorf("Counts = %+v, %v", c, err)
				return
			}
		}
	})
	wg.Wait()
	close(done)
	side.Wait()
	if t.Failed() {
		return
	}
	if len(tokens) != workers*rounds*each {
		t.Fatalf("%d distinct tokens, want %d", len(tokens), workers*rounds*each)
	}
	e.fence = uint64(len(tokens))
	// Every node ID is free; which ones still cool, check judges from their states.
	if c := e.counts(); c.Total != pool || c.Remaining != pool {
		t.Fatalf("Counts() = %+v, want every one of %d node IDs remaining", c, pool)
	}
	e.check()
}
