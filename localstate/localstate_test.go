package localstate_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/localstate"
)

func state(n uint64) idkeeper.ReplicaState {
	return idkeeper.ReplicaState{
		Generation:    idkeeper.Generation{ID: "0123456789abcdef0123456789abcdef", Number: n, Origin: idkeeper.OriginRecovered, At: time.Date(2026, 3, 1, 12, 0, 0, 123e6, time.UTC)},
		MaxToken:      1<<53 - n,
		ReplicationID: strings.Repeat("f", 40),
	}
}

func open(t *testing.T, path string) *localstate.File {
	t.Helper()
	f, err := localstate.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func load(t *testing.T, f *localstate.File) idkeeper.ReplicaState {
	t.Helper()
	st, err := f.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestNewFileIsEmptyAndSavesRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "registry-state")
	f := open(t, path)
	if st := load(t, f); st != (idkeeper.ReplicaState{}) {
		t.Fatalf("a new file holds %+v", st)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 || info.Size() != 2*localstate.SlotSize {
		t.Fatalf("file %v %v", info, err)
	}
	for n := uint64(1); n <= 5; n++ {
		if err := f.Save(context.Background(), state(n)); err != nil {
			t.Fatal(err)
		}
		if st := load(t, f); st != state(n) {
			t.Fatalf("after save %d: %+v", n, st)
		}
	}
	f.Close()
	if st := load(t, open(t, path)); st != state(5) {
		t.Fatalf("after reopening: %+v, want %+v", st, state(5))
	}
}

// A save torn by a crash damages one slot: the other, one save older, is read.
func TestTornWriteKeepsThePreviousState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	f := open(t, path)
	for n := uint64(1); n <= 3; n++ {
		if err := f.Save(context.Background(), state(n)); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	b, _ := os.ReadFile(path)
	// Save 3 went to slot 1 (saves alternate from slot 0, which held the empty state).
	for i := localstate.SlotSize + 40; i < localstate.SlotSize+60; i++ {
		b[i] ^= 0xff
	}
	os.WriteFile(path, b, 0o600)
	g := open(t, path)
	if st := load(t, g); st != state(2) {
		t.Fatalf("after a torn save: %+v, want the one before (%+v)", st, state(2))
	}
	// The next save overwrites the damaged slot.
	if err := g.Save(context.Background(), state(4)); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if st := load(t, open(t, path)); st != state(4) {
		t.Fatalf("after the next save: %+v", st)
	}
}

// A file that holds no state, or whose slots are both damaged, is refused: an
// empty state would make a rolled-back store look new.
func TestDamagedFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string][]byte{
		"not-a-state": []byte("hello, this is some other file\n"),
		"both-torn":   make([]byte, 2*localstate.SlotSize),
	} {
		path := filepath.Join(dir, name)
		os.WriteFile(path, content, 0o600)
		if f, err := localstate.Open(path); err == nil || !strings.Contains(err.Error(), "remove the file") {
			if f != nil {
				f.Close()
			}
			t.Fatalf("%s: Open = %v, want a refusal that says what to do", name, err)
		}
	}
}

func TestOneProcessAtATime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	f := open(t, path)
	if g, err := localstate.Open(path); !errors.Is(err, localstate.ErrLocked) {
		if g != nil {
			g.Close()
		}
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	f.Close()
	open(t, path)
	if err := f.Save(context.Background(), state(1)); err == nil {
		t.Fatal("Save after Close succeeded")
	}
}

func BenchmarkSave(b *testing.B) {
	f, err := localstate.Open(filepath.Join(b.TempDir(), "state"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	st := state(1)
	for b.Loop() {
		st.MaxToken++
		if err := f.Save(context.Background(), st); err != nil {
			b.Fatal(err)
		}
	}
}

// Claim records the store a file belongs to, durably and without changing its
// state; every later Save keeps it. A file saved without a claim (as every file
// before issue #29) records none.
func TestClaimRecordsTheStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state")
	f := open(t, path)
	if !f.Created() || f.Store() != "" {
		t.Fatalf("new file: created %v, store %q", f.Created(), f.Store())
	}
	if err := f.Save(ctx, state(1)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	f = open(t, path)
	if f.Created() || f.Store() != "" || load(t, f) != state(1) {
		t.Fatalf("a file without a claim: created %v, store %q, state %+v", f.Created(), f.Store(), load(t, f))
	}
	if err := f.Claim(ctx, "bolt:/var/lib/idkeeper/a.db"); err != nil {
		t.Fatal(err)
	}
	if load(t, f) != state(1) {
		t.Fatalf("Claim changed the state: %+v", load(t, f))
	}
	if err := f.Save(ctx, state(2)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	f = open(t, path)
	if f.Store() != "bolt:/var/lib/idkeeper/a.db" || !f.BelongsTo("bolt:/var/lib/idkeeper/a.db") || f.BelongsTo("bolt:/var/lib/idkeeper/b.db") {
		t.Fatalf("store after reopen: %q", f.Store())
	}
	if load(t, f) != state(2) {
		t.Fatalf("state after reopen: %+v", load(t, f))
	}
	long := "etcd://" + strings.Repeat("e", 300)
	if err := f.Claim(ctx, long); err != nil || !f.BelongsTo(long) || f.BelongsTo(long+"x") {
		t.Fatalf("a long identity: %v, store %q", err, f.Store())
	}
}
