package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// Scheduled and manual backups (issue #12): a Job writes backups into a Folder on
// a schedule and on demand, one at a time under a job lock in the store (so that
// of several replicas sharing a store one takes each scheduled backup), applies
// the retention after every backup, and records every run in the audit log and
// through an observer (the server's metrics).

// JobName names the backup job's lock in the store (idkeeper.LockStore).
const JobName = "backup"

// Audit actions of the backup job.
const (
	AuditCreate       = "backup.create"        // a backup was written; Target "backup:NAME"
	AuditCreateFailed = "backup.create_failed" // a backup failed; Detail says why
	AuditDelete       = "backup.delete"        // a backup was deleted, by a person or by the retention
)

// DefaultLockFor is the backup job lock's lock-at-most-for: a replica that stops
// in the middle of a backup holds the lock no longer; a backup that takes longer
// may meet another one (harmless: two files).
const DefaultLockFor = time.Hour

// maxDedupWindow bounds the lock-at-least-for of a scheduled run: every replica
// reaches a schedule's time within the clock agreement the registry demands, so
// a minute keeps all but the first from backing up the same time again, and a
// manual backup waits at most that long after a scheduled one.
const maxDedupWindow = time.Minute

// Schedule tells when the job runs: the first time strictly after t, or the zero
// time for never. A cron schedule of github.com/robfig/cron/v3 is one; the job
// asks it in UTC.
type Schedule interface {
	Next(t time.Time) time.Time
}

// Locker takes and releases job locks: idkeeper.LockStore's methods.
type Locker interface {
	TryLock(ctx context.Context, name, owner string, atMostFor time.Duration) (idkeeper.Lock, bool, error)
	Unlock(ctx context.Context, name, owner string, atLeastFor time.Duration) (bool, error)
}

