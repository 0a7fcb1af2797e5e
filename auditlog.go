package idkeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// The registry's part of the audit log (issue #10): every lease grant, removal,
// reclaim, revocation, restore after a reset and clock-skew rejection, appended
// through Config.Audit in the background, and the retention job that prunes the
// log and the admin web's ended sessions.

// Auditor appends one entry to the audit log: sealed after the log's head, At
// and RemoteIP kept as given when set. *account.Service satisfies it (account.Service.Audit).
type Auditor interface {
	Audit(ctx context.Context, e audit.Entry) error
}

// SessionPruner deletes the admin web's ended sessions and returns how many;
// *account.Service satisfies it (account.Service.PruneSessions).
type SessionPruner interface {
	PruneSessions(ctx context.Context) (int, error)
}

// Defaults of the audit settings.
const (
	// DefaultAuditRetention is how long audit entries are kept by default: 90 days.
	DefaultAuditRetention = 90 * 24 * time.Hour
	// MinAuditRetention is the shortest Config.AuditRetention.
	MinAuditRetention = time.Hour
	// auditQueueSize is how many audit entries may wait to be written; more are
	// dropped and counted (Observer.AuditDropped), so that a slow store never
	// holds up a grant.
	auditQueueSize = 4096
	// RetentionJob is the name of the retention job's lock.
	RetentionJob = "audit-retention"
	// retentionInterval is the period of the retention job, which first runs a
	// minute after Open (its job lock keeps restarts from running it more often).
	retentionInterval = time.Hour
)

const (
	auditWriteTimeout = 10 * time.Second // one append, retries on conflict included
	auditDropLogEvery = time.Minute      // the most often dropped entries are logged
	auditPruneBatch   = 1000             // entries per PruneAudit call
	auditPruneBatches = 100              // PruneAudit calls per run; the next run goes on
	auditDrainTimeout = 10 * time.Second // Close's wait for the queue
	retentionFirst    = time.Minute      // the retention job's first run after Open
)

// auditLog appends the registry's entries in the background, in order, through an
// Auditor. add never blocks: a full queue drops the entry, counts it and logs at
// most once per auditDropLogEvery. A nil *auditLog records nothing.
type auditLog struct {
	to    Auditor
	log   *slog.Logger
	obs   Observer
	clock Clock

	ch       chan audit.Entry
	stop     chan struct{}
	done     chan struct{}
	started  atomic.Bool
	stopped  atomic.Bool
	stopOnce sync.Once

	mu        sync.Mutex // guards the drop counts
	full      int        // dropped for a full queue (or after Close) since fullAt
	fullAt    time.Time  // when full was last logged
	failed    int        // appends that failed since failedAt
	failedAt  time.Time
	lastError error
}

func newAuditLog(cfg Config) *auditLog {
	if cfg.Audit == nil {
		return nil
	}
	return &auditLog{to: cfg.Audit, log: cfg.Logger, obs: cfg.Observer, clock: cfg.Clock,
		ch: make(chan audit.Entry, auditQueueSize), stop: make(chan struct{}), done: make(chan struct{})}
}

// add queues e: At now when zero, RemoteIP ctx's (audit.WithRemoteIP) when empty.
func (a *auditLog) add(ctx context.Context, e audit.Entry) {
	if a == nil {
		return
	}
	if e.At.IsZero() {
		e.At = a.clock()
	}
	if e.RemoteIP == "" {
		e.RemoteIP = audit.RemoteIPFrom(ctx)
	}
	if !a.stopped.Load() {
		select {
		case a.ch <- e:
			return
		default:
		}
	}
	a.obs.AuditDropped(1)
	a.mu.Lock()
	a.full++
	a.mu.Unlock()
	a.reportDrops(false)
}

// start runs the appender; once.
func (a *auditLog) start() {
	if a == nil || !a.started.CompareAndSwap(false, true) {
		return
	}
	go a.run()
}

