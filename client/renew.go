package client

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/snowflake"
)

// validateGrant checks an Alloc answer (DESIGN §4: fail fast) and builds one
// generator per lease, in node ID order. Errors wrap ErrInvalidGrant.
func (s *Session) validateGrant(g grant, sent time.Duration) ([]*minter, error) {
	if err := g.layout.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidGrant, err)
	}
	if len(g.leases) != s.cfg.Count {
		return nil, fmt.Errorf("%w: asked for %d node IDs, granted %d", ErrInvalidGrant, s.cfg.Count, len(g.leases))
	}
	slices.SortFunc(g.leases, byNode)
	now := s.clk.Now()
	for i, l := range g.leases {
		if l.NodeID < 0 || l.NodeID > g.layout.MaxNode() {
			return nil, fmt.Errorf("%w: node ID %d is outside 0..%d of a %d-bit node field",
				ErrInvalidGrant, l.NodeID, g.layout.MaxNode(), g.layout.NodeBits)
		}
		if i > 0 && g.leases[i-1].NodeID == l.NodeID {
			return nil, fmt.Errorf("%w: node ID %d granted twice", ErrInvalidGrant, l.NodeID)
		}
		if now.After(l.ExpiresAt) {
			return nil, fmt.Errorf("%w: the lease of node ID %d expires at %s, already past by the local clock (%s): "+
				"the local clock is ahead of the server's by more than the lease", ErrInvalidGrant,
				l.NodeID, wire.FormatTime(l.ExpiresAt), wire.FormatTime(now))
		}
	}
	if deadline := sent + minExpiry(g.leases).Sub(g.serverNow); deadline <= s.clk.Mono() {
		return nil, fmt.Errorf("%w: the lease ran out before the server's answer arrived", ErrInvalidGrant)
	}
	minters := make([]*minter, len(g.leases))
	for i, l := range g.leases {
		gen, err := snowflake.New(g.layout, l.NodeID, snowflake.Options{
			Now:             s.clk.Now,
			MaxBackwardStep: s.cfg.MaxBackwardStep,
			NotBefore:       l.NotBefore,
			ExpiresAt:       l.ExpiresAt,
			OnClockStep:     s.clockStepLogger(l.NodeID),
		})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidGrant, err)
		}
		minters[i] = &minter{gen: gen, seqMask: g.layout.MaxSequence()}
	}
	return minters, nil
}

// setDeadlineLocked sets the lease deadline from an answer to a request sent at
// monotonic time sent, and arms the expiry timer. The server's lease time
// (expiresAt − serverUtcNow) counts from the send time, never from the arrival, so
// a slow answer shortens the lease and never lengthens it.
func (s *Session) setDeadlineLocked(sent time.Duration, g grant) {
	s.deadline.Store(int64(sent + minExpiry(g.leases).Sub(g.serverNow)))
	s.armExpiryLocked()
}

func (s *Session) armExpiryLocked() {
	if s.expiryTimer != nil {
		s.expiryTimer.Stop()
	}
	s.expiryTimer = s.clk.AfterFunc(time.Duration(s.deadline.Load())-s.clk.Mono(), s.onExpiry)
}

