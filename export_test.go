package idkeeper

import (
	"context"

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
