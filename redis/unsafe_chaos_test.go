//go:build chaos_unsafe

package redis_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/fakeclock"
	"github.com/idkeeper/idkeeper/internal/redistest"
	"github.com/idkeeper/idkeeper/redis"
)

// UnsafeFree frees held node IDs at once, whoever holds them, under the guard;
// watermarks stay and the key counts follow.
func TestUnsafeFree(t *testing.T) {
	ctx := t.Context()
	clk := fakeclock.New(t0)
	s := open(t, redistest.Start(t), redis.Options{Clock: clk.Now})
	g := initGuard(t, s, 4)
	gr, err := s.Alloc(ctx, g, allocP(who(1), 3, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UnsafeFree(ctx, idkeeper.Guard{Generation: "other"}, 0); !errors.Is(err, idkeeper.ErrStoreReset) {
		t.Fatalf("UnsafeFree under another generation = %v, want ErrStoreReset", err)
	}
	a, b := gr.Leases[0].NodeID, gr.Leases[1].NodeID
	if n, err := s.UnsafeFree(ctx, g, a, b, b, 3); err != nil || n != 2 {
		t.Fatalf("UnsafeFree = %d, %v; want 2", n, err)
	}
	if hs, err := s.KeyHoldings(ctx); err != nil || hs[testKey] != 1 {
		t.Fatalf("KeyHoldings after UnsafeFree = %v, %v; want 1", hs, err)
	}
	st, err := s.Node(ctx, a)
	if err != nil || st.Lease != nil || !st.Watermark.Equal(gr.Leases[0].ExpiresAt) {
		t.Fatalf("freed node = %+v, %v; want free, watermark kept", st, err)
	}
	if rg, err := s.Renew(ctx, g, renewP(who(1), time.Hour)); err != nil || len(rg.Leases) != 1 {
		t.Fatalf("Renew after UnsafeFree = %+v, %v; want the one lease left", rg, err)
	}
}
