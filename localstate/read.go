package localstate

import (
	"fmt"
	"os"

	"github.com/idkeeper/idkeeper"
)

// Read returns the newest state saved in the state file at path and the store
// identity it records (as Store has it: "" when none), for a reader beside the
// replica: it neither creates, locks nor changes the file, so it works on a
// read-only mount and while the replica holds the file open (`idkeeper init
// --unless-seen` reads the replicas' files so). A concurrent Save rewrites one
// slot only; the other then holds the state one save older, which Read returns.
//
// An empty file is an empty state, as Open takes it (Open created it and stopped
// before its first write). A file that does not exist is an error wrapping
// fs.ErrNotExist; a path that is no regular file, or a file that is not a state
// file or whose two slots are damaged, is an error as Open's.
func Read(path string) (idkeeper.ReplicaState, string, error) {
	// Stat before open: opening a FIFO for reading would block.
	info, err := os.Stat(path)
	if err != nil {
		return idkeeper.ReplicaState{}, "", fmt.Errorf("localstate: %w", err)
	}
	if !info.Mode().IsRegular() {
		return idkeeper.ReplicaState{}, "", fmt.Errorf("localstate: %s is not a regular file (%s)", path, info.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return idkeeper.ReplicaState{}, "", fmt.Errorf("localstate: %w", err)
	}
	defer f.Close()
	if info.Size() == 0 {
		return idkeeper.ReplicaState{}, "", nil
	}
	s := &File{path: path, f: f}
	st, _, err := s.read()
	if err != nil {
		return idkeeper.ReplicaState{}, "", err
	}
	return st, s.store, nil
}

// LooksLikeStateFile reports whether b, the start of a file, begins as a state
// file's first slot does.
func LooksLikeStateFile(b []byte) bool {
	return len(b) >= len(magic) && string(b[:len(magic)]) == magic
}

// MagicLen is how many bytes of a file's start LooksLikeStateFile needs.
const MagicLen = len(magic)
