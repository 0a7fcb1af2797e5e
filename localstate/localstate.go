// Package localstate keeps a registry replica's state (idkeeper.ReplicaState) in a
// local file, so that what the replica compares its store against survives the
// replica's restarts (DESIGN §7, "detection survives restarts").
//
// # Format and durability
//
// The file holds two slots of SlotSize bytes. A slot is "IDKSTATE", the format
// version (u16), a sequence number (u64), the length of a JSON payload (u16), the
// payload, and a CRC-32 (IEEE) of everything before it, zero-padded; integers are
// big-endian. Save writes the slot that does not hold the newest record, with the
// next sequence number, and returns after fdatasync: a crash in the middle of a
// write leaves the other slot, one save older, intact. Load takes the valid slot
// with the highest sequence number. One write and one sync per Save: cheap enough
// for the registry to save before it answers every new grant.
//
// One process at a time: Open takes an exclusive lock on the file (flock) and
// fails at once when another process holds it.
//
// # The store it belongs to
//
// A state is evidence about one store only (issue #29). The payload records that
// store's identity (idkeeper.IdentifiedStore.Identity, through Claim; abbreviated
// with a digest past MaxStoreLen bytes). A file written before identities were
// recorded has none: Store returns "", and the caller decides whether it adopts
// the file (cmd/idkeeper does, DESIGN §7 and docs/operations.md).
package localstate

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper"
)

// SlotSize is the size of each of the file's two slots, in bytes.
const SlotSize = 512

const (
	magic      = "IDKSTATE"
	version    = 1
	headerLen  = len(magic) + 2 + 8 + 2
	maxPayload = SlotSize - headerLen - 4
)

// ErrLocked is wrapped by Open's error when another process holds the file.
var ErrLocked = errors.New("localstate: the state file is in use by another process")

// File is a replica state file. It implements idkeeper.StateKeeper; its methods are
// safe for concurrent use.
type File struct {
	path    string
	created bool // by Open

	mu    sync.Mutex
	f     *os.File
	seq   uint64 // of the newest valid slot
	slot  int    // that slot; the next Save writes the other one
	store string // the identity recorded, as Abbrev has it; "" when none
}

// MaxStoreLen is the most bytes a store identity takes in a slot's JSON payload
// as it is; a longer one is kept abbreviated (Abbrev), so that a state always fits
// its slot.
const MaxStoreLen = 120

// Abbrev is the store identity id as a file records it: id itself when its JSON
// form takes at most MaxStoreLen bytes, else as much of its start as takes 88,
// "…" and "sha256:" with 16 hex digits of the digest of the whole.
func Abbrev(id string) string {
	if jsonLen(id) <= MaxStoreLen {
		return id
	}
	cut := min(len(id), 88)
	for cut > 0 && (cut < len(id) && !utf8.RuneStart(id[cut]) || jsonLen(id[:cut]) > 88) {
		cut--
	}
	sum := sha256.Sum256([]byte(id))
	return id[:cut] + "…sha256:" + hex.EncodeToString(sum[:8])
}

// jsonLen is the length of s as a JSON string, without its quotes.
func jsonLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b) - 2
}

// Open opens the state file at path, creating it (mode 0600, and its directory,
// mode 0700) with an empty state when it does not exist. It fails with an error
// wrapping ErrLocked when another process has it open, and when the file is not a
// state file or both its slots are damaged: it never starts over silently, since
// an empty state would make a rolled-back store look new.
func Open(path string) (*File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("localstate: create the directory of %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("localstate: %w", err)
	}
	if err := lock(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrLocked, path, err)
	}
	s := &File{path: path, f: f, slot: 1}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("localstate: %w", err)
	}
	if info.Size() == 0 {
		if err := s.create(); err != nil {
			f.Close()
			return nil, err
		}
		s.created = true
		return s, nil
	}
	if _, _, err := s.read(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// create writes an empty state into slot 0 and a zeroed slot 1, and syncs the
// file and its directory.
func (s *File) create() error {
	b, err := encode(idkeeper.ReplicaState{}, "", 0)
	if err != nil {
		return err
	}
	if _, err := s.f.WriteAt(append(b, make([]byte, SlotSize)...), 0); err != nil {
		return fmt.Errorf("localstate: write %s: %w", s.path, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("localstate: sync %s: %w", s.path, err)
	}
	s.seq, s.slot = 0, 0
	return syncDir(filepath.Dir(s.path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("localstate: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("localstate: sync %s: %w", dir, err)
	}
	return nil
}

// Path is the file's path.
func (s *File) Path() string { return s.path }

// Created reports whether Open created the file (it then records no store yet).
func (s *File) Created() bool { return s.created }

// Store is the identity of the store the file belongs to, as Claim recorded it
// (Abbrev); "" when none was ever recorded: a file Open just created, or one
// written before identities were (issue #29).
func (s *File) Store() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store
}

// BelongsTo reports whether the file records the store identity id.
func (s *File) BelongsTo(id string) bool { return s.Store() == Abbrev(id) }

// Claim records that the file belongs to the store of identity id, keeping the
// state as it is, and returns once that is durable; every later Save keeps it.
func (s *File) Claim(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("localstate: an empty store identity")
	}
	s.mu.Lock()
	st, _, err := s.read()
	if err != nil {
		s.mu.Unlock()
		return err
	}
	prev := s.store
	s.store = Abbrev(id)
	s.mu.Unlock()
	if err := s.Save(ctx, st); err != nil {
		s.mu.Lock()
		s.store = prev
		s.mu.Unlock()
		return err
	}
	return nil
}

// Load returns the newest state saved.
func (s *File) Load(context.Context) (idkeeper.ReplicaState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, _, err := s.read()
	return st, err
}

// read decodes both slots and keeps the newer valid one.
func (s *File) read() (idkeeper.ReplicaState, bool, error) {
	buf := make([]byte, 2*SlotSize)
	n, err := s.f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return idkeeper.ReplicaState{}, false, fmt.Errorf("localstate: read %s: %w", s.path, err)
	}
	var (
		best  idkeeper.ReplicaState
		store string
		found bool
		errs  []error
	)
	for i := range 2 {
		if (i+1)*SlotSize > n {
			errs = append(errs, fmt.Errorf("slot %d is missing", i))
			continue
		}
		st, id, seq, err := decode(buf[i*SlotSize : (i+1)*SlotSize])
		if err != nil {
			errs = append(errs, fmt.Errorf("slot %d: %w", i, err))
			continue
		}
		if !found || seq > s.seq {
			best, store, s.seq, s.slot, found = st, id, seq, i, true
		}
	}
	if !found {
		return idkeeper.ReplicaState{}, false, fmt.Errorf("localstate: %s is not a readable state file (%w); "+
			"it is not recreated by itself: if the replica's state is really lost, remove the file and start the "+
			"server, which then trusts the store as it finds it", s.path, errors.Join(errs...))
	}
	s.store = store
	return best, true, nil
}

// Save writes st into the older slot and syncs it.
func (s *File) Save(_ context.Context, st idkeeper.ReplicaState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return errors.New("localstate: the file is closed")
	}
	b, err := encode(st, s.store, s.seq+1)
	if err != nil {
		return err
	}
	next := 1 - s.slot
	if _, err := s.f.WriteAt(b, int64(next*SlotSize)); err != nil {
		return fmt.Errorf("localstate: write %s: %w", s.path, err)
	}
	if err := datasync(s.f); err != nil {
		return fmt.Errorf("localstate: sync %s: %w", s.path, err)
	}
	s.seq, s.slot = s.seq+1, next
	return nil
}