// JobConfig configures a Job. Folder.Dir, Store, Locker and Owner are required;
// a zero field of the others means its default.
type JobConfig struct {
	Folder Folder
	Store  snapshot.Store
	// StoreKind names the store in the backups' headers: "bolt", "redis".
	StoreKind string
	Locker    Locker
	Owner     string // this replica, in the job lock (idkeeper.Config.Owner)
	// Schedule, when set, runs a backup at each of its times (Run); Spec is how it
	// was written, for people. Nil: manual backups only.
	Schedule Schedule
	Spec     string
	// Schedules, when set, is where the schedule is kept (the admin web changes
	// it there, idkeeper.BackupSchedule): Run reads it when it starts and at every
	// wake, at most PollEvery apart, and runs what it read (an "off" or a text
	// that does not parse: no scheduled backups); Schedule and Spec then hold only
	// until the first read answers. A failed read keeps the schedule last read.
	Schedules idkeeper.BackupScheduleStore
	// PollEvery bounds the wait between two wakes of Run: a clock that stepped,
	// and a changed schedule, are noticed that soon; 0: a minute.
	PollEvery time.Duration
	// ScheduleChanged, when set, is told of every schedule Refresh reads from
	// Schedules that differs from the one before: its Spec, "" for none. It is
	// called under the Job's lock, in the order of the changes: it must not call
	// the Job.
	ScheduleChanged func(spec string)
	// Keep and MaxAge are the retention (Folder.Prune) applied after every
	// backup: the newest Keep backups (0: no limit by count), none older than
	// MaxAge (0: no limit by age), never the newest.
	Keep   int
	MaxAge time.Duration
	// Audit records every run and deletion; nil: none.
	Audit idkeeper.Auditor
	// Observe is called after every run that took the lock, failed or not (the
	// server's metrics); nil: none.
	Observe func(Run)
	Logger  *slog.Logger     // nil: slog.Default()
	Clock   func() time.Time // nil: time.Now
	// LockFor is the job lock's lock-at-most-for; 0: DefaultLockFor.
	LockFor time.Duration
	// Sleep waits d or until ctx ends (its error); nil: a timer. Tests move a fake
	// clock instead.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Run is one run of the job that took the lock.
type Run struct {
	Actor    string // "system" for a scheduled run, "user:NAME" or "key:ID" for a manual one
	Started  time.Time
	Duration time.Duration
	Entry    Entry    // the backup written; zero when Err is set
	Pruned   []string // the backups the retention deleted
	Err      error    // the failure, nil on success
}

// OK reports whether the run wrote its backup.
func (r Run) OK() bool { return r.Err == nil }

// Status is what a Job shows of itself.
type Status struct {
	Dir  string
	Gzip bool
	Spec string    // "" without a schedule
	Next time.Time // the next scheduled run; zero without a schedule
	// Version is the version of the stored schedule in force (JobConfig.Schedules);
	// 0 before the first read or without one.
	Version  uint64
	Keep     int
	MaxAge   time.Duration
	Last     *Run      // the last run on this replica; nil before the first
	LastGood time.Time // when the last successful run on this replica started; zero before one
}

// Job runs the backups of one server. Safe for concurrent use.
type Job struct {
	cfg JobConfig
	log *slog.Logger

	mu       sync.Mutex
	running  bool // a run of this Job holds the lock, or is taking it
	sched    Schedule
	spec     string
	version  uint64 // of the stored schedule read last; 0: none read
	readErr  error  // the last read of Schedules failed
	changes  uint64 // how many times Refresh replaced the schedule
	reads    uint64 // Refresh's reads begun; applied is the latest one applied:
	applied  uint64 // an older read that ends after a newer is dropped
	next     time.Time
	last     *Run
	lastGood time.Time
}

// NewJob returns the job of cfg. It does no I/O. Errors: a missing Folder.Dir,
// Store, Locker or Owner, a negative Keep, MaxAge or LockFor.
func NewJob(cfg JobConfig) (*Job, error) {
	switch {
	case cfg.Folder.Dir == "":
		return nil, errors.New("backup: JobConfig.Folder.Dir is required")
	case cfg.Store == nil:
		return nil, errors.New("backup: JobConfig.Store is required")
	case cfg.Locker == nil:
		return nil, errors.New("backup: JobConfig.Locker is required")
	case cfg.Owner == "":
		return nil, errors.New("backup: JobConfig.Owner is required")
	case cfg.Keep < 0 || cfg.MaxAge < 0 || cfg.LockFor < 0 || cfg.PollEvery < 0:
		return nil, errors.New("backup: JobConfig.Keep, MaxAge, LockFor and PollEvery must not be negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.LockFor == 0 {
		cfg.LockFor = DefaultLockFor
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.StoreKind == "" {
		cfg.StoreKind = "store"
	}
	if cfg.PollEvery == 0 {
		cfg.PollEvery = time.Minute
	}
	if cfg.Schedule == nil {
		cfg.Spec = ""
	}
	return &Job{cfg: cfg, log: cfg.Logger, sched: cfg.Schedule, spec: cfg.Spec}, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Folder is the job's folder.
func (j *Job) Folder() Folder { return j.cfg.Folder }

// Status returns the job's settings, its next scheduled run and its last run.
func (j *Job) Status() Status {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := Status{Dir: j.cfg.Folder.Dir, Gzip: j.cfg.Folder.Gzip, Spec: j.spec, Version: j.version, Keep: j.cfg.Keep,
		MaxAge: j.cfg.MaxAge, LastGood: j.lastGood}
	if j.sched != nil {
		// Run's next time, or, before Run or while a run ends, the schedule's.
		if now := j.cfg.Clock(); j.next.After(now) {
			st.Next = j.next
		} else {
			st.Next = j.sched.Next(now.UTC())
		}
	}
	if j.last != nil {
		r := *j.last
		st.Last = &r
	}
	return st
}

// Run runs the scheduled backups until ctx ends: at each time of the schedule
// (UTC) it takes the job lock and writes a backup, or skips the time when another
// replica holds the lock. A time missed while a backup ran, or while the clock
// jumped, is skipped, not made up. With JobConfig.Schedules it follows the
// stored schedule, read at every wake, and waits for a change while that is off
// or has no time left; without, it returns at once without a schedule, and when
// the schedule has no time left.
func (j *Job) Run(ctx context.Context) {
	if j.cfg.Schedule == nil && j.cfg.Schedules == nil {
		return
	}
	j.Refresh(ctx)
	for ctx.Err() == nil {
		j.mu.Lock()
		sched, spec, seen := j.sched, j.spec, j.changes
		var next time.Time
		if sched != nil {
			next = sched.Next(j.cfg.Clock().UTC())
		}
		j.next = next
		j.mu.Unlock()
		if next.IsZero() {
			if sched != nil {
				j.log.Error("the backup schedule has no time left: no more scheduled backups", "schedule", spec)
			}
			if j.cfg.Schedules == nil {
				return
			}
			if !j.waitChange(ctx, seen) {
				return
			}
			continue
		}
		changed := false
		for {
			d := next.Sub(j.cfg.Clock())
			if d <= 0 {
				break
			}
			// Wake at least every PollEvery: a clock that stepped, or a changed
			// schedule, is noticed.
			if err := j.cfg.Sleep(ctx, min(d, j.cfg.PollEvery)); err != nil {
				return
			}
			if changed = j.changedSince(ctx, seen); changed {
				break
			}
		}
		if !changed {
			j.scheduled(ctx, sched, next)
		}
	}
}

// waitChange sleeps PollEvery at a time until the schedule changed since the
// count seen; false when ctx ended first.
func (j *Job) waitChange(ctx context.Context, seen uint64) bool {
	for {
		if err := j.cfg.Sleep(ctx, j.cfg.PollEvery); err != nil {
			return false
		}
		if j.changedSince(ctx, seen) {
			return true
		}
	}
}

// changedSince refreshes the schedule and reports whether it was replaced since
// the count seen, by this refresh or another (Refresh after a change in the
// admin web).
func (j *Job) changedSince(ctx context.Context, seen uint64) bool {
	j.Refresh(ctx)
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.changes != seen
}

// Refresh reads the stored schedule (JobConfig.Schedules) and reports whether
// it differs from the one in force, which it then replaces; Run follows it at
// once. Run calls it at every wake; the admin web after it changed the
// schedule, so that this replica need not wait for its next wake. A failed read
// is logged once, until a read answers again, and keeps the schedule in force; a
// stored text that does not parse is logged and means no scheduled backups.
// Without Schedules it does nothing.
func (j *Job) Refresh(ctx context.Context) bool {
	if j.cfg.Schedules == nil {
		return false
	}
	j.mu.Lock()
	j.reads++
	read := j.reads
	j.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	rec, err := j.cfg.Schedules.BackupSchedule(rctx)
	cancel()
	j.mu.Lock()
	if read < j.applied {
		j.mu.Unlock()
		return false
	}
	j.applied = read
	if err != nil {
		first, spec := j.readErr == nil, j.spec
		j.readErr = err
		j.mu.Unlock()
		if first && ctx.Err() == nil {
			j.log.Warn("cannot read the backup schedule from the store: the one read last stays in force", "schedule", spec, "err", err)
		}
		return false
	}
	j.readErr = nil
	if rec.Version != 0 && rec.Version == j.version {
		j.mu.Unlock()
		return false
	}
	var sched Schedule
	spec := ""
	if !rec.Off() {
		if sched, spec, err = ParseSchedule(rec.Spec, j.cfg.Clock()); err != nil {
			j.log.Error("the stored backup schedule is not one: no scheduled backups until it is changed (admin web, Backups)",
				"version", rec.Version, "err", err)
			sched, spec = nil, ""
		}
	}
	changed := spec != j.spec || (sched == nil) != (j.sched == nil)
	j.sched, j.spec, j.version = sched, spec, rec.Version
	if changed {
		j.changes++
		// Under the lock, so that the observer sees the changes in their order.
		if j.cfg.ScheduleChanged != nil {
			j.cfg.ScheduleChanged(spec)
		}
	}
	j.mu.Unlock()
	if changed {
		if spec == "" {
			j.log.Info("backup schedule from the store: off, manual backups only", "version", rec.Version, "by", rec.UpdatedBy)
		} else {
			j.log.Info("backup schedule from the store", "schedule", spec, "next", sched.Next(j.cfg.Clock().UTC()),
				"version", rec.Version, "by", rec.UpdatedBy)
		}
	}
	return changed
}

// keepUntil returns until when the job lock of the scheduled run at is kept
// (lock-at-least-for): at + nine tenths of the gap to the schedule's next time,
// at most maxDedupWindow. It is counted from the schedule's time, not from when
// the lock was taken, so that a run that started late does not hold off the next.
func keepUntil(sched Schedule, at time.Time) time.Time {
	window := maxDedupWindow
	if after := sched.Next(at); !after.IsZero() {
		window = min(after.Sub(at)*9/10, maxDedupWindow)
	}
	return at.Add(window)
}

// scheduled is the run of the scheduled time at of sched.
func (j *Job) scheduled(ctx context.Context, sched Schedule, at time.Time) {
	_, err := j.run(ctx, "system", keepUntil(sched, at))
	var busy *BusyError
	if errors.As(err, &busy) {
		j.log.Info("scheduled backup skipped: another run holds the job lock", "job", JobName, "holder", busy.Lock.Owner,
			"until", busy.Lock.Until)
	}
}

// BusyError is the error of a run that found the job lock held: another backup
// runs, or one ran within the lock-at-least-for of a scheduled run.
type BusyError struct{ Lock idkeeper.Lock }

func (e *BusyError) Error() string {
	if e.Lock.Until.IsZero() {
		return "a backup is running on this replica: try again when it is done"
	}
	return fmt.Sprintf("a backup is running or has just run: the job lock %q is held by %s until %s; try again then",
		JobName, e.Lock.Owner, e.Lock.Until.UTC().Format(time.RFC3339))
}

// Now writes a backup at once, for actor (ctx's audit.ActorFrom when empty,
// else "system"), under the job lock, and applies the retention. Errors: a
// CONFLICT *idkeeper.Error wrapping a *BusyError when the lock is held; the
// store's and the folder's, as the run records them.
func (j *Job) Now(ctx context.Context, actor string) (Run, error) {
	if actor == "" {
		actor = audit.ActorFrom(ctx)
	}
	if actor == "" {
		actor = "system"
	}
	r, err := j.run(ctx, actor, time.Time{})
	var busy *BusyError
	if errors.As(err, &busy) {
		return r, &idkeeper.Error{Code: protocol.CodeConflict, Message: busy.Error(), Err: busy}
	}
	return r, err
}

// run takes the lock, writes a backup, releases the lock (kept until keep, by the
// store's clock; zero: not kept), prunes, and records the run.
func (j *Job) run(ctx context.Context, actor string, keep time.Time) (Run, error) {
	j.mu.Lock()
	if j.running {
		j.mu.Unlock()
		return Run{Actor: actor}, &BusyError{Lock: idkeeper.Lock{Name: JobName, Owner: j.cfg.Owner}}
	}
	j.running = true
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		j.running = false
		j.mu.Unlock()
	}()
	held, ok, err := j.cfg.Locker.TryLock(ctx, JobName, j.cfg.Owner, j.cfg.LockFor)
	if err == nil && !ok && held.Owner == j.cfg.Owner {
		// This replica's own lock, kept after a scheduled run so that the other
		// replicas skip that time (no run of this Job holds it now): take it
		// again, and keep it at least as long when done.
		if _, err = j.cfg.Locker.Unlock(ctx, JobName, j.cfg.Owner, 0); err == nil {
			keep = later(keep, held.Until)
			held, ok, err = j.cfg.Locker.TryLock(ctx, JobName, j.cfg.Owner, j.cfg.LockFor)
		}
	}
	if err != nil {
		r := Run{Actor: actor, Started: j.cfg.Clock(), Err: fmt.Errorf("take the job lock: %w", err)}
		j.finish(ctx, r)
		return r, r.Err
	}
	if !ok {
		return Run{Actor: actor}, &BusyError{Lock: held}
	}
	r := Run{Actor: actor, Started: j.cfg.Clock()}
	var e Entry
	e, _, r.Err = j.cfg.Folder.Create(ctx, j.cfg.Store, Source{Store: j.cfg.StoreKind}, r.Started)
	r.Duration = j.cfg.Clock().Sub(r.Started)
	if r.Duration > j.cfg.LockFor {
		j.log.Warn("the backup ran past its job lock: another replica may have started one meanwhile", "job", JobName,
			"took", r.Duration, "lockFor", j.cfg.LockFor)
	}
	var atLeast time.Duration
	if !keep.IsZero() {
		atLeast = max(keep.Sub(held.LockedAt), 0)
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	if _, uerr := j.cfg.Locker.Unlock(uctx, JobName, j.cfg.Owner, atLeast); uerr != nil {
		j.log.Warn("release job lock", "job", JobName, "err", uerr)
	}
	cancel()
	if r.Err == nil {
		r.Entry = e
		r.Pruned = j.prune(ctx)
	}
	j.finish(ctx, r)
	return r, r.Err
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// prune applies the retention, auditing each deletion; a failure is logged.
func (j *Job) prune(ctx context.Context) []string {
	if j.cfg.Keep == 0 && j.cfg.MaxAge == 0 {
		return nil
	}
	gone, err := j.cfg.Folder.Prune(j.cfg.Keep, j.cfg.MaxAge, j.cfg.Clock())
	if err != nil {
		j.log.Error("backup retention: deleting old backups failed", "dir", j.cfg.Folder.Dir, "err", err)
	}
	var names []string
	for _, e := range gone {
		names = append(names, e.Name)
		j.audit(ctx, audit.Entry{Actor: "system", Action: AuditDelete, Target: "backup:" + e.Name,
			Detail: fmt.Sprintf("retention (keep %d, max age %s): taken %s, %d bytes", j.cfg.Keep, j.cfg.MaxAge,
				e.TakenAt.Format(time.RFC3339), e.Size)})
	}
	if len(names) > 0 {
		j.log.Info("backup retention deleted old backups", "deleted", names, "keep", j.cfg.Keep, "maxAge", j.cfg.MaxAge)
	}
	return names
}

// finish records a run that took the lock (or failed to): the log, the audit
// log, the observer and Status. A run cut short by ctx (the server stops) is
// logged as a warning.
func (j *Job) finish(ctx context.Context, r Run) {
	j.mu.Lock()
	j.last = &r
	if r.OK() {
		j.lastGood = r.Started
	}
	j.mu.Unlock()
	if r.OK() {
		e := r.Entry
		j.log.Info("backup written", "name", e.Name, "dir", j.cfg.Folder.Dir, "bytes", e.Size, "sha256", e.SHA256,
			"records", e.Records, "took", r.Duration, "by", r.Actor)
		j.audit(ctx, audit.Entry{Actor: r.Actor, Action: AuditCreate, Target: "backup:" + e.Name,
			Detail: fmt.Sprintf("%d bytes, sha256 %s, %d records, took %s", e.Size, e.SHA256, e.Records,
				r.Duration.Round(time.Millisecond))})
	} else {
		if ctx.Err() != nil {
			j.log.Warn("backup interrupted", "dir", j.cfg.Folder.Dir, "by", r.Actor, "err", r.Err)
		} else {
			j.log.Error("backup failed", "dir", j.cfg.Folder.Dir, "by", r.Actor, "err", r.Err)
		}
		// The entry's fields are cut to their bounds when it is sealed.
		j.audit(ctx, audit.Entry{Actor: r.Actor, Action: AuditCreateFailed, Target: "backup-dir:" + j.cfg.Folder.Dir,
			Detail: r.Err.Error()})
	}
	if j.cfg.Observe != nil {
		j.cfg.Observe(r)
	}
}

// Delete deletes the backup name for actor (ctx's when empty) and audits it.
// Errors: NOT_FOUND (Folder.Delete).
func (j *Job) Delete(ctx context.Context, name, actor string) (Entry, error) {
	if actor == "" {
		actor = audit.ActorFrom(ctx)
	}
	e, err := j.cfg.Folder.Stat(name)
	if err != nil {
		return Entry{}, err
	}
	if err := j.cfg.Folder.Delete(name); err != nil {
		return Entry{}, err
	}
	j.log.Info("backup deleted", "name", name, "by", actor)
	j.audit(ctx, audit.Entry{Actor: actor, Action: AuditDelete, Target: "backup:" + name,
		Detail: fmt.Sprintf("taken %s, %d bytes, sha256 %s", e.TakenAt.Format(time.RFC3339), e.Size, e.SHA256)})
	return e, nil
}

// audit appends e; a failure is logged. It outlives ctx's cancellation by a few
// seconds, so that a run cut short is still recorded.
func (j *Job) audit(ctx context.Context, e audit.Entry) {
	if j.cfg.Audit == nil {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := j.cfg.Audit.Audit(actx, e); err != nil {
		j.log.Error("append to the audit log", "action", e.Action, "actor", e.Actor, "target", e.Target, "err", err)
	}
}
