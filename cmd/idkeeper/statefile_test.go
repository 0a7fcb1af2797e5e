package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/localstate"
	"github.com/idkeeper/idkeeper/redis"
	"github.com/idkeeper/idkeeper/server"
)

const stateRequester = `{"requester":{"machineId":"m","pid":1,"startedAt":"2026-11-30T10:00:00Z","instance":"a"},"count":3}`

// runBolt starts the server on the bolt file path with args, grants 3 node IDs and
// stops it; it returns the log.
func runBolt(t *testing.T, path string, args ...string) string {
	t.Helper()
	s, code := startInProcess(t, append([]string{"--store", "bolt:" + path}, args...), bootstrapEnv)
	if s.base == "" {
		t.Fatalf("server on %s exited with %d:\n%s", path, code, s.logs)
	}
	s.client(bootstrapKey).do("POST", "/v1/leases", stateRequester, 200)
	if code := s.stop(); code != exitOK {
		t.Fatalf("exit %d:\n%s", code, s.logs)
	}
	return s.logs.String()
}

// quarantined starts the server with args and returns how many node IDs it
// quarantined, and its log.
func quarantined(t *testing.T, args ...string) (float64, string) {
	t.Helper()
	s, code := startInProcess(t, args, bootstrapEnv)
	if s.base == "" {
		t.Fatalf("server exited with %d:\n%s", code, s.logs)
	}
	r := s.client(bootstrapKey).do("GET", "/v1/leases/remaining", "", 200)
	if code := s.stop(); code != exitOK {
		t.Fatalf("exit %d:\n%s", code, s.logs)
	}
	return r["quarantined"].(float64), s.logs.String()
}

// Issue #29 finding 5: a new bolt store beside one a server ran on. Before, both
// shared the folder's registry-state, and the server on the new store took the
// other's generation for a reset: all 4,096 node IDs quarantined for 48 h. Now
// each bolt file has its own state file, named after it.
func TestNewBoltStoreBesideAnotherIsNotAReset(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	initInProcess(t, "bolt:"+a)
	runBolt(t, a)
	initInProcess(t, "bolt:"+b)
	n, logs := quarantined(t, "--store", "bolt:"+b)
	if n != 0 || strings.Contains(logs, "store reset detected") {
		t.Fatalf("the server on the new store %s quarantined %v node IDs:\n%s", b, n, logs)
	}
	for _, p := range []string{a, b} {
		f, err := localstate.Open(p + ".registry-state")
		if err != nil {
			t.Fatal(err)
		}
		if want := "bolt:" + p; f.Store() != want {
			t.Errorf("%s records %q, want %q", f.Path(), f.Store(), want)
		}
		f.Close()
	}
}

// A state file of another store is refused (exit 2, naming --state-file and both
// stores), and neither the store nor the file changes; the store it did see, wiped
// and initialised again, is still a reset.
func TestStateFileOfAnotherStoreIsRefused(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	initInProcess(t, "bolt:"+a)
	runBolt(t, a)
	initInProcess(t, "bolt:"+b)
	aState := a + ".registry-state"
	before, storeBefore := snapshotFiles(t, aState), statusOf(t, b)
	s, code := startInProcess(t, []string{"--store", "bolt:" + b, "--state-file", aState}, bootstrapEnv)
	if s.base != "" {
		s.stop()
		t.Fatal("the server started on another store's state file")
	}
	logs := s.logs.String()
	if code != exitUsage || !strings.Contains(logs, "--state-file") || !strings.Contains(logs, "bolt:"+a) ||
		!strings.Contains(logs, "bolt:"+b) || !strings.Contains(logs, "belongs to another store") {
		t.Fatalf("exit %d, want %d naming --state-file and both stores:\n%s", code, exitUsage, logs)
	}
	if after := snapshotFiles(t, aState); !bytes.Equal(before[0], after[0]) {
		t.Fatal("the refused start changed the state file")
	}
	if st := statusOf(t, b); st != storeBefore {
		t.Fatalf("the refused start changed the store: %+v, was %+v", st, storeBefore)
	}
	if n, _ := quarantined(t, "--store", "bolt:"+b); n != 0 {
		t.Fatalf("store b after the refusal: %v quarantined", n)
	}

	// a.db wiped and initialised again: its own state file saw it, so it is a reset.
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	initInProcess(t, "bolt:"+a)
	n, logs := quarantined(t, "--store", "bolt:"+a)
	if n != 4096 || !strings.Contains(logs, "store reset detected") {
		t.Fatalf("the wiped store: %v quarantined, want 4096:\n%s", n, logs)
	}
}

