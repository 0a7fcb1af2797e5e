package gateway_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/idkeeper/idkeeper/snowflake"
)

// chunkRecorder is a session that records how the gateway mints: the chunks it
// hands to one generator each (NextIDsOn) and the calls that let the session choose.
type chunkRecorder struct {
	*client.Session
	mu     sync.Mutex
	chunks [][2]int // generator (modulo the count), size
	whole  []int
}

func (r *chunkRecorder) NextIDsOn(i int, dst []int64) error {
	r.mu.Lock()
	r.chunks = append(r.chunks, [2]int{i % r.NumGenerators(), len(dst)})
	r.mu.Unlock()
	return r.Session.NextIDsOn(i, dst)
}

func (r *chunkRecorder) NextIDs(dst []int64) error {
	r.mu.Lock()
	r.whole = append(r.whole, len(dst))
	r.mu.Unlock()
	return r.Session.NextIDs(dst)
}

// A large request over several node IDs is split into one chunk per node ID, each
// minted on its own generator (one claim there, so requests for one node ID queue in
// the order they claim); a small one goes whole to the session.
func TestIssueChunksOnePerGenerator(t *testing.T) {
	reg := startRegistry(t, nil)
	rec := &chunkRecorder{Session: reg.open(t, 3)}
	g := startGateway(t, rec, gateway.Options{})
	for round := range 4 {
		a := g.post(`{"count":6000}`)
		ids := a.ids(t)
		if len(ids) != 6000 || !slices.IsSorted(ids) {
			t.Fatalf("round %d: %d IDs, sorted %v", round, len(ids), slices.IsSorted(ids))
		}
		rec.mu.Lock()
		chunks := rec.chunks
		rec.chunks = nil
		rec.mu.Unlock()
		if len(chunks) != 3 {
			t.Fatalf("round %d: chunks %v, want 3", round, chunks)
		}
		nodes := map[int64]int{}
		for _, id := range ids {
			p, err := snowflake.DefaultLayout.Decode(id)
			if err != nil {
				t.Fatal(err)
			}
			nodes[p.Node]++
		}
		seen := map[int]bool{}
		for _, c := range chunks {
			if c[1] != 2000 || seen[c[0]] {
				t.Fatalf("round %d: chunks %v, want 2000 IDs on each of 3 generators", round, chunks)
			}
			seen[c[0]] = true
		}
		if len(nodes) != 3 {
			t.Fatalf("round %d: IDs of node IDs %v, want 3 node IDs", round, nodes)
		}
	}
	if rec.whole != nil {
		t.Fatalf("large requests went whole to the session: %v", rec.whole)
	}
	if ids := g.post(`{"count":1000}`).ids(t); len(ids) != 1000 || len(rec.whole) != 1 || rec.chunks != nil {
		t.Fatalf("count=1000: %d IDs, whole %v, chunks %v", len(ids), rec.whole, rec.chunks)
	}
}
