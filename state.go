package idkeeper

import (
	"context"
	"sync"
)

// ReplicaState is what a registry replica must remember of its store across its
// own restarts (DESIGN §7, "detection survives restarts"): what it compares the
// store against to see lost writes.
type ReplicaState struct {
	// Generation is the store generation the replica adopted last; zero when it has
	// never seen one (it then waits for `idkeeper init`).
	Generation Generation
	// MaxToken is the highest fencing token the replica knows was handed out: by it,
	// by the store (its counter), or in an authentic receipt.
	MaxToken uint64
	// ReplicationID is the store's replication ID when last judged; "" when the
	// store has none or it was never read.
	ReplicationID string
	// PoolNodes is the size of the store's pool when last read; 0 when never read.
	// A registry with Config.FixedPool recreates a store that lost its pool with
	// this size, not Config.Nodes (issue #22).
	PoolNodes int
	// Owner is the job-lock owner (Config.Owner) of the process that last ran on
	// this state. A replica that starts on it releases that owner's job locks: the
	// state is held by one process at a time, so that owner is dead, and its locks
	// would otherwise stall the jobs until they lapse (lock-at-most-for).
	Owner string
}

// StateKeeper keeps a replica's state outside the store, so that a store that
// loses writes while the replica restarts is still caught before the next grant.
// Save must be durable when it returns nil. The localstate package keeps it in a
// file; MemoryState keeps it in memory only.
type StateKeeper interface {
	Load(ctx context.Context) (ReplicaState, error)
	Save(ctx context.Context, st ReplicaState) error
}

// MemoryState is a StateKeeper in memory: detection then lasts only as long as
// the process. It is the default of Config.State, for tests and embedders; the
// server keeps its state in a file.
type MemoryState struct {
	mu sync.Mutex
	st ReplicaState
}

// Load returns the state last saved.
func (m *MemoryState) Load(context.Context) (ReplicaState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st, nil
}

// Save keeps st.
func (m *MemoryState) Save(_ context.Context, st ReplicaState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st = st
	return nil
}

// stateSaver writes the replica's state through a StateKeeper with group commit:
// Sync returns once a state at least as new as the one current at its call is
// durable, and callers that wait together share one write.
type stateSaver struct {
	keeper StateKeeper

	mu      sync.Mutex // guards st and version
	st      ReplicaState
	version uint64 // of st

	saveMu sync.Mutex // one Save at a time
	saved  uint64     // the version on disk; guarded by saveMu
}

// update changes the state in memory; it is durable after the next Sync.
func (s *stateSaver) update(fn func(*ReplicaState) bool) {
	s.mu.Lock()
	if fn(&s.st) {
		s.version++
	}
	s.mu.Unlock()
}

func (s *stateSaver) get() (ReplicaState, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st, s.version
}

// Sync makes the state as of now durable.
func (s *stateSaver) Sync(ctx context.Context) error {
	_, want := s.get()
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	if s.saved >= want {
		return nil
	}
	st, v := s.get()
	if err := s.keeper.Save(ctx, st); err != nil {
		return err
	}
	s.saved = v
	return nil
}

// raiseToken raises MaxToken to t and reports whether it rose.
func (s *stateSaver) raiseToken(t uint64) bool {
	rose := false
	s.update(func(st *ReplicaState) bool {
		rose = t > st.MaxToken
		st.MaxToken = max(st.MaxToken, t)
		return rose
	})
	return rose
}

func (s *stateSaver) maxToken() uint64 {
	st, _ := s.get()
	return st.MaxToken
}

// poolNodes is ReplicaState.PoolNodes.
func (s *stateSaver) poolNodes() int {
	st, _ := s.get()
	return st.PoolNodes
}

func (s *stateSaver) seen() Generation {
	st, _ := s.get()
	return st.Generation
}
