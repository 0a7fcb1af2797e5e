package idkeeper

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// SkewLevelFor classifies skew = server now − client now against the grace period
// (DESIGN §3): above grace (the client is behind by more than the grace that covers
// it) is SkewReject, |skew| above grace/2 is SkewWarn. With grace 0 nothing is
// rejected; every skew above 0 warns.
func SkewLevelFor(skew, grace time.Duration) SkewLevel {
	switch {
	case grace > 0 && skew > grace:
		return SkewReject
	case skew.Abs() > grace/2:
		return SkewWarn
	}
	return SkewOK
}

// The clock-skew record (the last observation per requester, SkewStore) and the
// warning log obey these rules, kept per requester in the registry's memory
// (skewBook), measured on Config.Clock:
//
//   - A warning or rejection is written to the store; a healthy observation is
//     written only when this replica wrote a warning or rejection for the requester
//     before (it replaces it, so an alert on the record clears). A requester that
//     was never skewed costs no write and no memory.
//   - One requester causes at most one store write and one warning line per
//     skewEvery. An observation held back by the limit is kept (the newest wins)
//     and written once the minute is over: by the requester's next observation, or
//     by any later observation of another requester, which writes up to
//     skewFlushPerCall held-back records that are due. A warning line held back is
//     counted, and the next line says how many were ("suppressed").
//   - A rejected Alloc is answered every time: only the write and the log line are
//     limited.
//   - The memory is bounded: at most skewBookSize requesters. Entries that no
//     longer matter (no held-back record, their minute over, and what they wrote
//     healthy or lapsed in the store) are pruned at most once per skewEvery, or
//     when the book is full; a full book then evicts the least recently written
//     entries whose minute is over (their record lapses in the store by itself).
//     Only when more requesters than that were written or logged within the last
//     minute is a new one not recorded; that is counted and logged once a minute.
//
// The memory is this replica's: a warning another replica wrote (or this one wrote
// before a restart) is not cleared here; it lapses with its TTL (lease + grace),
// or is replaced when the replica that wrote it sees the requester again. Knowing
// would cost a store read on every healthy Alloc and Renew.
const (
	skewEvery        = time.Minute
	skewBookSize     = 10_000
	skewFlushPerCall = 4
	// skewUnknown is the level of an entry whose last write failed: the store may
	// hold anything, so a healthy observation is written.
	skewUnknown SkewLevel = "unknown"
)

// checkSkew measures, logs, records and judges one client clock reading. It returns a
// CLOCK_SKEW_TOO_LARGE Error for Alloc when the skew is rejected, every time: the
// limits of the log and the record (see skewEvery) never change the answer. A
// rejection is audited (as keyID's) when it is logged: at most once a minute per
// requester.
func (r *Registry) checkSkew(ctx context.Context, op, keyID string, who Requester, now, client time.Time, remoteIP string) error {
	grace := r.cfg.Grace
	skew := now.Sub(protocol.Millis(client))
	level := SkewLevelFor(skew, grace)
	r.obs.Skew(op, skew, level)
	rejected := level == SkewReject && op == "alloc"
	obs := SkewObservation{Requester: who, Skew: skew, Threshold: grace, Level: level, ObservedAt: now, RemoteIP: remoteIP, Operation: op}
	a := r.skew.observe(obs, r.cfg.Clock(), r.skewTTL())
	if a.log {
		attrs := []any{"op", op, "requester", who, "skew", skew, "threshold", grace, "remoteIp", remoteIP}
		if a.suppressed > 0 {
			attrs = append(attrs, "suppressed", a.suppressed)
		}
		if rejected {
			r.log.Warn("clock skew too large: alloc rejected", attrs...)
			r.auditSkew(ctx, keyID, who, skew, grace, remoteIP, a.suppressed)
		} else {
			r.log.Warn("clock skew", attrs...)
		}
	}
	if a.dropped > 0 {
		r.log.Warn("clock skew observations not recorded: too many requesters with a skewed clock in the last minute",
			"count", a.dropped, "limit", r.skew.limit())
	}
	if a.write != nil {
		r.writeSkew(ctx, *a.write)
	}
	if len(a.flush) > 0 {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		for _, o := range a.flush {
			r.writeSkew(fctx, o)
		}
		cancel()
	}
	if !rejected {
		return nil
	}
	return &Error{
		Code: protocol.CodeClockSkewTooLarge,
		Message: "the client's clock is behind the server's by " + skew.String() +
			", more than the cleanup grace period of " + grace.String() + "; sync the client's clock with NTP",
		Details: map[string]any{
			"skewMs":      skew.Milliseconds(),
			"thresholdMs": grace.Milliseconds(),
			"action":      "sync the client's clock with NTP",
		},
	}
}

