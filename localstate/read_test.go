package localstate_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/localstate"
)

// TestReadBesideTheHolder: Read sees what the process holding the file saved,
// and the store it claimed, while that process holds its lock; it changes
// nothing, and works on a file it may only read.
func TestReadBesideTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry-state")
	f := open(t, path)
	if err := f.Claim(context.Background(), "redis://r:6379/0 prefix idk:"); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(context.Background(), state(3)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	st, store, err := localstate.Read(path)
	if err != nil || st != state(3) || store != "redis://r:6379/0 prefix idk:" {
		t.Fatalf("Read: %+v %q %v; want %+v and the claimed store", st, store, err, state(3))
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("Read changed the file")
	}
	// The holder still saves and Read follows.
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(context.Background(), state(4)); err != nil {
		t.Fatal(err)
	}
	if st, _, err := localstate.Read(path); err != nil || st != state(4) {
		t.Fatalf("after another save: %+v %v", st, err)
	}
}

// TestReadRefusesWhatIsNoStateFile: a missing file is fs.ErrNotExist; a
// directory, a FIFO, a file of other bytes and a file whose slots are both
// damaged are errors; an empty file is an empty state, as Open takes it.
func TestReadRefusesWhatIsNoStateFile(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := localstate.Read(filepath.Join(dir, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	if _, _, err := localstate.Read(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := localstate.Read(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("fifo: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if st, store, err := localstate.Read(empty); err != nil || st != (idkeeper.ReplicaState{}) || store != "" {
		t.Fatalf("empty: %+v %q %v", st, store, err)
	}
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("not a state file at all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := localstate.Read(other); err == nil || !strings.Contains(err.Error(), "not a readable state file") {
		t.Fatalf("other bytes: %v", err)
	}
	// A real file, both slots damaged.
	torn := filepath.Join(dir, "registry-state")
	f := open(t, torn)
	if err := f.Save(context.Background(), state(1)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b, err := os.ReadFile(torn)
	if err != nil {
		t.Fatal(err)
	}
	b[30] ^= 0xff
	b[localstate.SlotSize+30] ^= 0xff
	if err := os.WriteFile(torn, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := localstate.Read(torn); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("both slots damaged: %v", err)
	}
	if !localstate.LooksLikeStateFile(b) || localstate.LooksLikeStateFile([]byte("IDKSTAT")) {
		t.Fatal("LooksLikeStateFile")
	}
}
