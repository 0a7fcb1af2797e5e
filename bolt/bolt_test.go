package bolt_test

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/fakeclock"
	"github.com/idkeeper/idkeeper/internal/storetest"
)

func open(t testing.TB, path string, clock idkeeper.Clock) *bolt.Store {
	t.Helper()
	s, err := bolt.Open(path, bolt.Options{Clock: clock, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return open(t, filepath.Join(t.TempDir(), "idkeeper.db"), clock)
	})
}

func TestReopenKeepsState(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "idkeeper.db")
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	r := idkeeper.Requester{MachineID: "host", PID: 7, StartedAt: clock.Now().Add(-time.Hour)}

	s, err := bolt.Open(path, bolt.Options{Clock: clock.Now, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Init(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Alloc(ctx, r, 3, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Quarantine(ctx, clock.Now().Add(time.Hour), 15); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.TryLock(ctx, "cleanup", "a", time.Hour); err != nil {
		t.Fatal(err)
	}
	before, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path, clock.Now)
	again, err := s.Init(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	if again.Fresh || again.Sentinel != res.Sentinel {
		t.Fatalf("Init after reopening = %+v, want sentinel %q, not fresh", again, res.Sentinel)
	}
	if c, err := s.Counts(ctx); err != nil || c != before {
		t.Fatalf("Counts after reopening = %+v, %v; want %+v", c, err, before)
	}
	rg, err := s.Renew(ctx, r, time.Hour)
	if err != nil || len(rg.Leases) != 3 || rg.Fence != g.Fence {
		t.Fatalf("Renew after reopening = %+v, %v", rg, err)
	}
	for i, l := range rg.Leases {
		if l.NodeID != g.Leases[i].NodeID || l.FencingToken != g.Leases[i].FencingToken {
			t.Fatalf("lease %d after reopening = %+v, want %+v", i, l, g.Leases[i])
		}
	}
	if _, ok, err := s.TryLock(ctx, "cleanup", "b", time.Hour); err != nil || ok {
		t.Fatalf("TryLock of a held lock after reopening = %v, %v", ok, err)
	}
	next, err := s.Alloc(ctx, idkeeper.Requester{MachineID: "host", PID: 8, StartedAt: r.StartedAt}, 1, time.Minute)
	if err != nil || next.Leases[0].FencingToken != g.Fence+1 {
		t.Fatalf("Alloc after reopening = %+v, %v; want token %d", next, err, g.Fence+1)
	}
}

func TestOpenLockedFileTimesOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idkeeper.db")
	open(t, path, nil)
	start := time.Now()
	s, err := bolt.Open(path, bolt.Options{Timeout: 100 * time.Millisecond})
	if err == nil {
		s.Close()
		t.Fatal("a second Open of a locked file succeeded")
	}
	if !errors.Is(err, bolt.ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open of a locked file: %v; want ErrLocked naming the file", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("Open gave up after %s, want about 100ms", waited)
	}
}

func TestMutatingBeforeInit(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "idkeeper.db"), nil)
	r := idkeeper.Requester{MachineID: "host", PID: 7, StartedAt: time.Now()}
	if _, err := s.Alloc(t.Context(), r, 1, time.Minute); err == nil {
		t.Fatal("Alloc before Init succeeded")
	}
}