// skewTTL is how long a skew record is kept: lease + grace (DESIGN §3).
func (r *Registry) skewTTL() time.Duration { return r.cfg.LeaseDuration + r.cfg.Grace }

// writeSkew stores o. A failed write is logged and kept for a later retry.
func (r *Registry) writeSkew(ctx context.Context, o SkewObservation) {
	if err := r.store.RecordSkew(ctx, o, r.skewTTL()); err != nil {
		r.log.Warn("record clock skew", "requester", o.Requester, "err", err)
		r.skew.failed(o)
		return
	}
	if o.Level == SkewOK {
		r.log.Info("clock skew healthy again: the recorded warning is replaced", "op", o.Operation,
			"requester", o.Requester, "skew", o.Skew, "remoteIp", o.RemoteIP)
	}
}

// flushSkew writes the held-back skew records that are due, up to n, as any
// observation does on its way: for a periodic job to call so that a held-back
// record is written even when no client calls.
func (r *Registry) flushSkew(ctx context.Context, n int) int {
	due := r.skew.takeDue(r.cfg.Clock(), r.skewTTL(), n)
	for _, o := range due {
		r.writeSkew(ctx, o)
	}
	return len(due)
}

// skewBook is the registry's per-requester memory of the skew record: what this
// replica wrote, when, what it holds back, and when it last logged. Its zero value
// is ready; it is safe for concurrent use.
type skewBook struct {
	mu        sync.Mutex
	size      int // the most requesters kept; 0: skewBookSize
	entries   map[string]*skewEntry
	due       skewQueue // entries holding an observation back, by when they may write
	prunedAt  time.Time
	fullAt    time.Time // when making room last failed; the next try waits a second
	dropped   int       // observations not recorded for lack of room since droppedAt
	droppedAt time.Time
}

type skewEntry struct {
	key        string
	stored     SkewLevel        // the level this replica last wrote; "" none, skewUnknown after a failure
	storedAt   time.Time        // when; zero: never
	lapses     time.Time        // when that record lapses in the store
	pending    *SkewObservation // the newest observation held back by the write limit
	queued     bool             // the entry is in the due queue
	loggedAt   time.Time        // the last warning line; zero: none
	suppressed int              // warning lines held back since loggedAt
}

// skewAction is what one observation makes the registry do, outside the lock.
type skewAction struct {
	log        bool
	suppressed int               // warning lines held back since the previous one
	write      *SkewObservation  // the observation itself, to write now
	flush      []SkewObservation // held-back records now due
	dropped    int               // > 0: log that this many observations were not recorded
}

// bad reports whether a record of this level may be a warning or a rejection.
func (l SkewLevel) bad() bool { return l == SkewWarn || l == SkewReject || l == skewUnknown }

func (b *skewBook) limit() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sizeLocked()
}

func (b *skewBook) sizeLocked() int {
	if b.size > 0 {
		return b.size
	}
	return skewBookSize
}

// observe applies the rules to observation o made at t (registry clock); ttl is the
// record's.
func (b *skewBook) observe(o SkewObservation, t time.Time, ttl time.Duration) (a skewAction) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.entries == nil {
		b.entries = map[string]*skewEntry{}
	}
	if b.prunedAt.IsZero() {
		b.prunedAt = t
	} else if t.Sub(b.prunedAt) >= skewEvery {
		b.prune(t)
	}
	key := o.Requester.Key()
	e := b.entries[key]
	if e == nil && o.Level.bad() {
		if e = b.admit(key, t); e == nil {
			b.dropped++
			if b.droppedAt.IsZero() || t.Sub(b.droppedAt) >= skewEvery {
				a.dropped, b.dropped, b.droppedAt = b.dropped, 0, t
			}
		}
	}
	if e != nil {
		if o.Level.bad() {
			if e.loggedAt.IsZero() || t.Sub(e.loggedAt) >= skewEvery {
				a.log, a.suppressed = true, e.suppressed
				e.loggedAt, e.suppressed = t, 0
			} else {
				e.suppressed++
			}
		}
		switch {
		case !o.Level.bad() && !e.stored.bad():
			// The store holds this replica's healthy record, or none from it.
			e.pending = nil
		case e.storedAt.IsZero() || t.Sub(e.storedAt) >= skewEvery:
			a.write = &o
			e.record(o.Level, t, ttl)
		default:
			e.pending = &o
			if !e.queued {
				heap.Push(&b.due, skewDue{e: e, at: e.storedAt.Add(skewEvery)})
				e.queued = true
			}
		}
	}
	a.flush = b.takeDueLocked(t, ttl, skewFlushPerCall)
	return a
}