// Close releases the lock and closes the file.
func (s *File) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// record is the JSON payload of a slot; times are RFC 3339.
type record struct {
	Generation struct {
		ID     string    `json:"id,omitempty"`
		Number uint64    `json:"number,omitempty"`
		Origin string    `json:"origin,omitempty"`
		At     time.Time `json:"at,omitzero"`
	} `json:"generation"`
	MaxToken      uint64 `json:"maxToken"`
	ReplicationID string `json:"replicationId,omitempty"`
	PoolNodes     int    `json:"poolNodes,omitempty"`
	Owner         string `json:"owner,omitempty"`
	// Store is the identity of the store the state belongs to (Abbrev); absent in
	// files written before issue #29.
	Store string `json:"store,omitempty"`
}

func encode(st idkeeper.ReplicaState, store string, seq uint64) ([]byte, error) {
	r := record{Store: store}
	r.Generation.ID, r.Generation.Number = st.Generation.ID, st.Generation.Number
	r.Generation.Origin, r.Generation.At = string(st.Generation.Origin), st.Generation.At.UTC()
	r.MaxToken, r.ReplicationID, r.PoolNodes, r.Owner = st.MaxToken, st.ReplicationID, st.PoolNodes, st.Owner
	p, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("localstate: %w", err)
	}
	if len(p) > maxPayload {
		return nil, fmt.Errorf("localstate: a state of %d bytes does not fit a slot of %d", len(p), maxPayload)
	}
	b := make([]byte, 0, SlotSize)
	b = append(b, magic...)
	b = binary.BigEndian.AppendUint16(b, version)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
	b = append(b, p...)
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return b[:SlotSize], nil // zero-padded: make zeroed the capacity
}

func decode(b []byte) (idkeeper.ReplicaState, string, uint64, error) {
	if string(b[:len(magic)]) != magic {
		return idkeeper.ReplicaState{}, "", 0, errors.New("no state record")
	}
	if v := binary.BigEndian.Uint16(b[len(magic):]); v != version {
		return idkeeper.ReplicaState{}, "", 0, fmt.Errorf("format version %d, this build reads %d", v, version)
	}
	seq := binary.BigEndian.Uint64(b[len(magic)+2:])
	n := int(binary.BigEndian.Uint16(b[len(magic)+10:]))
	if n > maxPayload {
		return idkeeper.ReplicaState{}, "", 0, errors.New("corrupt length")
	}
	end := headerLen + n
	if crc32.ChecksumIEEE(b[:end]) != binary.BigEndian.Uint32(b[end:]) {
		return idkeeper.ReplicaState{}, "", 0, errors.New("checksum mismatch (a torn or damaged write)")
	}
	var r record
	if err := json.Unmarshal(b[headerLen:end], &r); err != nil {
		return idkeeper.ReplicaState{}, "", 0, fmt.Errorf("corrupt payload: %w", err)
	}
	st := idkeeper.ReplicaState{MaxToken: r.MaxToken, ReplicationID: r.ReplicationID, PoolNodes: r.PoolNodes, Owner: r.Owner, Generation: idkeeper.Generation{
		ID: r.Generation.ID, Number: r.Generation.Number, Origin: idkeeper.Origin(r.Generation.Origin), At: r.Generation.At.UTC()}}
	return st, r.Store, seq, nil
}
