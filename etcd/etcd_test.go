package etcd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/etcd"
	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
)

// The contract suite's wipe cases skip a store that is not a Wiper: a renamed
// WipeForTest must fail the build, not skip them.
var _ storetest.Wiper = (*etcd.Store)(nil)

var (
	prefixSeq atomic.Int64
	quiet     = slog.New(slog.NewTextHandler(io.Discard, nil))
)

// open opens a Store on c with a prefix of its own unless opts names one, so
// that tests share a server.
func open(t testing.TB, c *clientv3.Client, opts etcd.Options) *etcd.Store {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = fmt.Sprintf("test%d/", prefixSeq.Add(1))
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s, err := etcd.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// checked has s's keys checked against one another (CheckForTest) when the test
// ends, before s closes.
func checked(t testing.TB, s *etcd.Store) *etcd.Store {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.CheckForTest(ctx); err != nil {
			t.Errorf("the store's keys disagree at the end: %v", err)
		}
	})
	return s
}

func TestContract(t *testing.T) {
	srv := etcdtest.Start(t)
	storetest.Run(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return checked(t, open(t, srv.Client(), etcd.Options{Clock: clock}))
	})
}

// The contract with one lease per Reclaim transaction: a cleanup run of many
// transactions, each guarded and judged at its own now.
func TestContractTinyReclaimBatches(t *testing.T) {
	srv := etcdtest.Start(t)
	storetest.Run(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return checked(t, open(t, srv.Client(), etcd.Options{Clock: clock, ReclaimBatch: 1}))
	})
}

func TestNewRejects(t *testing.T) {
	srv := etcdtest.Start(t)
	if _, err := etcd.New(nil, etcd.Options{}); err == nil {
		t.Error("New without a client succeeded")
	}
	for _, o := range []etcd.Options{{Prefix: "idkeeper"}, {Prefix: "a/b"}, {ReclaimBatch: -1}} {
		if _, err := etcd.New(srv.Client(), o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}