func (e *skewEntry) record(l SkewLevel, t time.Time, ttl time.Duration) {
	e.stored, e.storedAt, e.lapses, e.pending = l, t, t.Add(ttl), nil
}

// busy reports whether the entry still limits or holds anything at t.
func (e *skewEntry) busy(t time.Time) bool {
	return e.pending != nil || (!e.storedAt.IsZero() && t.Sub(e.storedAt) < skewEvery) ||
		(!e.loggedAt.IsZero() && t.Sub(e.loggedAt) < skewEvery)
}

// admit adds an entry for key, making room when the book is full; nil when there
// is none.
func (b *skewBook) admit(key string, t time.Time) *skewEntry {
	size := b.sizeLocked()
	if len(b.entries) >= size {
		if !b.fullAt.IsZero() && t.Sub(b.fullAt) < time.Second {
			return nil // every entry was busy a moment ago: spare the scan
		}
		b.prune(t)
		if len(b.entries) > size*3/4 {
			b.evict(t, size*3/4)
		}
		if len(b.entries) >= size {
			b.fullAt = t
			return nil
		}
	}
	e := &skewEntry{key: key}
	b.entries[key] = e
	return e
}

// prune drops the entries that no longer matter: nothing held back, their minute
// over, and their record healthy or lapsed.
func (b *skewBook) prune(t time.Time) {
	b.prunedAt = t
	for k, e := range b.entries {
		if !e.busy(t) && (!e.stored.bad() || !t.Before(e.lapses)) {
			delete(b.entries, k)
		}
	}
}

// evict drops the least recently written entries whose minute is over until at
// most keep remain. An evicted warning is no longer cleared here: it lapses.
func (b *skewBook) evict(t time.Time, keep int) {
	var idle []*skewEntry
	for _, e := range b.entries {
		if !e.busy(t) {
			idle = append(idle, e)
		}
	}
	slices.SortFunc(idle, func(x, y *skewEntry) int { return x.storedAt.Compare(y.storedAt) })
	for _, e := range idle {
		if len(b.entries) <= keep {
			break
		}
		delete(b.entries, e.key)
	}
}

// failed notes that writing o failed: the store may hold anything, and o is held
// back for a retry unless a newer observation is.
func (b *skewBook) failed(o SkewObservation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entries[o.Requester.Key()]
	if e == nil {
		return
	}
	e.stored = skewUnknown
	if e.pending == nil {
		e.pending = &o
	}
	if !e.queued {
		heap.Push(&b.due, skewDue{e: e, at: e.storedAt.Add(skewEvery)})
		e.queued = true
	}
}

// takeDue returns up to n held-back observations whose minute is over, as
// written.
func (b *skewBook) takeDue(t time.Time, ttl time.Duration, n int) []SkewObservation {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.takeDueLocked(t, ttl, n)
}

func (b *skewBook) takeDueLocked(t time.Time, ttl time.Duration, n int) []SkewObservation {
	var out []SkewObservation
	for len(b.due) > 0 && len(out) < n && !b.due[0].at.After(t) {
		d := heap.Pop(&b.due).(skewDue)
		e := d.e
		e.queued = false
		switch {
		case b.entries[e.key] != e || e.pending == nil:
			// Evicted, written by the requester's own observation, or superseded.
		case t.Sub(e.storedAt) < skewEvery:
			// Written again since it was queued: wait for that write's minute.
			heap.Push(&b.due, skewDue{e: e, at: e.storedAt.Add(skewEvery)})
			e.queued = true
		default:
			o := *e.pending
			e.record(o.Level, t, ttl)
			out = append(out, o)
		}
	}
	return out
}

// skewDue is an entry of the due queue.
type skewDue struct {
	e  *skewEntry
	at time.Time
}

// skewQueue is a min-heap of skewDue by at.
type skewQueue []skewDue

func (q skewQueue) Len() int           { return len(q) }
func (q skewQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q skewQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *skewQueue) Push(x any)        { *q = append(*q, x.(skewDue)) }
func (q *skewQueue) Pop() any {
	old := *q
	d := old[len(old)-1]
	*q = old[:len(old)-1]
	return d
}
