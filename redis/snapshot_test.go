package redis_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/redis"
	"github.com/idkeeper/idkeeper/snapshot"
)

// wantNoSnapshotKeys checks that no snapshot copy, staging key or load lock is
// left on srv.
func wantNoSnapshotKeys(t *testing.T, c goredis.Cmdable) {
	t.Helper()
	for _, pattern := range []string{"*:snapshot:*", "*:restore:*", "*:restore-lock"} {
		keys, err := c.Keys(t.Context(), pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			t.Errorf("keys left behind: %q", keys)
		}
	}
}

func TestSnapshot(t *testing.T) {
	srv := redistest.Start(t)
	storetest.RunSnapshot(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return open(t, srv, redis.Options{Clock: clock})
	})
	wantNoSnapshotKeys(t, rawClient(t, srv))
}

// The snapshot's copies and staging keys stay in the slot of the hash tag.
func TestSnapshotCluster(t *testing.T) {
	srv := redistest.Start(t, redistest.WithCluster())
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { c.Close() })
	storetest.RunSnapshot(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return open(t, srv, redis.Options{Clock: clock, Client: c})
	})
	wantNoSnapshotKeys(t, c)
}

// blockingSource yields one node record, then waits until released and fails.
type blockingSource struct {
	rec     snapshot.Record
	sent    bool
	reached chan struct{}
	release chan struct{}
}

func (b *blockingSource) Next() (snapshot.Record, error) {
	if !b.sent {
		b.sent = true
		return b.rec, nil
	}
	close(b.reached)
	<-b.release
	return snapshot.Record{}, errors.New("released")
}

type sliceSource []snapshot.Record

func (s *sliceSource) Next() (snapshot.Record, error) {
	if len(*s) == 0 {
		return snapshot.Record{}, io.EOF
	}
	r := (*s)[0]
	*s = (*s)[1:]
	return r, nil
}

// One load at a time: a second load while the first runs fails with
// ErrConflict and writes nothing; once the first ended, a load goes through.
func TestSnapshotOneLoadAtATime(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{})
	initGuard(t, s, 1)
	var meta snapshot.Meta
	var recs sliceSource
	err := s.ReadSnapshot(ctx, func(m snapshot.Meta) error {
		meta = m
		return nil
	}, func(r snapshot.Record) error {
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b := &blockingSource{rec: recs[0], reached: make(chan struct{}), release: make(chan struct{})}
	first := make(chan error)
	go func() { first <- s.LoadSnapshot(ctx, meta, b) }()
	<-b.reached
	again := recs
	if err := s.LoadSnapshot(ctx, meta, &again); !errors.Is(err, idkeeper.ErrConflict) {
		t.Fatalf("a second load while one runs: %v, want ErrConflict", err)
	}
	close(b.release)
	if err := <-first; err == nil || err.Error() != "released" {
		t.Fatalf("the first load: %v, want its source's error", err)
	}
	wantNoSnapshotKeys(t, rawClient(t, srv))
	again = recs
	if err := s.LoadSnapshot(ctx, meta, &again); err != nil {
		t.Fatalf("a load after the first ended: %v", err)
	}
	wantNoSnapshotKeys(t, rawClient(t, srv))
	if st, err := s.Status(ctx); err != nil || st.Generation != meta.Generation {
		t.Fatalf("Status after the load = %+v, %v", st, err)
	}
}

// A load whose lock lapsed (or was taken over) before its swap fails and
// leaves the live keys as they were.
func TestSnapshotLoadLosesLock(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{Prefix: "lostlock"})
	g := initGuard(t, s, 2)
	var meta snapshot.Meta
	var recs sliceSource
	if err := s.ReadSnapshot(ctx, func(m snapshot.Meta) error { meta = m; return nil },
		func(r snapshot.Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(ctx, g, allocP(who(1), 1, time.Hour)); err != nil {
		t.Fatal(err)
	}
	raw := rawClient(t, srv)
	if err := s.LoadSnapshot(ctx, meta, &lockThief{recs: recs, raw: raw}); err == nil {
		t.Fatal("a load that lost its lock succeeded")
	}
	if ls, err := s.Leases(ctx); err != nil || len(ls) != 1 {
		t.Fatalf("Leases after a failed load = %v, %v; want the one lease", ls, err)
	}
	if n, err := raw.Exists(ctx, "{lostlock}:restore-lock").Result(); err != nil || n != 1 {
		t.Fatalf("the thief's lock: %d, %v; want it kept", n, err)
	}
}

// lockThief yields recs, then, before it ends, replaces the load lock: as if
// the lock had lapsed and another load taken it.
type lockThief struct {
	recs sliceSource
	raw  *goredis.Client
}

func (l *lockThief) Next() (snapshot.Record, error) {
	r, err := l.recs.Next()
	if errors.Is(err, io.EOF) {
		if err := l.raw.Set(context.Background(), "{lostlock}:restore-lock", "thief", time.Minute).Err(); err != nil {
			return snapshot.Record{}, err
		}
	}
	return r, err
}