// close stops the appender after it wrote what is queued (at most
// auditDrainTimeout), and drops what comes later.
func (a *auditLog) close() {
	if a == nil {
		return
	}
	a.stopOnce.Do(func() {
		a.stopped.Store(true)
		close(a.stop)
		if a.started.Load() {
			<-a.done
		}
		a.reportDrops(true)
	})
}

func (a *auditLog) run() {
	defer close(a.done)
	for {
		select {
		case e := <-a.ch:
			a.write(context.Background(), e)
		case <-a.stop:
			ctx, cancel := context.WithTimeout(context.Background(), auditDrainTimeout)
			defer cancel()
			for {
				select {
				case e := <-a.ch:
					a.write(ctx, e)
				default:
					return
				}
			}
		}
	}
}

func (a *auditLog) write(ctx context.Context, e audit.Entry) {
	ctx, cancel := context.WithTimeout(ctx, auditWriteTimeout)
	defer cancel()
	if err := a.to.Audit(ctx, e); err != nil {
		a.obs.AuditDropped(1)
		a.mu.Lock()
		a.failed++
		a.lastError = err
		a.mu.Unlock()
	}
	a.reportDrops(false)
}

// reportDrops logs the entries dropped since the last report, each cause at most
// once per auditDropLogEvery; final reports whatever is left.
func (a *auditLog) reportDrops(final bool) {
	now := a.clock()
	a.mu.Lock()
	full, failed, lastErr := 0, 0, a.lastError
	if a.full > 0 && (final || a.fullAt.IsZero() || now.Sub(a.fullAt) >= auditDropLogEvery) {
		full, a.full, a.fullAt = a.full, 0, now
	}
	if a.failed > 0 && (final || a.failedAt.IsZero() || now.Sub(a.failedAt) >= auditDropLogEvery) {
		failed, a.failed, a.failedAt = a.failed, 0, now
	}
	a.mu.Unlock()
	if full > 0 {
		a.log.Error("audit entries dropped: the audit queue is full (the store is slow or down) or the registry stopped",
			"dropped", full, "queue", cap(a.ch))
	}
	if failed > 0 {
		a.log.Error("audit entries lost: appending to the audit log failed", "lost", failed, "err", lastErr)
	}
}

// actorOfKey is the audit actor of an API key.
func actorOfKey(id string) string { return "key:" + id }

// auditNodes is ids as an audit target: "node:17", or "nodes:0-99,105,107-110",
// cut at a range boundary to audit.MaxFieldLen bytes with the count of node IDs
// left out.
func auditNodes(ids []NodeID) string {
	if len(ids) == 1 {
		return fmt.Sprintf("node:%d", ids[0])
	}
	sorted := slices.Sorted(slices.Values(ids))
	var b strings.Builder
	b.WriteString("nodes:")
	const room = audit.MaxFieldLen - len(",… (+4096 more)")
	shown := 0
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] <= sorted[j]+1 {
			j++
		}
		r := strconv.Itoa(int(sorted[i]))
		if sorted[j] != sorted[i] {
			r += "-" + strconv.Itoa(int(sorted[j]))
		}
		if b.Len()+1+len(r) > room && j+1 < len(sorted) || b.Len()+1+len(r) > audit.MaxFieldLen {
			fmt.Fprintf(&b, ",… (+%d more)", len(sorted)-shown)
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(r)
		shown += j - i + 1
		i = j + 1
	}
	return b.String()
}

// auditGrant records an Alloc's new grants. A repeated Alloc returns the leases
// the requester holds, which are no grant: a new lease was granted at g.Now with
// a token above known, the highest token this replica knew before the Alloc.
func (r *Registry) auditGrant(ctx context.Context, req AllocRequest, g Grant, known uint64) {
	if r.audit == nil {
		return
	}
	var ids []NodeID
	var lo, hi uint64
	for _, l := range g.Leases {
		if !l.GrantedAt.Equal(g.Now) || l.FencingToken <= known {
			continue
		}
		if len(ids) == 0 || l.FencingToken < lo {
			lo = l.FencingToken
		}
		hi = max(hi, l.FencingToken)
		ids = append(ids, l.NodeID)
	}
	if len(ids) == 0 {
		return
	}
	tokens := fmt.Sprint(lo)
	if hi != lo {
		tokens += "-" + fmt.Sprint(hi)
	}
	r.audit.add(ctx, audit.Entry{Actor: actorOfKey(req.Key.ID), Action: audit.LeaseGrant, Target: auditNodes(ids),
		RemoteIP: req.RemoteIP, Detail: fmt.Sprintf("count %d, tokens %s, requester %s", len(ids), tokens, req.Requester.Key())})
}

