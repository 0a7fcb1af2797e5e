package client

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/idkeeper/idkeeper/snowflake"
)

// Generator mints IDs with one node ID of a Session. Session.Generator(i) returns
// it, so that a worker goroutine can be pinned to one node ID (no shared
// round-robin counter, strictly increasing IDs per worker). It obeys the session:
// it issues only while the session's lease is valid, and Close drains it. Safe for
// concurrent use; NextID does not allocate.
type Generator struct {
	s *Session
	m atomic.Pointer[minter] // set once by Open
	_ [48]byte
	// Counters for Stats, on their own cache line.
	minted    atomic.Uint64
	exhausted atomic.Uint64
	_         [48]byte
}

// minter is a snowflake generator and what the issuing path needs of its layout.
type minter struct {
	gen     *snowflake.Generator
	seqMask int64
}

// enter admits one issuing call: the gate is open and a lease is installed. The
// caller mints, then checks valid() before handing anything out: one clock read per
// call, and an ID is returned only if the lease was valid after it was minted, even
// when the generator waited for its clock. Check makes the same two checks.
func (s *Session) enter() error {
	if s.gate.Add(1)&closedBit != 0 || s.deadline.Load() == notHeld {
		s.exit()
		return s.refusal()
	}
	return nil
}

func (s *Session) exit() {
	if s.gate.Add(-1) == closedBit {
		s.drainOnce.Do(func() { close(s.drained) })
	}
}

// valid reports whether the lease deadline is still ahead on the monotonic clock.
func (s *Session) valid() bool { return s.clk.Mono() < time.Duration(s.deadline.Load()) }

// refusal is the error of a refused issuing call. It does not allocate.
func (s *Session) refusal() error {
	if r := s.halt.Load(); r != nil {
		return r.err
	}
	if s.deadline.Load() == notHeld {
		return ErrNotOpen
	}
	return errLeaseExpired
}

// NextID mints one ID, using the session's generators in turn. It fails with
// ErrNotOpen, ErrClosed, an error wrapping ErrLeaseLost (the lease is over), or a
// generator error (see the package's error list); it never returns a duplicate.
func (s *Session) NextID() (int64, error) {
	if s.dem != nil {
		return s.pooledNextID()
	}
	g := s.gens[0]
	if n := uint64(len(s.gens)); n > 1 {
		g = s.gens[s.rr.Add(1)%n]
	}
	return g.NextID()
}

// pooledNextID is NextID over the session's node IDs and its extra sessions'.
// Inside the session's gate, so that Close drains it before it closes the extras.
func (s *Session) pooledNextID() (int64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	gens := s.pooled()
	at := s.rr.Add(1)
	g := gens[at%uint64(len(gens))]
	id, err := g.NextID()
	if err != nil && g.s != s && retryable(err) {
		id, err = s.gens[at%uint64(len(s.gens))].NextID()
	}
	return id, err
}

// NextIDs fills dst with unique IDs in ascending order. A batch of up to one
// millisecond's sequence goes to one generator, the next generator in turn; a larger
// one is split into one contiguous chunk per generator (as many as it takes at a
// millisecond's sequence each, up to NumGenerators), and each chunk is claimed by its
// generator in one step: callers that must wait for a later millisecond are served
// in the order they claimed (snowflake.Generator.NextIDs). It fills all of dst or
// returns an error (those of NextID); after an error the IDs already written to dst
// are dropped, never handed out again: a gap. It does not allocate.
func (s *Session) NextIDs(dst []int64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	gens := s.pooled()
	n := len(gens)
	at := s.rr.Add(1)
	parts := 1
	if n > 1 {
		chunk := int(s.gens[0].m.Load().seqMask) + 1
		parts = min(n, (len(dst)+chunk-1)/chunk)
	}
	size := (len(dst) + parts - 1) / max(parts, 1)
	for filled := 0; filled < len(dst); at++ {
		if !s.valid() {
			return s.refusal()
		}
		g := gens[at%uint64(n)]
		k := min(len(dst)-filled, size)
		if err := s.fillOn(g, s.gens[at%uint64(len(s.gens))], dst[filled:filled+k]); err != nil {
			return err
		}
		filled += k
	}
	if !s.valid() {
		return s.refusal()
	}
	if n > 1 {
		slices.Sort(dst)
	}
	return nil
}

