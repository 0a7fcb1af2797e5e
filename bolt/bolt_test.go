package bolt_test

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
)

// The contract suite's wipe cases skip a store that is not a Wiper: a renamed
// WipeForTest must fail the build, not skip them.
var _ storetest.Wiper = (*bolt.Store)(nil)

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
	r := idkeeper.Requester{MachineID: "host", PID: 7, StartedAt: clock.Now().Add(-time.Hour), Instance: "a"}

	s, err := bolt.Open(path, bolt.Options{Clock: clock.Now, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 16})
	if err != nil {
		t.Fatal(err)
	}
	gd := idkeeper.Guard{Generation: res.Generation.ID}
	g, err := s.Alloc(ctx, gd, idkeeper.AllocParams{Requester: r, KeyID: "k", Count: 3, First: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Quarantine(ctx, gd, clock.Now().Add(time.Hour), 15); err != nil {
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
	again, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 16})
	if err != nil {
		t.Fatal(err)
	}
	if again.Fresh || again.Generation != res.Generation {
		t.Fatalf("Init after reopening = %+v, want generation %+v, not fresh", again, res.Generation)
	}
	if c, err := s.Counts(ctx); err != nil || c != before {
		t.Fatalf("Counts after reopening = %+v, %v; want %+v", c, err, before)
	}
	gd.MinFence = g.Fence
	rg, err := s.Renew(ctx, gd, idkeeper.RenewParams{Requester: r, KeyID: "k", Duration: time.Hour})
	if err != nil || len(rg.Leases) != 3 || rg.Fence != g.Fence {
		t.Fatalf("Renew after reopening = %+v, %v", rg, err)
	}
	for i, l := range rg.Leases {
		if l.NodeID != g.Leases[i].NodeID || l.FencingToken != g.Leases[i].FencingToken || l.KeyID != "k" {
			t.Fatalf("lease %d after reopening = %+v, want %+v", i, l, g.Leases[i])
		}
	}
	if _, ok, err := s.TryLock(ctx, "cleanup", "b", time.Hour); err != nil || ok {
		t.Fatalf("TryLock of a held lock after reopening = %v, %v", ok, err)
	}
	next, err := s.Alloc(ctx, gd, idkeeper.AllocParams{Requester: idkeeper.Requester{MachineID: "host", PID: 7,
		StartedAt: r.StartedAt, Instance: "b"}, KeyID: "k", Count: 1, First: time.Minute})
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

// MustExist: a missing file is an error wrapping fs.ErrNotExist and nothing is
// created; an existing file opens as without it.
func TestOpenMustExist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idkeeper.db")
	s, err := bolt.Open(path, bolt.Options{MustExist: true})
	if err == nil {
		s.Close()
		t.Fatal("Open with MustExist of a missing file succeeded")
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open with MustExist of a missing file: %v; want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open with MustExist created %s (stat: %v)", path, err)
	}
	open(t, path, nil).Close()
	s, err = bolt.Open(path, bolt.Options{MustExist: true})
	if err != nil {
		t.Fatalf("Open with MustExist of an existing file: %v", err)
	}
	s.Close()
}

// A file of the schema before generations and owners is refused with a message that
// says what to do, and is left as it was.
func TestOldSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idkeeper.db")
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		return b.Put([]byte("version"), binary.BigEndian.AppendUint64(nil, 1))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err := bolt.Open(path, bolt.Options{})
	if err == nil {
		s.Close()
		t.Fatal("a schema 1 file opened")
	}
	if !strings.Contains(err.Error(), "schema version 1") || !strings.Contains(err.Error(), "idkeeper init") {
		t.Fatalf("Open of a schema 1 file: %v; want the versions and what to do", err)
	}
}

// A file written before the cooling counter (schema 2 without meta "cooling") gets
// it counted at Open, so Counts reports its cooling node IDs without a scan.
func TestCoolingCounterCountedAtOpen(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "idkeeper.db")
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s, err := bolt.Open(path, bolt.Options{Clock: clock.Now, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 5})
	if err != nil {
		t.Fatal(err)
	}
	gd := idkeeper.Guard{Generation: res.Generation.ID}
	r := idkeeper.Requester{MachineID: "host", PID: 7, StartedAt: clock.Now(), Instance: "a"}
	if _, err := s.Alloc(ctx, gd, idkeeper.AllocParams{Requester: r, KeyID: "k", Count: 3, First: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	gd.MinFence = 3
	if _, err := s.Remove(ctx, gd, idkeeper.RemoveParams{Requester: r, KeyID: "k"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("meta")).Delete([]byte("cooling")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s = open(t, path, clock.Now)
	want := idkeeper.Counts{Total: 5, Remaining: 5, Cooling: 3, NextReadyAt: clock.Now().Add(10*time.Minute + time.Millisecond)}
	if c, err := s.Counts(ctx); err != nil || !c.Equal(want) {
		t.Fatalf("Counts after reopening = %+v, %v; want %+v", c, err, want)
	}
}
