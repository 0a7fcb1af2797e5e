package idkeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// The cluster clock check of DESIGN §8 as the registry sees it: a verifier (the
// server's clock agent monitor) vouches for this replica's clock and the store's;
// once it fails, the replica fails closed for good.

// Bounds of Config.ClockDelta (Δ).
const (
	MinClockDelta = 2 * time.Millisecond
	MaxClockDelta = time.Minute
)

// ClockVerifier vouches for the clocks: Err is nil while every error bound is
// within Δ/2, else why not. A failure of the clock itself is latched (DESIGN §8:
// Err keeps returning it, and ClockFailed is told); a passing condition, such as
// a store whose clock cannot be read for a moment, may clear. It must be safe for
// concurrent use.
type ClockVerifier interface {
	Err() error
}

// clockVerified returns nil while the clock is verified (or nobody verifies
// it), else the CLOCK_UNVERIFIED Error.
func (r *Registry) clockVerified() error {
	if r.cfg.ClockVerifier == nil {
		return nil
	}
	err := r.cfg.ClockVerifier.Err()
	if err == nil {
		return nil
	}
	var t transient
	if errors.As(err, &t) && t.Transient() {
		return &Error{Code: protocol.CodeClockUnverified, Err: err,
			Message: "this registry cannot verify the store's clock at the moment (is the store failing over?): it grants, " +
				"renews and reclaims nothing until the clock agent verifies it again; other replicas serve"}
	}
	return &Error{Code: protocol.CodeClockUnverified, Err: err,
		Message: "this registry's clock is not verified by its clock agent: it grants, renews and reclaims nothing " +
			"and exits, to be restarted by its supervisor as a fresh process that verifies its clock first; other replicas serve"}
}

// transient is implemented by a ClockVerifier error that may clear by itself
// (such as a store clock that could not be read this round).
type transient interface{ Transient() bool }

// ClockFailed is told once that the ClockVerifier failed, with its error. It
// logs and audits the failure and releases the job locks this replica holds, so
// that another replica runs the jobs; from then on Alloc, Renew, cleanup and
// Ready answer CLOCK_UNVERIFIED (they ask the verifier, which stays failed). The
// server then exits for its supervisor to start a fresh process (DESIGN §8,
// amended in wave 3); it calls ReleaseJobLocks again once its jobs have stopped.
func (r *Registry) ClockFailed(ctx context.Context, err error) {
	r.log.Error("the clock check failed: this registry grants, renews and reclaims nothing, hands back its job locks "+
		"and stops; a fresh process must verify its clock before it serves", "err", err, "owner", r.cfg.Owner, "delta", r.cfg.ClockDelta)
	r.audit.add(ctx, audit.Entry{Actor: "system", Action: audit.ClockUnverified, Target: "replica:" + r.cfg.Owner, Detail: err.Error()})
	if _, lerr := r.ReleaseJobLocks(ctx); lerr != nil {
		r.log.Warn("hand back the job locks after the clock check failed", "err", lerr)
	}
}

// ReleaseJobLocks deletes every job lock this replica (Config.Owner) holds, at
// once and whatever lock-at-least-for its job asked for, so that another replica
// may take each at its next try; it returns the names released. A lock another
// owner holds is left alone. The error is the first store error; the locks it
// could release before are released.
func (r *Registry) ReleaseJobLocks(ctx context.Context) ([]string, error) {
	locks, err := r.store.Locks(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the job locks: %w", err)
	}
	var released []string
	var errs []error
	for _, l := range locks {
		if l.Owner != r.cfg.Owner {
			continue
		}
		if _, uerr := r.store.Unlock(ctx, l.Name, r.cfg.Owner, 0); uerr != nil {
			errs = append(errs, fmt.Errorf("release the job lock %s: %w", l.Name, uerr))
			continue
		}
		released = append(released, l.Name)
		r.log.Info("released a job lock: the clock check failed", "lock", l.Name)
	}
	return released, errors.Join(errs...)
}