// snapshotFiles returns the bytes of each file.
func snapshotFiles(t *testing.T, paths ...string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// writeLegacyState writes a state file as versions before issue #29 did: st,
// without a store identity.
func writeLegacyState(t *testing.T, path string, st idkeeper.ReplicaState) {
	t.Helper()
	f, err := localstate.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Save(context.Background(), st); err != nil {
		t.Fatal(err)
	}
}

// otherGeneration is a state that saw a generation no test store has.
var otherGeneration = idkeeper.ReplicaState{Generation: idkeeper.Generation{ID: "0123456789abcdef0123456789abcdef", Number: 1, Origin: idkeeper.OriginFresh}}

func generationOf(t *testing.T, path string) idkeeper.Generation { return statusOf(t, path).Generation }

// statusOf is what the bolt store at path holds: generation, fencing counter and
// pool (its clock reading zeroed).
func statusOf(t *testing.T, path string) idkeeper.StoreStatus {
	t.Helper()
	s, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.Now = time.Time{}
	return st
}

// The upgrade: the folder's shared registry-state of earlier versions is moved to
// the store's own default when it saw the store's generation; one that saw another
// generation is refused (it may be another store's, or this store's evidence of a
// reset), until --adopt-state-file takes it, and then the reset is detected; one
// in use by another process is another store's, and left alone.
func TestLegacyStateFile(t *testing.T) {
	t.Run("migrated", func(t *testing.T) {
		dir := t.TempDir()
		b := filepath.Join(dir, "b.db")
		initInProcess(t, "bolt:"+b)
		legacy := filepath.Join(dir, server.StateFileName)
		runBolt(t, b, "--state-file", legacy) // an earlier version ran on it, through that file
		f, err := localstate.Open(legacy)
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Load(context.Background())
		f.Close()
		if err != nil || st.MaxToken < 3 || st.Generation != generationOf(t, b) {
			t.Fatalf("state %+v, %v", st, err)
		}
		if err := os.Remove(legacy); err != nil {
			t.Fatal(err)
		}
		writeLegacyState(t, legacy, st)
		n, logs := quarantined(t, "--store", "bolt:"+b)
		if n != 0 || !strings.Contains(logs, "moved this store's replica state file") {
			t.Fatalf("%v quarantined:\n%s", n, logs)
		}
		if _, err := os.Stat(legacy); !os.IsNotExist(err) {
			t.Fatalf("the legacy file is still there: %v", err)
		}
		f, err = localstate.Open(b + ".registry-state")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if st, _ := f.Load(context.Background()); f.Store() != "bolt:"+b || st.MaxToken < 3 {
			t.Fatalf("migrated file: store %q, state %+v", f.Store(), st)
		}
	})
	t.Run("another generation", func(t *testing.T) {
		dir := t.TempDir()
		b := filepath.Join(dir, "b.db")
		initInProcess(t, "bolt:"+b)
		legacy := filepath.Join(dir, server.StateFileName)
		writeLegacyState(t, legacy, otherGeneration)
		before, storeBefore := snapshotFiles(t, legacy), statusOf(t, b)
		s, code := startInProcess(t, []string{"--store", "bolt:" + b}, bootstrapEnv)
		if s.base != "" {
			s.stop()
			t.Fatal("started on a legacy state file that saw another generation")
		}
		if logs := s.logs.String(); code != exitUsage || !strings.Contains(logs, "--state-file") ||
			!strings.Contains(logs, "--adopt-state-file") || !strings.Contains(logs, "0123456789abcdef0123456789abcdef") {
			t.Fatalf("exit %d:\n%s", code, logs)
		}
		if after := snapshotFiles(t, legacy); !bytes.Equal(before[0], after[0]) {
			t.Fatal("the refused start changed the legacy file")
		}
		if st := statusOf(t, b); st != storeBefore {
			t.Fatalf("the refused start changed the store: %+v, was %+v", st, storeBefore)
		}
		if _, err := os.Stat(b + ".registry-state"); !os.IsNotExist(err) {
			t.Fatalf("the refused start created the new state file: %v", err)
		}
		n, logs := quarantined(t, "--store", "bolt:"+b, "--state-file", legacy, "--adopt-state-file")
		if n != 4096 || !strings.Contains(logs, "store reset detected") {
			t.Fatalf("adopted evidence of a reset: %v quarantined:\n%s", n, logs)
		}
	})
	t.Run("in use", func(t *testing.T) {
		dir := t.TempDir()
		b := filepath.Join(dir, "b.db")
		initInProcess(t, "bolt:"+b)
		legacy := filepath.Join(dir, server.StateFileName)
		writeLegacyState(t, legacy, otherGeneration)
		held, err := localstate.Open(legacy) // the server of another store still runs on it
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		if n, logs := quarantined(t, "--store", "bolt:"+b); n != 0 || !strings.Contains(logs, "in use by another process") {
			t.Fatalf("%v quarantined:\n%s", n, logs)
		}
	})
}

// Redis: the state file records the address, database and prefix, not the
// password; a server on another Redis with it is refused; the default state files
// of two Redis stores differ.
func TestStateFileRecordsRedis(t *testing.T) {
	rs := redistest.Start(t)
	other := redistest.Start(t)
	initInProcess(t, rs.URL())
	initInProcess(t, other.URL())
	state := filepath.Join(t.TempDir(), "state")
	args := []string{"--store", rs.URL(), "--state-file", state, "--accept-lost-writes-on-redis-restart"}
	s, _ := startInProcess(t, args, bootstrapEnv)
	s.client(bootstrapKey).do("POST", "/v1/leases", stateRequester, 200)
	s.stop()
	f, err := localstate.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	want := "redis://" + rs.Addr() + "/0 prefix " + redis.DefaultPrefix
	if f.Store() != want {
		t.Errorf("recorded %q, want %q", f.Store(), want)
	}
	f.Close()
	_, code := startInProcess(t, []string{"--store", other.URL(), "--state-file", state, "--accept-lost-writes-on-redis-restart"}, bootstrapEnv)
	if code != exitUsage {
		t.Fatalf("a server on another Redis with this state file: exit %d, want %d", code, exitUsage)
	}
	// That two Redis stores never share a default state file is
	// server.TestDefaultStateFile_OnePerStore.
}

// The identities of the stores: the Redis forms, etcd's endpoints and prefix;
// never a password.
func TestStoreIdentities(t *testing.T) {
	ctx := context.Background()
	for url, want := range map[string]string{
		"redis://:secret@10.0.0.5:6380/3":                                        "redis://10.0.0.5:6380/3 prefix p:",
		"redis+sentinel://:secret@s2:26379/1?master_name=mymaster&addr=s1:26379": "redis+sentinel://s1:26379,s2:26379/1?master_name=mymaster prefix p:",
		"rediss+cluster://u:secret@n2:7000?addr=n1:7000&addr=n3:7000":            "redis+cluster://n1:7000,n2:7000,n3:7000 prefix p:",
	} {
		s, err := redis.Open(url, redis.Options{Prefix: "p:"})
		if err != nil {
			t.Fatalf("%s: %v", server.RedactURL(url), err)
		}
		if got := server.StoreIdentity(s, url); got != want {
			t.Errorf("%s: identity %q, want %q", server.RedactURL(url), got, want)
		}
		s.Close()
	}
	srv := etcdtest.Start(t)
	ep := strings.TrimPrefix(srv.Endpoints()[0], "http://")
	for _, prefix := range []string{"one", "two"} {
		url := "etcd://" + ep + "/" + prefix
		s, err := server.OpenStore(ctx, url, server.StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := server.StoreIdentity(s, url), "etcd://"+ep+"/"+prefix+"/"; got != want {
			t.Errorf("etcd identity %q, want %q", got, want)
		}
		s.Close()
	}
}
