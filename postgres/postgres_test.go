package postgres_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/postgres"
)

var (
	schemaSeq atomic.Int64
	quiet     = slog.New(slog.NewTextHandler(io.Discard, nil))
)

// server is the package's one PostgreSQL, started by the first test that needs
// it: each store lives in a schema of its own on it (open), so that tests share a
// server as the etcd tests do, and pay for one initdb. It is stopped when the
// package's tests end (TestMain).
var (
	serverOnce sync.Once
	shared     *pgtest.Server
	sharedStop func()
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedStop != nil {
		sharedStop()
	}
	os.Exit(code)
}

// sharedServer returns the package's server, starting it for t the first time.
func sharedServer(t testing.TB) *pgtest.Server {
	t.Helper()
	serverOnce.Do(func() {
		shared, sharedStop = pgtest.StartShared(t, pgtest.Options{})
	})
	if shared == nil {
		t.Fatal("the shared PostgreSQL did not start (see the first test's log)")
	}
	return shared
}

// open opens a Store on srv's pool in a new schema, initialised, unless
// opts names a schema; the pool and the store close when t ends.
func open(t testing.TB, srv *pgtest.Server, opts postgres.Options) *postgres.Store {
	t.Helper()
	if opts.Schema == "" {
		opts.Schema = fmt.Sprintf("test%d", schemaSeq.Add(1))
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.InitSchema(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// The contract suite's wipe cases skip a store that is not a Wiper: a renamed
// WipeForTest must fail the build, not skip them.
var _ storetest.Wiper = (*postgres.Store)(nil)

func TestStore(t *testing.T) {
	srv := sharedServer(t)
	storetest.Run(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return open(t, srv, postgres.Options{Clock: clock})
	})
}

// Without Options.Clock the store's now is PostgreSQL's clock, to the
// millisecond.
func TestNowIsTheServerClock(t *testing.T) {
	s := open(t, sharedServer(t), postgres.Options{})
	before := time.Now().Add(-time.Second)
	now, err := s.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if now.Location() != time.UTC || now.Nanosecond()%int(time.Millisecond) != 0 || now.Before(before) ||
		now.After(time.Now().Add(time.Second)) {
		t.Fatalf("Now = %v", now)
	}
}
