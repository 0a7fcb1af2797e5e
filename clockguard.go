package idkeeper

import (
	"context"
	"errors"
	"time"
)

// The cluster clock check of DESIGN §8 as the registry sees it: a verifier (the
// server's clock agent monitor) vouches for this replica's clock and the store's;
// once it fails, the replica fails closed for good.

// Bounds of Config.ClockDelta (Δ).
const (
	MinClockDelta = 2 * time.Millisecond
	MaxClockDelta = time.Minute
)

// AuditClockUnverified is the audit action of a replica that failed closed on
// its clock check.
const AuditClockUnverified = "clock.unverified"

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
		return &Error{Code: CodeClockUnverified, Err: err,
			Message: "this registry cannot verify the store's clock at the moment (is the store failing over?): it grants, " +
				"renews and reclaims nothing until the clock agent verifies it again; other replicas serve"}
	}
	return &Error{Code: CodeClockUnverified, Err: err,
		Message: "this registry's clock is not verified by its clock agent: it grants, renews and reclaims nothing " +
			"until it is restarted with a verified clock; other replicas serve"}
}

// transient is implemented by a ClockVerifier error that may clear by itself
// (such as a store clock that could not be read this round).
type transient interface{ Transient() bool }

// ClockFailed is told once that the ClockVerifier failed, with its error. It
// logs and audits the failure and releases the job locks this replica holds, so
// that another replica runs the jobs; from then on Alloc, Renew, cleanup and
// Ready answer CLOCK_UNVERIFIED (they ask the verifier, which stays failed).
func (r *Registry) ClockFailed(ctx context.Context, err error) {
	r.log.Error("the clock check failed: this registry grants, renews and reclaims nothing until it is restarted "+
		"with a verified clock", "err", err, "owner", r.cfg.Owner, "delta", r.cfg.ClockDelta)
	r.audit.add(ctx, AuditEntry{Actor: "system", Action: AuditClockUnverified, Target: "replica:" + r.cfg.Owner, Detail: err.Error()})
	locks, lerr := r.store.Locks(ctx)
	if lerr != nil {
		r.log.Warn("read the job locks to release them after the clock check failed", "err", lerr)
		return
	}
	for _, l := range locks {
		if l.Owner != r.cfg.Owner {
			continue
		}
		if _, uerr := r.store.Unlock(ctx, l.Name, r.cfg.Owner, 0); uerr != nil {
			r.log.Warn("release a job lock after the clock check failed", "lock", l.Name, "err", uerr)
		} else {
			r.log.Info("released a job lock: the clock check failed", "lock", l.Name)
		}
	}
}
