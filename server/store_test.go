package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
)

// A URL of no store is a *ConfigError listing the forms, without its password.
func TestOpenStore_UnknownURL(t *testing.T) {
	_, err := OpenStore(context.Background(), "mysql://u:hunter2@db/x", StoreOptions{})
	if !errors.As(err, new(*ConfigError)) || !strings.Contains(err.Error(), "want bolt:PATH") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("OpenStore: %v", err)
	}
}

// Each store says what its own durability is: an etcd deployment is no bbolt
// file.
func TestCheckDurability_EachStoreItsOwn(t *testing.T) {
	ctx := context.Background()
	srv := etcdtest.Start(t)
	url := "etcd://" + strings.TrimPrefix(srv.Endpoints()[0], "http://") + "/durability"
	st, err := OpenStore(ctx, url, StoreOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d, err := checkDurability(ctx, st, false, quietLogger())
	if err != nil || !strings.HasPrefix(d, "etcd cluster: ") || strings.Contains(d, "bbolt") {
		t.Fatalf("etcd's durability %q, %v", d, err)
	}
}

// A PostgreSQL URL opens the postgres store; Create (init) makes its schema,
// and the store says its own durability, standbys included.
func TestOpenStore_Postgres(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.StartWith(t, pgtest.Options{Fsync: true})
	st, err := OpenStore(ctx, srv.URL(), StoreOptions{Logger: quietLogger(), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Init(ctx, idkeeper.PoolSpec{Nodes: 8}); err != nil {
		t.Fatal(err)
	}
	d, err := checkDurability(ctx, st, false, quietLogger())
	if err != nil || !strings.HasPrefix(d, "PostgreSQL: fsync on") || !strings.Contains(d, "no standby") {
		t.Fatalf("PostgreSQL's durability %q, %v", d, err)
	}
	if id := StoreIdentity(st, srv.URL()); !strings.HasPrefix(id, "postgres://") {
		t.Fatalf("identity %q", id)
	}
}