// NextIDsOn fills dst with ascending IDs of generator i modulo NumGenerators(), all or
// nothing, as Generator(i).NextIDs: one claim on that node ID, so that callers
// waiting for it are served in the order they claimed. The gateway mints the chunks of
// a large request with it, in parallel, one node ID each.
//
// With node IDs on demand (Config.MaxCount), i is taken modulo NumNodeIDs(), over
// the session's own generators and then its extra sessions'.
func (s *Session) NextIDsOn(i int, dst []int64) error {
	if s.dem == nil {
		return s.gens[uint(i)%uint(len(s.gens))].NextIDs(dst)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	gens := s.pooled()
	g := gens[uint(i)%uint(len(gens))]
	err := g.NextIDs(dst)
	if err != nil && g.s != s && retryable(err) {
		err = s.gens[uint(i)%uint(len(s.gens))].NextIDs(dst)
	}
	return err
}

// Generator returns the session's i-th generator, 0 ≤ i < NumGenerators(); it
// panics outside that range. The generators exist from New on; they issue once
// Open has succeeded. The generators of extra sessions leased on demand are not
// among them: they come and go, and issue only through NextID, NextIDs and
// NextIDsOn.
func (s *Session) Generator(i int) *Generator { return s.gens[i] }

// NumGenerators is Config.Count: the number of node IDs and generators the
// session leases itself. Extra sessions leased on demand (Config.MaxCount) are not
// counted: see NumNodeIDs. Pin workers only to these.
func (s *Session) NumGenerators() int { return len(s.gens) }

// NodeID is the generator's node ID; -1 before Open succeeded.
func (g *Generator) NodeID() int64 {
	if m := g.m.Load(); m != nil {
		return m.gen.Node()
	}
	return -1
}

// NextID mints one ID with this generator's node ID. Errors: as Session.NextID.
// IDs from one Generator are strictly increasing.
func (g *Generator) NextID() (int64, error) {
	s := g.s
	if err := s.enter(); err != nil {
		return 0, err
	}
	m := g.m.Load()
	id, err := m.gen.NextID()
	switch {
	case err != nil: // the generator counts its own refusals and waits (snowflake.Stats)
	case !s.valid():
		id, err = 0, s.refusal()
	default:
		g.minted.Add(1)
		if id&m.seqMask == m.seqMask {
			g.exhausted.Add(1)
		}
	}
	s.exit()
	return id, err
}

// NextIDs fills dst with ascending IDs of this generator, all or nothing, as
// Session.NextIDs.
func (g *Generator) NextIDs(dst []int64) error {
	s := g.s
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	if !s.valid() {
		return s.refusal()
	}
	if err := g.fill(g.m.Load(), dst); err != nil {
		return err
	}
	if !s.valid() {
		return s.refusal()
	}
	return nil
}

// fill mints len(dst) IDs; the caller has entered the gate.
func (g *Generator) fill(m *minter, dst []int64) error {
	n, err := m.gen.NextIDs(dst)
	g.minted.Add(uint64(n))
	for _, id := range dst[:n] {
		if id&m.seqMask == m.seqMask {
			g.exhausted.Add(1)
		}
	}
	return err
}

// Check returns nil when issuing can succeed now, else the reason: the issuing
// path's own refusal (ErrNotOpen, ErrClosed, an error wrapping ErrLeaseLost), a
// *CoolingError (wrapping a *snowflake.WindowError) when the wall clock lies before
// a cooling node ID's NotBefore — its text says until when the generator waits —,
// a *snowflake.WindowError when it lies after ExpiresAt, or a
// *snowflake.ClockBackwardsError (snowflake.ErrClockBackwards) while it is behind a
// generator's last ID by more than Config.MaxBackwardStep. Serve it as the health
// check: it is never green while issuing fails for lack of a lease.
func (s *Session) Check() error {
	if err := s.enter(); err != nil {
		return err
	}
	s.exit()
	if !s.valid() {
		return s.refusal()
	}
	now := s.clk.Now()
	ms := now.UnixMilli()
	for _, g := range s.gens {
		gen := g.m.Load().gen
		nb, ex := gen.Window()
		first := nb.UnixMilli()
		if nb.Sub(time.UnixMilli(first)) > 0 {
			first++
		}
		switch {
		case !nb.IsZero() && ms < first:
			return &CoolingError{NodeID: g.NodeID(), NotBefore: nb, Wait: time.UnixMilli(first).Sub(s.clk.Now()),
				Window: &snowflake.WindowError{Err: snowflake.ErrBeforeWindow, NotBefore: nb, ExpiresAt: ex}}
		case !ex.IsZero() && ms > ex.UnixMilli():
			return &snowflake.WindowError{Err: snowflake.ErrWindowEnded, NotBefore: nb, ExpiresAt: ex}
		}
		if err := gen.ClockError(now); err != nil {
			return err
		}
	}
	return nil
}

// Healthy reports whether Check returns nil.
func (s *Session) Healthy() bool { return s.Check() == nil }
