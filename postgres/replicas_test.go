package postgres_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
	"github.com/idkeeper/idkeeper/postgres"
)

// Two replicas, each with a pool of its own, on one schema: of the contenders
// for a lock exactly one wins it until it lapses, and audit appenders that
// retry on ErrConflict build one unbroken chain.
func TestTwoReplicas(t *testing.T) {
	srv := sharedServer(t)
	a := open(t, srv, postgres.Options{Schema: "replicas"})
	b := open(t, srv, postgres.Options{Schema: "replicas"})
	ctx := t.Context()

	var mu sync.Mutex
	winners := map[string]bool{}
	var wg sync.WaitGroup
	for i := range 16 {
		s := []*postgres.Store{a, b}[i%2]
		wg.Go(func() {
			owner := fmt.Sprintf("replica-%d", i)
			_, ok, err := s.TryLock(ctx, "cleanup", owner, time.Hour)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				winners[owner] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("lock winners: %v, want exactly one", winners)
	}

	const appenders, each = 8, 10
	for i := range appenders {
		s := []*postgres.Store{a, b}[i%2]
		wg.Go(func() {
			for j := 0; j < each; {
				seq, hash, err := s.AuditHead(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				e := audit.Entry{At: time.Now(), Actor: "system", Action: "test", Detail: fmt.Sprintf("%d/%d", i, j)}.Seal(seq, hash)
				switch err := s.AppendAudit(ctx, e); {
				case errors.Is(err, idkeeper.ErrConflict):
				case err != nil:
					t.Error(err)
					return
				default:
					j++
				}
			}
		})
	}
	wg.Wait()
	es, err := a.AuditEntries(ctx, 1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != appenders*each {
		t.Fatalf("%d audit entries, want %d", len(es), appenders*each)
	}
	for i, e := range es {
		prev := ""
		if i > 0 {
			prev = es[i-1].Hash
		}
		if e.Seq != uint64(i+1) || e.Prev != prev || e.Hash != e.Digest() {
			t.Fatalf("entry %d breaks the chain: %+v", i, e)
		}
	}
}

// A kill -9 of PostgreSQL mid-run: calls fail while it is down, and the same
// Store serves again once it is back, with every committed record kept.
func TestServerKilled(t *testing.T) {
	srv := pgtest.Start(t)
	s := open(t, srv, postgres.Options{})
	ctx := t.Context()
	k := idkeeper.APIKey{ID: "k1", Hash: []byte{1}, CreatedAt: time.Now()}
	if err := s.CreateAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	if _, err := s.APIKey(ctx, "k1"); err == nil {
		t.Fatal("a read answered while the server was down")
	}
	srv.Resume(t)
	var err error
	for range 2 { // the pool may hand out one connection of the killed server
		if _, err = s.APIKey(ctx, "k1"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if _, ok, err := s.TryLock(ctx, "job", "me", time.Minute); err != nil || !ok {
		t.Fatalf("TryLock after the restart: %v, %v", ok, err)
	}
}
