package bolt_test

import (
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/snapshot"
)

// stagingBucket is the bucket LoadSnapshot stages a load in.
var stagingBucket = []byte("restore-staging")

// snapshotOf reads the store's snapshot: its meta and its records, each as JSON.
func snapshotOf(t *testing.T, s *bolt.Store) (snapshot.Meta, []snapshot.Record, []string) {
	t.Helper()
	var (
		meta snapshot.Meta
		recs []snapshot.Record
		js   []string
	)
	err := s.ReadSnapshot(t.Context(), func(m snapshot.Meta) error {
		meta = m
		return nil
	}, func(r snapshot.Record) error {
		b, err := json.Marshal(r)
		recs, js = append(recs, r), append(js, string(b))
		return err
	})
	if err != nil {
		t.Fatalf("ReadSnapshot: %v", err)
	}
	return meta, recs, js
}

// wantSnapshot fails unless the store's snapshot is meta and recs (as JSON).
func wantSnapshot(t *testing.T, what string, s *bolt.Store, meta snapshot.Meta, recs []string) {
	t.Helper()
	m, _, r := snapshotOf(t, s)
	if m != meta {
		t.Fatalf("%s: snapshot meta %+v, want %+v", what, m, meta)
	}
	if !slices.Equal(r, recs) {
		t.Fatalf("%s: snapshot records\n%v\nwant\n%v", what, r, recs)
	}
}

