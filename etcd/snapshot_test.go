package etcd_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/etcd"
	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/snapshot"
)

func TestSnapshot(t *testing.T) {
	srv := etcdtest.Start(t)
	storetest.RunSnapshot(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return checked(t, open(t, srv.Client(), etcd.Options{Clock: clock}))
	})
}

// TestSnapshotSmallBatches runs the contract with staging transactions of 7
// keys, so that every snapshot of the suite spans many of them.
func TestSnapshotSmallBatches(t *testing.T) {
	srv := etcdtest.Start(t)
	storetest.RunSnapshot(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		s := checked(t, open(t, srv.Client(), etcd.Options{Clock: clock}))
		s.SetLoadBatchForTest(7)
		return s
	})
}

// snapshotOf reads s's snapshot whole.
func snapshotOf(t *testing.T, s *etcd.Store) (snapshot.Meta, []snapshot.Record) {
	t.Helper()
	var m snapshot.Meta
	var recs []snapshot.Record
	err := s.ReadSnapshot(t.Context(), func(sm snapshot.Meta) error { m = sm; return nil },
		func(r snapshot.Record) error { recs = append(recs, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return m, recs
}

type recSource struct {
	recs []snapshot.Record
	i    int
}

func (r *recSource) Next() (snapshot.Record, error) {
	if r.i >= len(r.recs) {
		return snapshot.Record{}, io.EOF
	}
	r.i++
	return r.recs[r.i-1], nil
}

func wantStaging(t *testing.T, s *etcd.Store, want int64) {
	t.Helper()
	n, err := s.StagingKeysForTest(t.Context())
	if err != nil || n != want {
		t.Fatalf("staging keys: %d, %v; want %d", n, err, want)
	}
}

// A load that died mid-staging leaves the live state whole and its staging keys
// behind; the next load deletes them. A load deletes the admin sessions and
// leaves job locks, alert state and idempotency records alone.
func TestLoadSnapshotStagingAndSideRecords(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	prefix := fmt.Sprintf("test%d/", prefixSeq.Add(1))
	s := checked(t, open(t, srv.Client(), etcd.Options{Prefix: prefix}))
	if _, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 8}); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC()
	for _, err := range []error{
		s.CreateUser(ctx, account.User{Name: "alice", Role: account.RoleAdmin, CreatedAt: at}),
		s.AppendAudit(ctx, audit.Entry{At: at, Action: audit.Login}.Seal(0, "")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	meta, recs := snapshotOf(t, s)

	// A load that died: staging keys of its own, and a stray "live" key in them.
	for _, k := range []string{"staging/dead/~load", "staging/dead/node/00000000", "staging/dead/user/mallory"} {
		if _, err := srv.Client().Put(ctx, prefix+k, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if m2, recs2 := snapshotOf(t, s); m2 != meta || len(recs2) != len(recs) {
		t.Fatalf("the staging of a dead load shows in the live state: %+v, %d records", m2, len(recs2))
	}
	if _, err := s.User(ctx, "mallory"); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("a staged user reads as live: %v", err)
	}

	// Records outside the snapshot.
	if err := s.CreateSession(ctx, account.Session{ID: "s1", User: "alice", CreatedAt: at, SeenAt: at,
		ExpiresAt: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.TryLock(ctx, "job", "me", time.Hour); err != nil || !ok {
		t.Fatalf("TryLock: %v %v", ok, err)
	}
	if err := s.PutAlertState(ctx, alert.State{Name: alert.NameCapacity, Firing: true, Since: at}); err != nil {
		t.Fatal(err)
	}
	if _, started, err := s.Begin(ctx, "scope", "fp", "tok", time.Hour); err != nil || !started {
		t.Fatalf("Begin: %v %v", started, err)
	}

	// A failing load writes nothing live and leaves no staging of its own.
	bad := &failingSource{recSource: recSource{recs: recs}, failAt: 3}
	if err := s.LoadSnapshot(ctx, meta, bad); !errors.Is(err, errSource) {
		t.Fatalf("LoadSnapshot of a failing source: %v", err)
	}
	wantStaging(t, s, 0)
	if _, err := s.Session(ctx, "s1"); err != nil {
		t.Fatalf("a failed load touched the sessions: %v", err)
	}

	if _, err := srv.Client().Put(ctx, prefix+"staging/dead2/~load", "x"); err != nil {
		t.Fatal(err)
	}
	if err := s.LoadSnapshot(ctx, meta, &recSource{recs: recs}); err != nil {
		t.Fatal(err)
	}
	wantStaging(t, s, 0)
	if m2, recs2 := snapshotOf(t, s); m2 != meta || len(recs2) != len(recs) {
		t.Fatalf("after the load: %+v, %d records; want %+v, %d", m2, len(recs2), meta, len(recs))
	}
	if _, err := s.Session(ctx, "s1"); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("a session after a load: %v, want ErrNotFound", err)
	}
	if n, err := s.PruneSessions(ctx, at.Add(48*time.Hour), time.Hour); err != nil || n != 0 {
		t.Fatalf("PruneSessions after a load: %d, %v: the load left session index entries", n, err)
	}
	if locks, err := s.Locks(ctx); err != nil || len(locks) != 1 {
		t.Fatalf("locks after a load: %v, %v", locks, err)
	}
	if st, err := s.AlertState(ctx, alert.NameCapacity); err != nil || !st.Firing {
		t.Fatalf("alert state after a load: %+v, %v", st, err)
	}
	if rec, started, err := s.Begin(ctx, "scope", "fp", "tok2", time.Hour); err != nil || started || rec == nil {
		t.Fatalf("idempotency record after a load: %+v %v %v", rec, started, err)
	}
}

var errSource = errors.New("the source failed")

type failingSource struct {
	recSource
	failAt int
}

func (f *failingSource) Next() (snapshot.Record, error) {
	if f.i == f.failAt {
		return snapshot.Record{}, errSource
	}
	return f.recSource.Next()
}

// On a server whose --max-txn-ops is below what the swap needs, a load fails
// with an error that names the setting, having changed nothing live, and
// leaves no staging; staging itself fits etcd's default.
func TestLoadSnapshotSwapTooLarge(t *testing.T) {
	srv := etcdtest.StartWith(t, etcdtest.Options{MaxTxnOps: 128})
	ctx := t.Context()
	s := checked(t, open(t, srv.Client(), etcd.Options{}))
	if _, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 40}); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC()
	seq, hash := uint64(0), ""
	for range 60 {
		e := audit.Entry{At: at, Action: audit.Login}.Seal(seq, hash)
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
		seq, hash = e.Seq, e.Hash
	}
	meta, recs := snapshotOf(t, s)
	err := s.LoadSnapshot(ctx, meta, &recSource{recs: recs})
	if err == nil || !strings.Contains(err.Error(), "--max-txn-ops") {
		t.Fatalf("LoadSnapshot of %d records on a server of 128 operations: %v; want an error naming --max-txn-ops",
			len(recs), err)
	}
	wantStaging(t, s, 0)
	if m2, recs2 := snapshotOf(t, s); m2 != meta || len(recs2) != len(recs) {
		t.Fatalf("after a failed load: %+v, %d records; want %+v, %d", m2, len(recs2), meta, len(recs))
	}
}
