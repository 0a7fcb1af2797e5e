package idkeeper

import (
	"context"
	"time"

	"github.com/idkeeper/idkeeper/audit"
)

// SetSkewBookSize sets how many requesters r's clock-skew book keeps.
func SetSkewBookSize(r *Registry, n int) {
	r.skew.mu.Lock()
	defer r.skew.mu.Unlock()
	r.skew.size = n
}

// SkewBookLen is how many requesters r's clock-skew book holds.
func SkewBookLen(r *Registry) int {
	r.skew.mu.Lock()
	defer r.skew.mu.Unlock()
	return len(r.skew.entries)
}

// FlushSkew writes up to n held-back skew records that are due.
func FlushSkew(ctx context.Context, r *Registry, n int) int { return r.flushSkew(ctx, n) }

// SkewEvery is the per-requester budget of skew writes and warning lines.
const SkewEvery = skewEvery

// SetAuditQueue makes r's audit queue hold n entries; call it before Open.
func SetAuditQueue(r *Registry, n int) {
	if r.audit != nil {
		r.audit.ch = make(chan audit.Entry, n)
	}
}

// SetLoginThrottleCapacity makes a's login throttle remember at most n entries.
func SetLoginThrottleCapacity(a *Accounts, n int) {
	a.throttle.mu.Lock()
	defer a.throttle.mu.Unlock()
	a.throttle.capacity = n
}

// LoginThrottleLen is how many entries a's login throttle holds.
func LoginThrottleLen(a *Accounts) int {
	a.throttle.mu.Lock()
	defer a.throttle.mu.Unlock()
	return len(a.throttle.seen)
}

// LoginSlowDelay is the slow-down of a login of an account with n failures.
func LoginSlowDelay(n int) time.Duration { return slowDelay(n) }

// LoginQueueLen is how many slowed logins of account wait for their turn in a.
func LoginQueueLen(a *Accounts, account string) int {
	a.throttle.mu.Lock()
	defer a.throttle.mu.Unlock()
	if c := a.throttle.seen[throttleKey{'u', account, ""}]; c != nil {
		return c.waiting
	}
	return 0
}
