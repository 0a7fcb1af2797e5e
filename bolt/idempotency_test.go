package bolt_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/idemtest"
)

// The idempotency suite's purge cases skip a store that is not a Purger: a renamed
// Purge must fail the build, not skip them.
var _ idemtest.Purger = (*bolt.IdempotencyStore)(nil)

func openIdempotency(t testing.TB, path string, clock idkeeper.Clock) *bolt.IdempotencyStore {
	t.Helper()
	s, err := bolt.OpenIdempotency(path, bolt.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The store counts records, so the contract suite runs its cap and Stats cases.
var _ idempotency.CountingStore = (*bolt.IdempotencyStore)(nil)

func TestIdempotencyContract(t *testing.T) {
	idemtest.Run(t, func(t *testing.T, clock idkeeper.Clock) idempotency.Store {
		return openIdempotency(t, filepath.Join(t.TempDir(), "idempotency.db"), clock)
	})
}

func TestIdempotencyContractInStoreFile(t *testing.T) {
	idemtest.Run(t, func(t *testing.T, clock idkeeper.Clock) idempotency.Store {
		s, err := bolt.Open(filepath.Join(t.TempDir(), "idkeeper.db"), bolt.Options{Clock: clock, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s.Idempotency()
	})
}

func TestIdempotencyReopenKeepsRecords(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "idempotency.db")
	clock := fakeclock.New(idemtest.T0)
	s, err := bolt.OpenIdempotency(path, bolt.Options{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Begin(ctx, "done", "fp", "t1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "done", "t1", idempotency.Stored{Outcome: 201, Body: []byte("x")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Begin(ctx, "running", "fp", "t2", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openIdempotency(t, path, clock.Now)
	rec, started, err := s.Begin(ctx, "done", "fp", "t3", time.Minute)
	if err != nil || started || rec.Outcome != 201 || string(rec.Body) != "x" {
		t.Fatalf("completed record after reopening = %+v, %v, %v", rec, started, err)
	}
	// A process that crashed mid-request leaves its marker, which lapses on time.
	if _, started, err := s.Begin(ctx, "running", "fp", "t3", time.Minute); err != nil || started {
		t.Fatalf("Begin on the marker after reopening: started %v, %v", started, err)
	}
	clock.Advance(time.Minute)
	if _, started, err := s.Begin(ctx, "running", "fp", "t3", time.Minute); err != nil || !started {
		t.Fatalf("Begin on the lapsed marker after reopening: started %v, %v", started, err)
	}
}

func TestIdempotencyLazyPurge(t *testing.T) {
	ctx := t.Context()
	clock := fakeclock.New(idemtest.T0)
	s := openIdempotency(t, filepath.Join(t.TempDir(), "idempotency.db"), clock.Now)
	const n = 40
	for i := range n {
		if _, _, err := s.Begin(ctx, string(rune('A'+i)), "fp", "t", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)
	// Each Begin deletes a bounded batch of lapsed records; Purge takes the rest.
	if _, _, err := s.Begin(ctx, "new", "fp", "t", time.Minute); err != nil {
		t.Fatal(err)
	}
	left, err := s.Purge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left <= 0 || left >= n {
		t.Fatalf("Purge after one Begin deleted %d of %d lapsed markers; want some left by Begin's batch", left, n)
	}
}

func TestIdempotencyOpenLockedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idempotency.db")
	openIdempotency(t, path, nil)
	if s, err := bolt.OpenIdempotency(path, bolt.Options{Timeout: 50 * time.Millisecond}); !errors.Is(err, bolt.ErrLocked) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("second OpenIdempotency: %v, want ErrLocked", err)
	}
}

// TestIdempotencyRecordFormats: records of format 1 (before records were
// counted: no "v") and of a newer format, as idemtest.RecordFormats wants them.
func TestIdempotencyRecordFormats(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idempotency.db")
	clock := fakeclock.New(idemtest.T0)
	now := idemtest.T0.UnixMilli()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	records := map[string]string{
		"old-done":    fmt.Sprintf(`{"state":2,"fingerprint":"fp","status":201,"header":{"Content-Type":["text/plain"]},"body":"eA==","createdAt":%d,"expiresAt":%d}`, now, now+3600_000),
		"old-running": fmt.Sprintf(`{"state":1,"fingerprint":"fp","token":"t-old","createdAt":%d,"lockedUntil":%d,"expiresAt":%d}`, now, now+60_000, now+60_000),
		"newer":       fmt.Sprintf(`{"v":3,"state":2,"fingerprint":"fp","status":200,"body":"eA==","createdAt":%d,"expiresAt":%d}`, now, now+3600_000),
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		recs, err := tx.CreateBucketIfNotExists([]byte("idempotency"))
		if err != nil {
			return err
		}
		for scope, v := range records {
			if err := recs.Put([]byte(scope), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || db.Close() != nil {
		t.Fatal(err)
	}
	s := openIdempotency(t, path, clock.Now)
	idemtest.RecordFormats(t, s, clock)
}
