package idkeeper_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/protocol"
)

var layout10 = idkeeper.Layout{Epoch: idkeeper.DefaultLayout.Epoch, TimestampBits: 41, NodeBits: 10, SequenceBits: 12}

// TestRegistryPoolRange: a registry on the pool 100..107 grants only those node
// IDs, and its node reads and pool map know the range.
func TestRegistryPoolRange(t *testing.T) {
	e := newEnv(t, idkeeper.Config{First: 100, Nodes: 8})
	ctx := context.Background()
	g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range g.Leases {
		if l.NodeID != idkeeper.NodeID(100+i) {
			t.Fatalf("Alloc(3) on the pool 100..107 = %+v", g.Leases)
		}
	}
	for _, id := range []idkeeper.NodeID{99, 108, 0} {
		if _, err := e.reg.Node(ctx, id); protocol.ErrorCode(err) != protocol.CodeNotFound {
			t.Fatalf("Node(%d) outside the pool: %v, want NOT_FOUND", id, err)
		}
	}
	if st, err := e.reg.Node(ctx, 101); err != nil || st.Lease == nil {
		t.Fatalf("Node(101) = %+v, %v; want its lease", st, err)
	}
	m, err := e.reg.PoolMap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.First != 100 || len(m.Nodes) != 8 || m.Nodes[0] != idkeeper.NodeLeased || m.Nodes[2] != idkeeper.NodeLeased ||
		m.Nodes[3] != idkeeper.NodeFree {
		t.Fatalf("PoolMap = first %d, %v", m.First, m.Nodes)
	}
	if p, ok := e.reg.Pool(ctx); !ok || p.First != 100 || p.Nodes != 8 {
		t.Fatalf("Pool = %+v, %v", p, ok)
	}
}

// TestRegistryPoolMismatch: a registry configured for another First or layout
// than its store's refuses to start with POOL_MISMATCH naming both, serves
// nothing, and changes nothing in the store; the same First with more node IDs
// grows the pool as before.
func TestRegistryPoolMismatch(t *testing.T) {
	clk := fakeclock.New(t0)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	stored := idkeeper.PoolSpec{First: 100, Nodes: 8}
	if _, err := st.Init(ctx, stored); err != nil {
		t.Fatal(err)
	}
	before, err := st.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []idkeeper.Config{
		{Nodes: 8},
		{First: 101, Nodes: 8},
		{First: 100, Nodes: 8, Layout: layout10},
	} {
		cfg.Clock, cfg.ReceiptSecret, cfg.State = clk.Now, testSecret, nil
		reg, err := idkeeper.NewRegistry(st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = reg.Open(ctx)
		var e *idkeeper.Error
		if !errors.As(err, &e) || e.Code != protocol.CodePoolMismatch {
			reg.Close()
			t.Fatalf("Open with %+v over the pool %s: %v, want POOL_MISMATCH", cfg, stored, err)
		}
		for _, want := range []string{"node IDs 100-107", "re-initialise", reg.Config().Pool().String()} {
			if !strings.Contains(e.Message, want) {
				t.Errorf("POOL_MISMATCH message %q lacks %q", e.Message, want)
			}
		}
		if reg.Phase() != idkeeper.PhasePoolMismatch || protocol.ErrorCode(reg.Serving()) != protocol.CodePoolMismatch {
			t.Fatalf("after a refused start: phase %s, Serving %v", reg.Phase(), reg.Serving())
		}
		if _, err := reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 1}); protocol.ErrorCode(err) != protocol.CodePoolMismatch {
			t.Fatalf("Alloc on a mismatched registry: %v", err)
		}
		reg.Close()
	}
	after, err := st.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation || after.Fence != before.Fence || after.Pool.String() != before.Pool.String() {
		t.Fatalf("refused registries changed the store: %+v, was %+v", after, before)
	}

	// The same space with more node IDs grows the pool.
	e := startEnv(t, st, clk, idkeeper.Config{First: 100, Nodes: 12})
	if p, ok := e.reg.Pool(ctx); !ok || p.First != 100 || p.Nodes != 12 {
		t.Fatalf("after a registry with 12 node IDs: pool %+v", p)
	}
}

// TestFixedPoolNeverGrows (issue #22): a registry with Config.FixedPool — a
// server started without --nodes or --node-range — serves the store's pool at
// the size it was initialised with, even when Config.Nodes (by default the rest
// of the layout) is larger, and when the store loses everything it recreates
// that size, not the whole layout: a region's range never grows into another's
// by itself. Without FixedPool the same registry grows the pool (the control).
func TestFixedPoolNeverGrows(t *testing.T) {
	e := newResetEnv(t, idkeeper.Config{First: 100, Nodes: 8})
	ctx := context.Background()
	held := e.alloc(t, who(1), 2)
	e.renew(t, who(1), receipts(held))

	fixed := startEnv(t, e.sw, e.clk, idkeeper.Config{First: 100, FixedPool: true})
	if fixed.reg.Config().Nodes != 4096-100 {
		t.Fatalf("default Nodes = %d", fixed.reg.Config().Nodes)
	}
	if err := fixed.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.sw.Status(ctx); st.Pool.Nodes != 8 || st.Pool.First != 100 {
		t.Fatalf("a FixedPool registry changed the pool: %+v", st.Pool)
	}

	// The store loses everything; the FixedPool registry saw it, so it recovers it,
	// with the size it last read.
	empty, _ := e.files.open(nil)
	e.sw.Put(empty)
	if err := fixed.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.sw.Status(ctx); !st.Initialised || st.Pool.Nodes != 8 || st.Pool.First != 100 {
		t.Fatalf("the FixedPool registry recreated %+v, want node IDs 100-107", st.Pool)
	}

	growing := startEnv(t, e.sw, e.clk, idkeeper.Config{First: 100})
	if err := growing.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.sw.Status(ctx); st.Pool.Nodes != 4096-100 {
		t.Fatalf("without FixedPool the pool is %+v, want it grown to the layout's end", st.Pool)
	}
}