// onExpiry runs at the deadline. Issuing has stopped by itself (it checks the
// deadline); this reports it.
func (s *Session) onExpiry() {
	s.mu.Lock()
	if s.state == stateOpen && !s.closing && s.valid() {
		// Renewed meanwhile, or a timer that fired a hair early: wait for the deadline.
		s.armExpiryLocked()
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if s.fail(errLeaseExpired) {
		s.cfg.OnFatal(errLeaseExpired)
	}
}

// renewTick is the renew timer's callback.
func (s *Session) renewTick() {
	s.renewMu.Lock()
	fatal := s.renewLocked()
	s.renewMu.Unlock()
	if fatal != nil {
		s.cfg.OnFatal(fatal)
	}
}

// renewLocked sends one Renew, classifies the answer and schedules the next one.
// It returns the error to report as fatal, if any; the session has then ended.
// Callers hold renewMu.
//
// Classification (DESIGN §4): a transport error, a timeout, any status other than
// 200, and a malformed 200 prove nothing about the lease: retry. 4xx answers are
// retried too (logged as errors): a revoked API key or a rejected request does not
// mean the server dropped the lease, and the lease deadline stops issuing in time
// if the server never answers well again. A well-formed 200 that shows the lease
// gone (an empty list, fewer or other node IDs, other fencing tokens) or already
// expired (by the local wall clock, or on the monotonic clock before the answer
// came) is fatal.
func (s *Session) renewLocked() error {
	s.mu.Lock()
	if s.state != stateOpen || s.closing {
		s.mu.Unlock()
		return nil
	}
	tokens := make([]uint64, len(s.leases))
	var receipts []string
	for i, l := range s.leases {
		tokens[i] = l.FencingToken
		if l.Receipt != "" {
			receipts = append(receipts, l.Receipt)
		}
	}
	held := slices.Clone(s.leases)
	s.mu.Unlock()

	// Once the deadline has passed the lease is over, whatever a renew would answer:
	// issuing stopped at the deadline and must not resume.
	if !s.valid() {
		return s.lost(errLeaseExpired)
	}
	sent := s.clk.Mono()
	g, err := s.api.renew(s.ctx, s.requester, s.clk.Now(), tokens, receipts)
	if err == nil && !s.valid() {
		return s.lost(errLeaseExpired)
	}
	if err != nil {
		if s.ctx.Err() != nil {
			return nil // closing or failed: nothing to schedule
		}
		s.mu.Lock()
		d := s.retryIntervalLocked()
		s.scheduleLocked(d)
		s.mu.Unlock()
		s.logRenewFailure(err, d)
		return nil
	}
	if err := s.checkRenewed(held, g, sent); err != nil {
		return s.lost(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateOpen || s.closing || s.halt.Load() != nil {
		return nil
	}
	for i, l := range g.leases {
		// Renew never moves the window's start back; a later one from the server (a
		// lease restored after a store reset) is the safer one to keep.
		if held[i].NotBefore.After(l.NotBefore) {
			g.leases[i].NotBefore = held[i].NotBefore
		}
		if l.Receipt == "" {
			g.leases[i].Receipt = held[i].Receipt
		}
		s.gens[i].m.Load().gen.SetWindow(g.leases[i].NotBefore, l.ExpiresAt)
	}
	s.leases = g.leases
	s.noteCooling(g.leases) // a restored lease's window may start later
	s.setDeadlineLocked(sent, g)
	lease := minExpiry(g.leases).Sub(g.serverNow)
	s.scheduleLocked(max(sent+lease/2-s.clk.Mono(), 0))
	s.log.Debug("idkeeper client: renewed", "expiresAt", minExpiry(g.leases), "nextIn", sent+lease/2-s.clk.Mono())
	return nil
}

// lost fails the session with cause and returns cause when OnFatal must get it.
func (s *Session) lost(cause error) error {
	if s.fail(cause) {
		return cause
	}
	return nil
}

// checkRenewed returns the fatal error a well-formed Renew answer proves, or nil.
// held is sorted by node ID; g.leases is sorted in place.
func (s *Session) checkRenewed(held []Lease, g grant, sent time.Duration) error {
	if len(g.leases) == 0 {
		return fmt.Errorf("%w: Renew answered an empty list: the server holds no lease for %s", ErrLeaseLost, s.requester.Key())
	}
	slices.SortFunc(g.leases, byNode)
	if !slices.Equal(nodeIDs(held), nodeIDs(g.leases)) {
		return fmt.Errorf("%w: Renew answered node IDs %v, the session holds %v", ErrLeaseLost, nodeIDs(g.leases), nodeIDs(held))
	}
	for i, l := range g.leases {
		if l.FencingToken != held[i].FencingToken {
			return fmt.Errorf("%w: node ID %d has fencing token %d at the server, %d here: it was granted again",
				ErrLeaseLost, l.NodeID, l.FencingToken, held[i].FencingToken)
		}
	}
	now := s.clk.Now()
	for _, l := range g.leases {
		if now.After(l.ExpiresAt) {
			return fmt.Errorf("%w: the renewed lease of node ID %d expires at %s, already past by the local clock (%s)",
				ErrLeaseLost, l.NodeID, wire.FormatTime(l.ExpiresAt), wire.FormatTime(now))
		}
	}
	if sent+minExpiry(g.leases).Sub(g.serverNow) <= s.clk.Mono() {
		return fmt.Errorf("%w: the renewed lease ran out before the server's answer arrived", ErrLeaseLost)
	}
	return nil
}

// retryIntervalLocked is the wait before the next Renew after a failed one:
// min(RenewLoopDuration, time left / 4), at least MinRetryInterval.
func (s *Session) retryIntervalLocked() time.Duration {
	left := time.Duration(s.deadline.Load()) - s.clk.Mono()
	return max(min(s.cfg.RenewLoopDuration, left/4), s.cfg.MinRetryInterval)
}

func (s *Session) scheduleLocked(d time.Duration) {
	if s.state != stateOpen || s.closing {
		return
	}
	if s.renewTimer != nil {
		s.renewTimer.Stop()
	}
	s.renewTimer = s.clk.AfterFunc(d, s.renewTick)
}

func (s *Session) logRenewFailure(err error, retryIn time.Duration) {
	attrs := []any{"err", err, "retryIn", retryIn, "timeLeft", s.TimeLeft()}
	var se *ServerError
	if errors.As(err, &se) {
		attrs = append(attrs, "problem", se)
		if se.Status < 500 {
			s.log.Error("idkeeper client: renew refused; retrying until the lease ends", attrs...)
			return
		}
	}
	s.log.Warn("idkeeper client: renew failed; retrying", attrs...)
}

func byNode(a, b Lease) int { return cmp.Compare(a.NodeID, b.NodeID) }
