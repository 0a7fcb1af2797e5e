package main

// Issue #30: start errors that say what is wrong before anything is written — a
// bolt file that does not exist names `idkeeper init`, an unreachable store is
// "cannot reach …", a busy port fails before the store is touched.

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/gateway"
	"github.com/idkeeper/idkeeper/server"
)

// dirEntries lists dir's names, for "nothing was created here".
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestMissingBoltStoreNamesInit: every command that opens a bolt store, init, dev
// and backup import aside, refuses a path with no file (exit 2), naming
// `idkeeper init`, and creates neither the file nor its folder; init creates both.
func TestMissingBoltStoreNamesInit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	missingDir := filepath.Join(dir, "nonexistent", "dir")
	for _, c := range []struct {
		path  string
		where string
	}{
		{filepath.Join(missingDir, "x.db"), "neither the file nor its folder"},
		{filepath.Join(dir, "x.db"), "the file does not exist"},
	} {
		store := "bolt:" + c.path
		for _, args := range [][]string{
			{"server", "--listen", "127.0.0.1:0"},
			{"apikey", "create", "--description", "x"},
			{"apikey", "list"},
			{"apikey", "revoke", "idk_x"},
			{"users", "list"},
			{"users", "disable", "bob"},
			{"audit", "verify"},
			{"audit", "list"},
			{"backup", "export", "--out", filepath.Join(dir, "b.idk")},
		} {
			code, _, stderr := runInProcess(ctx, append(slices.Clone(args), "--store", store), bootstrapEnv)
			if code != exitUsage || !strings.Contains(stderr, "idkeeper init --store "+store) || !strings.Contains(stderr, c.where) {
				t.Errorf("%q on %s: exit %d, stderr %q; want %d naming `idkeeper init --store %s` and %q", args, c.path, code, stderr, exitUsage, store, c.where)
			}
			if got := dirEntries(t, dir); len(got) != 0 {
				t.Fatalf("%q on %s created %q in %s", args, c.path, got, dir)
			}
		}
	}
	// init makes a new store, and its folder.
	store := "bolt:" + filepath.Join(missingDir, "x.db")
	if out := initInProcess(t, store); !strings.Contains(out, "initialised "+store) {
		t.Fatalf("init: %s", out)
	}
	if _, err := os.Stat(filepath.Join(missingDir, "x.db")); err != nil {
		t.Fatalf("init made no store file: %v", err)
	}
	if code, _, stderr := runInProcess(ctx, []string{"apikey", "list", "--store", store}, nil); code != exitOK {
		t.Fatalf("apikey list on the initialised store: exit %d, %s", code, stderr)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestUnreachableStoreSaysCannotReach: a Redis (one server, Sentinel) or an etcd
// on a closed port is "cannot reach … at HOST:PORT" with the cause, never the
// password, before any check of the Redis persistence settings; nothing is
// written beside.
func TestUnreachableStoreSaysCannotReach(t *testing.T) {
	old := server.StorePingTimeout
	server.StorePingTimeout = time.Second
	t.Cleanup(func() { server.StorePingTimeout = old })
	ctx := context.Background()
	addr := closedPort(t)
	const password = "s3cret-password-never-shown"
	for _, c := range []struct {
		store, want string
	}{
		{"redis://:" + password + "@" + addr + "/0", "cannot reach Redis at " + addr + ": "},
		{"redis+sentinel://:" + password + "@" + addr + "/0?master_name=m", "cannot reach Redis at " + addr + ": "},
		{"etcd://root:" + password + "@" + addr + "/idk", "cannot reach etcd at " + addr + ": "},
		{"etcd://" + addr + "/idk", "cannot reach etcd at " + addr + ": "},
		{"postgres://idk:" + password + "@" + addr + "/idk?sslmode=disable", "cannot reach PostgreSQL at " + addr + ": "},
	} {
		for _, args := range [][]string{
			{"server", "--listen", "127.0.0.1:0", "--unsafe-no-clock-agent", "--state-file", filepath.Join(t.TempDir(), "state")},
			{"apikey", "list"},
			{"init"},
		} {
			code, _, stderr := runInProcess(ctx, append(slices.Clone(args), "--store-file", secretFile(t, c.store)), bootstrapEnv)
			if code != exitFail || !strings.Contains(stderr, c.want) {
				t.Errorf("%q on %s: exit %d, stderr %q; want %d and %q", args, c.store, code, stderr, exitFail, c.want)
			}
			if strings.Contains(stderr, password) || strings.Contains(stderr, "persistence") {
				t.Errorf("%q on %s: stderr %q shows the password or a persistence check", args, c.store, stderr)
			}
		}
	}
}

// secretFile writes v to a file of its own, for a --…-file flag.
func secretFile(t *testing.T, v string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBusyPortTouchesNoStore: a busy --listen, --metrics-listen or --admin-listen
// fails the server at once (exit 1, naming the address), before the store is
// opened: the bolt file is byte for byte the same, and no state file, receipt
// secret or bootstrap key was written. The gateway's busy --listen leaves its
// idempotency store unmade.
func TestBusyPortTouchesNoStore(t *testing.T) {
	ctx := context.Background()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyAddr := busy.Addr().String()

	dir := t.TempDir()
	path := filepath.Join(dir, "idkeeper.db")
	store := "bolt:" + path
	initInProcess(t, store, "--nodes", "8")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	entries := dirEntries(t, dir)
	for _, extra := range [][]string{
		{"--listen", busyAddr},
		{"--listen", "127.0.0.1:0", "--metrics-listen", busyAddr},
		{"--listen", "127.0.0.1:0", "--admin-listen", busyAddr},
	} {
		args := append([]string{"server", "--store", store}, extra...)
		code, _, stderr := runInProcess(ctx, args, bootstrapEnv)
		if code != exitFail || !strings.Contains(stderr, "listen on "+busyAddr) || !strings.Contains(stderr, "address already in use") {
			t.Errorf("%q: exit %d, stderr %q; want %d and the busy address", extra, code, stderr, exitFail)
		}
		after, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(before, after) {
			t.Errorf("%q: the store file changed (%v)", extra, err)
		}
		if got := dirEntries(t, dir); !slices.Equal(got, entries) {
			t.Errorf("%q: the store's folder holds %q, was %q: a state file or secret was written", extra, got, entries)
		}
	}
	if code, out, stderr := runInProcess(ctx, []string{"apikey", "list", "--store", store}, nil); code != exitOK || strings.Contains(out, "bootstrap") {
		t.Errorf("apikey list after the failed starts: exit %d, %s %s; want no bootstrap key", code, out, stderr)
	}
	// Free ports: the same server starts and writes its key (the test can fail).
	s, code := startInProcess(t, []string{"--store", store}, bootstrapEnv)
	if s.base == "" {
		t.Fatalf("the server did not start on free ports: exit %d\n%s", code, s.logs)
	}
	s.stop()
	if _, out, _ := runInProcess(ctx, []string{"apikey", "list", "--store", store}, nil); !strings.Contains(out, "bootstrap") {
		t.Errorf("apikey list after a start: %s; want the bootstrap key", out)
	}

	idem := filepath.Join(t.TempDir(), "gw", "idem.db")
	_, err = startGateway(gatewayConfig{Listen: busyAddr, ServerURL: "http://127.0.0.1:1", APIKey: bootstrapKey, NodeIDs: 1,
		MaxCount: gateway.DefaultMaxCount, IdempotencyStore: "bolt:" + idem, ShutdownTimeout: time.Second, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "listen on "+busyAddr) {
		t.Fatalf("gateway on a busy port: %v; want the busy address", err)
	}
	if _, err := os.Stat(filepath.Dir(idem)); !os.IsNotExist(err) {
		t.Errorf("the gateway on a busy port made its idempotency store's folder (%v)", err)
	}
}
