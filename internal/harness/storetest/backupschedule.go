package storetest

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// BackupScheduleFactory opens a new, empty BackupScheduleStore. It registers the
// store's Close with t.Cleanup.
type BackupScheduleFactory func(t *testing.T) idkeeper.BackupScheduleStore

// RunBackupSchedule runs the contract suite of idkeeper.BackupScheduleStore as
// subtests of t. That a snapshot leaves the record alone is RunSnapshot's
// "KeepsBackupSchedule".
func RunBackupSchedule(t *testing.T, open BackupScheduleFactory) {
	t.Run("ReadPutVersion", func(t *testing.T) { testScheduleReadPut(t, open(t)) })
	t.Run("Validate", func(t *testing.T) { testScheduleValidate(t, open(t)) })
	t.Run("ConcurrentFirstWrites", func(t *testing.T) { testScheduleConcurrent(t, open(t)) })
}

func testScheduleReadPut(t *testing.T, s idkeeper.BackupScheduleStore) {
	got, err := s.BackupSchedule(ctx0)
	must(t, err)
	if got != (idkeeper.BackupSchedule{}) || !got.Off() {
		t.Fatalf("BackupSchedule of a store without one = %+v, want the zero schedule (off)", got)
	}
	put := idkeeper.BackupSchedule{Spec: "0 3 * * *", UpdatedBy: "flag:replica-a", UpdatedAt: t0.Add(1500 * time.Microsecond)}
	must(t, s.PutBackupSchedule(ctx0, put))
	got, err = s.BackupSchedule(ctx0)
	must(t, err)
	if got.Spec != put.Spec || got.UpdatedBy != put.UpdatedBy || !got.UpdatedAt.Equal(t0.Add(time.Millisecond)) || got.Version != 1 || got.Off() {
		t.Fatalf("BackupSchedule after the first put = %+v, want %+v at Version 1 (time to the millisecond)", got, put)
	}
	wantErr(t, "PutBackupSchedule of a first schedule over a stored one", s.PutBackupSchedule(ctx0, put), idkeeper.ErrConflict)
	stale := got
	stale.Version = 7
	stale.Spec = "@hourly"
	wantErr(t, "PutBackupSchedule over a later version", s.PutBackupSchedule(ctx0, stale), idkeeper.ErrConflict)

	off := got
	off.Spec, off.UpdatedBy, off.UpdatedAt = idkeeper.BackupScheduleOff, "user:alice", t0.Add(time.Hour)
	must(t, s.PutBackupSchedule(ctx0, off))
	got, err = s.BackupSchedule(ctx0)
	must(t, err)
	if got.Spec != idkeeper.BackupScheduleOff || !got.Off() || got.UpdatedBy != "user:alice" || !got.UpdatedAt.Equal(t0.Add(time.Hour)) ||
		got.Version != 2 {
		t.Fatalf("BackupSchedule after turning it off = %+v", got)
	}
	wantErr(t, "PutBackupSchedule over the version before", s.PutBackupSchedule(ctx0, put), idkeeper.ErrConflict)
	// A zero UpdatedAt reads back as zero.
	again := got
	again.Spec, again.UpdatedAt = "@every 6h", time.Time{}
	must(t, s.PutBackupSchedule(ctx0, again))
	got, err = s.BackupSchedule(ctx0)
	must(t, err)
	if got.Spec != "@every 6h" || !got.UpdatedAt.IsZero() || got.Version != 3 {
		t.Fatalf("BackupSchedule after a put without a time = %+v", got)
	}
}

func testScheduleValidate(t *testing.T, s idkeeper.BackupScheduleStore) {
	for _, bad := range []idkeeper.BackupSchedule{
		{Spec: ""},
		{Spec: " @daily"},
		{Spec: "@daily\n"},
		{Spec: "0 3 * * *\x00"},
		{Spec: strings.Repeat("*", idkeeper.MaxBackupScheduleLen+1)},
		{Spec: "@daily", UpdatedBy: strings.Repeat("u", audit.MaxFieldLen+1)},
	} {
		if err := s.PutBackupSchedule(ctx0, bad); protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
			t.Errorf("PutBackupSchedule(spec %q, updatedBy %d bytes) = %v, want INVALID_REQUEST", bad.Spec, len(bad.UpdatedBy), err)
		}
	}
	got, err := s.BackupSchedule(ctx0)
	must(t, err)
	wantEqual(t, "version after refused puts", got.Version, uint64(0))
	must(t, s.PutBackupSchedule(ctx0, idkeeper.BackupSchedule{Spec: strings.Repeat("*", idkeeper.MaxBackupScheduleLen),
		UpdatedBy: strings.Repeat("u", audit.MaxFieldLen)}))
}

// Of replicas that seed the schedule together, exactly one wins; the others
// read the winner's.
func testScheduleConcurrent(t *testing.T, s idkeeper.BackupScheduleStore) {
	const writers = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, lost, winner := 0, 0, ""
	for i := range writers {
		wg.Go(func() {
			spec := "@every " + strings.Repeat("1", i+1) + "h"
			err := s.PutBackupSchedule(ctx0, idkeeper.BackupSchedule{Spec: spec, UpdatedBy: "flag:r"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
				winner = spec
			case errors.Is(err, idkeeper.ErrConflict):
				lost++
			default:
				t.Errorf("PutBackupSchedule: %v", err)
			}
		})
	}
	wg.Wait()
	if won != 1 || lost != writers-1 {
		t.Fatalf("%d first writers: %d won, %d lost; want 1 and %d", writers, won, lost, writers-1)
	}
	got, err := s.BackupSchedule(ctx0)
	must(t, err)
	if got.Spec != winner || got.Version != 1 {
		t.Fatalf("BackupSchedule after the race = %+v, want the winner's %q at Version 1", got, winner)
	}
}

// testSnapshotKeepsSchedule: the schedule is no record of a snapshot, and
// neither a load nor a reset changes it.
func testSnapshotKeepsSchedule(t *testing.T, open Factory) {
	e := richState(t, open)
	sn := e.readSnapshot()
	f := otherState(t, open, e.clock.Now())
	bs, ok := f.s.(idkeeper.BackupScheduleStore)
	if !ok {
		t.Fatalf("%T does not implement idkeeper.BackupScheduleStore", f.s)
	}
	before := f.readSnapshot()
	must(t, bs.PutBackupSchedule(f.ctx, idkeeper.BackupSchedule{Spec: "@daily", UpdatedBy: "user:alice", UpdatedAt: t0}))
	wantSameSnapshot(t, "the snapshot after the schedule was stored", f.readSnapshot(), before)
	f.load(sn)
	f.reset(idkeeper.ResetParams{Seen: f.gen, Pool: poolOf(f.nodes), Until: f.now().Add(time.Minute), MinFence: f.fence})
	got, err := bs.BackupSchedule(f.ctx)
	must(t, err)
	if got.Spec != "@daily" || got.UpdatedBy != "user:alice" || got.Version != 1 {
		t.Fatalf("BackupSchedule after LoadSnapshot and Reset = %+v, want @daily by user:alice at Version 1", got)
	}
}
