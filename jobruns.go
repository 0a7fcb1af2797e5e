package idkeeper

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// The periodic jobs as operators see them: the job locks the store holds (every
// replica's) and the last run of each job on this replica.

// KeyExpiryJob names the API key expiry check (WarnExpiringKeys) in JobRuns. It
// takes no lock of its own: one lock per key, named with the prefix
// "api-key-expiry:", spaces the warnings about that key.
const KeyExpiryJob = "api-key-expiry"

// JobOutcome is how a run of a periodic job ended.
type JobOutcome string

// Outcomes of a JobRun.
const (
	JobRan     JobOutcome = "ran"     // it ran and did its work
	JobSkipped JobOutcome = "skipped" // it did nothing: another run holds its job lock (or the registry did not serve)
	JobFailed  JobOutcome = "error"   // it failed; Detail is the error
)

// JobRun is the last run of one periodic job on this replica.
type JobRun struct {
	Job      string    // CleanupJob, RetentionJob or KeyExpiryJob
	Started  time.Time // the registry's clock
	Finished time.Time
	Outcome  JobOutcome
	// Detail says what the run did ("reclaimed 2 leases"), who held the job lock
	// when it was skipped, or the error.
	Detail string
}

// jobBook keeps the last run of each job; its zero value is empty.
type jobBook struct {
	mu   sync.Mutex
	last map[string]JobRun
}

func (b *jobBook) record(run JobRun) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == nil {
		b.last = map[string]JobRun{}
	}
	b.last[run.Job] = run
}

// JobRuns returns the last run of each periodic job on this replica, sorted by
// job name; a job that has not run since the registry was made is left out. Every
// call of Cleanup, PruneAdminRecords (with something to prune) and
// WarnExpiringKeys is a run, whoever makes it. They are kept in memory only:
// another replica's runs are its own, and a restart forgets them (the job locks,
// JobLocks, are in the store).
func (r *Registry) JobRuns() []JobRun {
	r.jobs.mu.Lock()
	defer r.jobs.mu.Unlock()
	out := make([]JobRun, 0, len(r.jobs.last))
	for _, run := range r.jobs.last {
		out = append(out, run)
	}
	slices.SortFunc(out, func(a, b JobRun) int { return strings.Compare(a.Job, b.Job) })
	return out
}

// JobLocks returns the job locks held in the store now, by every replica that
// shares it, sorted by name (LockStore.Locks). Errors: STORE_UNAVAILABLE.
func (r *Registry) JobLocks(ctx context.Context) ([]Lock, error) {
	ls, err := r.store.Locks(ctx)
	if err != nil {
		return nil, r.storeErr(err)
	}
	return ls, nil
}

// noteJob records a run of job begun at started: JobFailed with the error when
// err is set, else JobRan with did, or JobSkipped with skipped.
func (r *Registry) noteJob(job string, started time.Time, ran bool, err error, did, skipped string) {
	run := JobRun{Job: job, Started: started, Finished: r.cfg.Clock(), Outcome: JobRan, Detail: did}
	switch {
	case err != nil:
		run.Outcome, run.Detail = JobFailed, err.Error()
	case !ran:
		run.Outcome, run.Detail = JobSkipped, skipped
	}
	r.jobs.record(run)
}

// heldBy says who holds the job lock l, for a skipped run.
func heldBy(l Lock) string {
	if l.Owner == "" {
		return "its job lock is held"
	}
	return "its job lock is held by " + l.Owner + " until " + l.Until.UTC().Format(time.RFC3339)
}