// auditRemove records a Remove that released n leases.
func (r *Registry) auditRemove(ctx context.Context, req RemoveRequest, n int) {
	if r.audit == nil || n == 0 {
		return
	}
	upTo := "unknown"
	if !req.MintedUpTo.IsZero() {
		upTo = protocol.Millis(req.MintedUpTo).Format(time.RFC3339Nano)
	}
	r.audit.add(ctx, audit.Entry{Actor: actorOfKey(req.KeyID), Action: audit.LeaseRemove,
		Target: "requester:" + req.Requester.Key(), RemoteIP: req.RemoteIP,
		Detail: fmt.Sprintf("count %d, mintedUpTo %s", n, upTo)})
}

// auditRenew records the leases a Renew restored from receipts after a store
// reset, and the node IDs it found claimed twice.
func (r *Registry) auditRenew(ctx context.Context, req RenewRequest, g Grant) {
	if r.audit == nil {
		return
	}
	if len(g.Restored) > 0 {
		r.audit.add(ctx, audit.Entry{Actor: actorOfKey(req.KeyID), Action: audit.LeaseRestore, Target: auditNodes(g.Restored),
			RemoteIP: req.RemoteIP, Detail: fmt.Sprintf("restored %d from receipts after a store reset, requester %s",
				len(g.Restored), req.Requester.Key())})
	}
	if len(g.Contested) > 0 {
		r.audit.add(ctx, audit.Entry{Actor: actorOfKey(req.KeyID), Action: audit.LeaseRestore, Target: auditNodes(g.Contested),
			RemoteIP: req.RemoteIP, Detail: fmt.Sprintf("contested %d: claimed twice after a store reset, both holders "+
				"stopped, quarantined; requester %s", len(g.Contested), req.Requester.Key())})
	}
}

// auditRevoke records an operator's revocation of l, by ctx's actor (audit.WithActor).
func (r *Registry) auditRevoke(ctx context.Context, l Lease) {
	if r.audit == nil {
		return
	}
	actor := audit.ActorFrom(ctx)
	if actor == "" {
		actor = "system"
	}
	r.audit.add(ctx, audit.Entry{Actor: actor, Action: audit.LeaseRevoke, Target: auditNodes([]NodeID{l.NodeID}),
		Detail: fmt.Sprintf("token %d, requester %s, key %s, expires %s, quarantined until %s", l.FencingToken,
			l.Requester.Key(), l.KeyID, l.ExpiresAt.Format(time.RFC3339Nano), l.ExpiresAt.Add(r.cfg.Grace).Format(time.RFC3339Nano))})
}

// auditSkew records a rejected Alloc; suppressed is how many rejections of the
// requester were not recorded since the previous entry.
func (r *Registry) auditSkew(ctx context.Context, keyID string, who Requester, skew, threshold time.Duration, remoteIP string, suppressed int) {
	if r.audit == nil {
		return
	}
	d := fmt.Sprintf("alloc rejected: client clock behind by %s, more than %s", skew, threshold)
	if suppressed > 0 {
		d += fmt.Sprintf("; %d more skew observations since the previous entry", suppressed)
	}
	r.audit.add(ctx, audit.Entry{Actor: actorOfKey(keyID), Action: audit.SkewReject, Target: "requester:" + who.Key(),
		RemoteIP: remoteIP, Detail: d})
}

