package idemtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/protocol"
)

// StatsStore is a store with the Stats of idempotency.CountingStore.
type StatsStore interface {
	idempotency.Store
	Stats(ctx context.Context) (records, bytes int64, err error)
}

// RecordFormats checks how s reads records written by other builds. The caller
// seeds s, in its own encoding, at T0 with:
//
//   - "old-done": format 1 (before records were counted), completed with status
//     201, header Content-Type: text/plain, body "x", lapsing at T0+1h;
//   - "old-running": format 1, in flight under token "t-old", locked and lapsing
//     at T0+1m;
//   - "newer": format 3, completed with status 200, body "x", lapsing at T0+1h.
//
// A format 1 record is read, completed and replayed as before and counted
// nowhere; a live record of a newer format is a store error, never an answer;
// lapsed, both are replaced like any other. clock is s's clock, at T0.
func RecordFormats(t *testing.T, s StatsStore, clock *fakeclock.Clock) {
	t.Helper()
	ctx := t.Context()
	if rec, started, err := s.Begin(ctx, "old-done", "fp", "t1", time.Minute); err != nil || started || rec.Outcome != 201 || string(rec.Body) != "x" {
		t.Fatalf("format 1 record = %+v, %v, %v", rec, started, err)
	}
	if err := s.Complete(ctx, "old-running", "t-old", idempotency.Stored{Outcome: 200, Body: []byte("y")}, time.Hour); err != nil {
		t.Fatalf("Complete of a format 1 marker: %v", err)
	}
	if rec, _, err := s.Begin(ctx, "old-running", "fp", "t2", time.Minute); err != nil || rec.Outcome != 200 || string(rec.Body) != "y" {
		t.Fatalf("completed format 1 marker = %+v, %v", rec, err)
	}
	if n, _, err := s.Stats(ctx); err != nil || n != 0 {
		t.Fatalf("Stats = %d, %v; format 1 records count nowhere", n, err)
	}
	rec, started, err := s.Begin(ctx, "newer", "fp", "t3", time.Minute)
	if err == nil || protocol.ErrorCode(err) != protocol.CodeInternal || !strings.Contains(err.Error(), "format 3") {
		t.Fatalf("a record of format 3 = %+v, %v, %v; want a store error", rec, started, err)
	}
	clock.Advance(2 * time.Hour)
	for _, scope := range []string{"old-done", "newer"} {
		if _, started, err := s.Begin(ctx, scope, "fp", "t4", time.Minute); err != nil || !started {
			t.Fatalf("Begin on the lapsed record %s: %v, %v", scope, started, err)
		}
	}
	if n, _, err := s.Stats(ctx); err != nil || n != 2 {
		t.Fatalf("Stats = %d, %v; want the 2 new markers", n, err)
	}
}