// rawUpdate runs fn in a write transaction of the closed store file at path.
func rawUpdate(t *testing.T, path string, fn func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// plantStaging writes, into the closed store file at path, the staging bucket a
// load that died just before its swap would leave: complete, another load's, its
// records garbage that would break any read of them.
func plantStaging(t *testing.T, path string) {
	t.Helper()
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		st, err := tx.CreateBucket(stagingBucket)
		if err != nil {
			return err
		}
		if err := st.Put([]byte("token"), []byte("a load that died")); err != nil {
			return err
		}
		if err := st.Put([]byte("complete"), []byte{1}); err != nil {
			return err
		}
		for _, name := range []string{"meta", "nodes", "leases", "requesters", "keyheld", "expiry", "ready", "cooling",
			"quarantine", "apikeys", "users", "allowlist", "audit"} {
			b, err := st.CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			for _, k := range []string{"\x00\x00\x00\x00", "\x00\x00\x00\x00\x00\x00\x00\x01", "generation", "nodes", "k"} {
				if err := b.Put([]byte(k), []byte("garbage")); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// hasStaging reports whether the closed store file at path holds a staging bucket.
func hasStaging(t *testing.T, path string) bool {
	t.Helper()
	found := false
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		found = tx.Bucket(stagingBucket) != nil
		return nil
	})
	return found
}

// failingSource yields recs and fails with err at record at.
type failingSource struct {
	recs []snapshot.Record
	i    int
	at   int
	err  error
}

func (s *failingSource) Next() (snapshot.Record, error) {
	switch {
	case s.i == s.at:
		return snapshot.Record{}, s.err
	case s.i >= len(s.recs):
		return snapshot.Record{}, io.EOF
	}
	s.i++
	return s.recs[s.i-1], nil
}

// storeWith opens a store at path with a pool of n node IDs, the first held
// leases of requester r, and node n-1 quarantined.
func storeWith(t *testing.T, path string, clock *fakeclock.Clock, n, held int, r idkeeper.Requester) *bolt.Store {
	t.Helper()
	ctx := t.Context()
	s := open(t, path, clock.Now)
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: n})
	if err != nil {
		t.Fatal(err)
	}
	gd := idkeeper.Guard{Generation: res.Generation.ID}
	if _, err := s.Alloc(ctx, gd, idkeeper.AllocParams{Requester: r, KeyID: "k", Count: held, First: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Quarantine(ctx, gd, clock.Now().Add(time.Hour), idkeeper.NodeID(n-1)); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLoadSnapshotStaleStaging: the staging bucket of a load that died is
// invisible to reads, and the next load deletes it, whether it fails or not.
func TestLoadSnapshotStaleStaging(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	r := idkeeper.Requester{MachineID: "host", PID: 7, StartedAt: clock.Now().Add(-time.Hour), Instance: "a"}

	src := storeWith(t, filepath.Join(dir, "src.db"), clock, 6, 2, r)
	srcMeta, srcRecs, srcJSON := snapshotOf(t, src)

	path := filepath.Join(dir, "idkeeper.db")
	s := storeWith(t, path, clock, 9, 3, r)
	meta0, _, recs0 := snapshotOf(t, s)
	counts0, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	plantStaging(t, path)
	s = open(t, path, clock.Now)
	wantSnapshot(t, "with a stale staging bucket", s, meta0, recs0)
	if c, err := s.Counts(ctx); err != nil || c != counts0 {
		t.Fatalf("Counts with a stale staging bucket = %+v, %v; want %+v", c, err, counts0)
	}

	boom := errors.New("the backup file is truncated")
	for _, at := range []int{0, 3, len(srcRecs)} {
		err := s.LoadSnapshot(ctx, srcMeta, &failingSource{recs: srcRecs, at: at, err: boom})
		if !errors.Is(err, boom) {
			t.Fatalf("LoadSnapshot with a source failing at record %d: %v", at, err)
		}
		wantSnapshot(t, "after a failed load", s, meta0, recs0)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if hasStaging(t, path) {
		t.Fatal("a failed load left a staging bucket behind")
	}

	plantStaging(t, path)
	s = open(t, path, clock.Now)
	if err := s.LoadSnapshot(ctx, srcMeta, &failingSource{recs: srcRecs, at: -1}); err != nil {
		t.Fatalf("LoadSnapshot over a stale staging bucket: %v", err)
	}
	wantSnapshot(t, "after the load", s, srcMeta, srcJSON)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if hasStaging(t, path) {
		t.Fatal("a load left a staging bucket behind")
	}
	s = open(t, path, clock.Now)
	wantSnapshot(t, "after the load, reopened", s, srcMeta, srcJSON)
}

// TestLoadSnapshotConcurrent: loads on one store run one at a time, each whole,
// while other writes go on between their batches.
func TestLoadSnapshotConcurrent(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	r := idkeeper.Requester{MachineID: "host", PID: 7, StartedAt: clock.Now().Add(-time.Hour), Instance: "a"}

	type snap struct {
		meta snapshot.Meta
		recs []snapshot.Record
		js   []string
	}
	var snaps []snap
	for i, n := range []int{5, 40} {
		m, recs, js := snapshotOf(t, storeWith(t, filepath.Join(dir, "src"+string(rune('a'+i))+".db"), clock, n, 2, r))
		snaps = append(snaps, snap{m, recs, js})
	}

	path := filepath.Join(dir, "idkeeper.db")
	s := storeWith(t, path, clock, 9, 3, r)
	s.SetLoadBatchForTest(3)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		sn := snaps[i%2]
		wg.Go(func() {
			errs <- s.LoadSnapshot(ctx, sn.meta, &failingSource{recs: sn.recs, at: -1})
		})
	}
	wg.Go(func() {
		for range 50 {
			if _, err := s.Counts(ctx); err != nil {
				errs <- err
				return
			}
			if _, _, err := s.TryLock(ctx, "cleanup", "a", time.Hour); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent loads: %v", err)
		}
	}
	m, _, js := snapshotOf(t, s)
	i := slices.IndexFunc(snaps, func(sn snap) bool { return sn.meta == m })
	if i < 0 || !slices.Equal(js, snaps[i].js) {
		t.Fatalf("after concurrent loads the store holds %+v %v: neither snapshot", m, js)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if hasStaging(t, path) {
		t.Fatal("concurrent loads left a staging bucket behind")
	}
}