// reclaimable returns the node IDs of the leases past their expiry + grace at the
// store's now, for the audit entry of a cleanup run; nil without an audit log, or
// when no lease is past its expiry (Counts.InGrace, which is cheap, says).
func (r *Registry) reclaimable(ctx context.Context) []NodeID {
	if r.audit == nil {
		return nil
	}
	c, err := r.store.Counts(ctx)
	if err != nil || c.InGrace == 0 {
		return nil
	}
	ls, err := r.store.Leases(ctx)
	if err != nil {
		return nil
	}
	now, err := r.store.Now(ctx)
	if err != nil {
		return nil
	}
	var ids []NodeID
	for _, l := range ls {
		if l.ExpiresAt.Add(r.cfg.Grace).Before(now) {
			ids = append(ids, l.NodeID)
		}
	}
	return ids
}

// auditReclaim records a cleanup run that reclaimed n leases; seen are the node
// IDs past expiry + grace when it began (reclaimable).
func (r *Registry) auditReclaim(ctx context.Context, n int, seen []NodeID) {
	if r.audit == nil || n == 0 {
		return
	}
	target, d := "nodes:?", fmt.Sprintf("count %d, expired past the grace of %s", n, r.cfg.Grace)
	if len(seen) > 0 {
		target = auditNodes(seen)
		if len(seen) != n {
			d += fmt.Sprintf("; the %d node IDs listed were past it when the run began", len(seen))
		}
	}
	r.audit.add(ctx, audit.Entry{Actor: "system", Action: audit.LeaseReclaim, Target: target, Detail: d})
}

// PruneAdminRecords runs the retention job once under its job lock: it deletes
// the audit entries older than Config.AuditRetention (Config.AdminStore; up to
// 100,000 a run, the next run goes on), the admin web's ended sessions
// (Config.Sessions) and the lease history records that ended more than
// Config.HistoryRetention ago (pruneHistory). ran is false when another replica
// holds the lock.
func (r *Registry) PruneAdminRecords(ctx context.Context) (entries, sessions int, ran bool, err error) {
	started, held, ok, history := r.cfg.Clock(), Lock{}, false, 0
	defer func() {
		r.noteJob(RetentionJob, started, ran, err,
			fmt.Sprintf("pruned %d audit entries, %d ended sessions and %d lease history records", entries, sessions, history),
			heldBy(held))
	}()
	atMost, atLeast := jobLockTimes(retentionInterval)
	if held, ok, err = r.store.TryLock(ctx, RetentionJob, r.cfg.Owner, atMost); err != nil || !ok {
		return 0, 0, false, r.storeErr(err)
	}
	defer func() {
		if _, uerr := r.store.Unlock(ctx, RetentionJob, r.cfg.Owner, atLeast); uerr != nil {
			r.log.Warn("release job lock", "job", RetentionJob, "err", uerr)
		}
	}()
	var errs []error
	if r.cfg.AdminStore != nil {
		before := r.cfg.Clock().Add(-r.cfg.AuditRetention)
		for range auditPruneBatches {
			n, perr := r.cfg.AdminStore.PruneAudit(ctx, before, auditPruneBatch)
			entries += n
			if perr != nil {
				errs = append(errs, fmt.Errorf("prune the audit log: %w", perr))
			}
			if perr != nil || n < auditPruneBatch {
				break
			}
		}
	}
	if r.cfg.Sessions != nil {
		n, serr := r.cfg.Sessions.PruneSessions(ctx)
		sessions = n
		if serr != nil {
			errs = append(errs, fmt.Errorf("prune the admin sessions: %w", serr))
		}
	}
	history, herr := r.pruneHistory(ctx)
	if herr != nil {
		errs = append(errs, fmt.Errorf("prune the lease history: %w", herr))
	}
	if entries > 0 || sessions > 0 || history > 0 {
		r.log.Info("retention job", "auditEntriesPruned", entries, "retention", r.cfg.AuditRetention, "sessionsPruned", sessions,
			"historyPruned", history, "historyRetention", r.cfg.HistoryRetention)
	}
	return entries, sessions, true, r.storeErr(errors.Join(errs...))
}
