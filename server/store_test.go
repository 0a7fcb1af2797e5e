package server

import (
	"context"
	"errors"
	"log/slog"
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

// A PostgreSQL that may lose acknowledged commits (pgtest's default: fsync off)
// is refused with PostgreSQL's settings and the generic flag, never Redis's
// advice; OpenStore itself neither refuses nor logs an acceptance the server has
// not made; with the flag the server starts and says what it accepted.
func TestCheckDurability_PostgresRefusalNamesItsSettings(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	st, err := OpenStore(ctx, srv.URL(), StoreOptions{Logger: log, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if l := logs.String(); strings.Contains(l, "accepted") {
		t.Fatalf("OpenStore logged an acceptance the server did not make:\n%s", l)
	}
	_, err = checkDurability(ctx, st, false, log)
	if err == nil {
		t.Fatal("a PostgreSQL with fsync off was not refused")
	}
	msg := err.Error()
	for _, want := range []string{"refusing to start", "PostgreSQL: fsync off", "A crash of PostgreSQL", "fsync = on", "synchronous_commit = on", "--accept-lost-writes"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "Redis") || strings.Contains(msg, "appendfsync") || strings.Contains(msg, srv.Password()) {
		t.Errorf("the refusal speaks of Redis, or holds the password: %s", msg)
	}
	d, err := checkDurability(ctx, st, true, log)
	if err != nil || !strings.HasPrefix(d, "accepted lost writes on a crash of PostgreSQL") || !strings.Contains(d, "fsync off") {
		t.Fatalf("accepted: %q, %v", d, err)
	}
	if l := logs.String(); !strings.Contains(l, "--accept-lost-writes: a crash of PostgreSQL") {
		t.Fatalf("the acceptance is not logged:\n%s", l)
	}
}

// A backup's header names the store it was taken from, each by its own name.
func TestStoreKind_EachStore(t *testing.T) {
	for spec, want := range map[string]string{
		"bolt:./data/x.db":                         "bolt",
		"redis://127.0.0.1:6379/0":                 "redis",
		"rediss://h:6380/0":                        "redis",
		"redis+sentinel://h:26379/0?master_name=m": "redis",
		"redis+cluster://h:7000":                   "redis",
		"etcd://h:2379/p":                          "etcd",
		"etcds://h:2379/p":                         "etcd",
		"postgres://u@h:5432/db":                   "postgres",
		"postgresql://u@h/db":                      "postgres",
		"mysql://u@h/db":                           "store",
	} {
		if got := StoreKind(spec); got != want {
			t.Errorf("StoreKind(%q) = %q, want %q", spec, got, want)
		}
	}
}

// Every store but bolt is shared by replicas (the clock agent rule); a URL of no
// store is OpenStore's refusal.
func TestSharedStore_EveryStoreButBolt(t *testing.T) {
	for spec, want := range map[string]bool{"bolt:./x.db": false, "redis://h:6379/0": true, "rediss://h/0": true,
		"redis+sentinel://h:26379/0?master_name=m": true, "redis+cluster://h:7000": true, "etcd://h:2379/p": true,
		"etcds://h:2379/p": true, "postgres://u@h/db": true, "postgresql://u@h/db": true} {
		if got, err := SharedStore(spec); err != nil || got != want {
			t.Errorf("SharedStore(%q) = %v, %v; want %v", spec, got, err, want)
		}
	}
	if _, err := SharedStore("mysql://u:hunter2@h/db"); !errors.As(err, new(*ConfigError)) ||
		!strings.Contains(err.Error(), "want bolt:PATH") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("an unknown store: %v", err)
	}
}
