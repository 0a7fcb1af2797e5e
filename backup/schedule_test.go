package backup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/protocol"
)

// auditBook collects the entries a Job appends.
type auditBook struct {
	mu      sync.Mutex
	entries []audit.Entry
	fail    error
}

func (b *auditBook) Audit(_ context.Context, e audit.Entry) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		return b.fail
	}
	b.entries = append(b.entries, e)
	return nil
}

// actions returns "action actor target" of every entry.
func (b *auditBook) actions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, e := range b.entries {
		out = append(out, e.Action+" "+e.Actor+" "+e.Target)
	}
	return out
}

func mustCron(t *testing.T, spec string) cron.Schedule {
	t.Helper()
	s, err := cron.ParseStandard(spec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// jobEnv is a Job on a bolt store and a fake clock that its sleeps move.
type jobEnv struct {
	clk   *fakeclock.Clock
	store store
	audit *auditBook
	job   *Job
	mu    sync.Mutex
	runs  []Run
	stop  func(Run) bool // ends Run after the run it returns true for
}

func newJobEnv(t *testing.T, spec string, adjust func(*JobConfig)) *jobEnv {
	t.Helper()
	e := &jobEnv{clk: fakeclock.New(t0), audit: &auditBook{}}
	e.store = openBolt(t, e.clk)
	populate(t, e.store, e.clk)
	cfg := JobConfig{Folder: Folder{Dir: filepath.Join(t.TempDir(), "backups"), Gzip: true}, Store: e.store,
		StoreKind: "bolt", Locker: e.store, Owner: "replica-a", Spec: spec, Audit: e.audit, Logger: quiet,
		Clock: e.clk.Now, Observe: func(r Run) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.runs = append(e.runs, r)
		}}
	if spec != "" {
		cfg.Schedule = mustCron(t, spec)
	}
	if adjust != nil {
		adjust(&cfg)
	}
	job, err := NewJob(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.job = job
	return e
}

// run runs the schedule until stop says so (or 100 sleeps), every sleep moving
// the fake clock, and returns the runs observed.
func (e *jobEnv) run(t *testing.T, stop func(runs []Run) bool) []Run {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sleeps := 0
	e.job.cfg.Sleep = func(ctx context.Context, d time.Duration) error {
		e.mu.Lock()
		done := stop(e.runs)
		e.mu.Unlock()
		if sleeps++; done || sleeps > 100*60 {
			cancel()
			return ctx.Err()
		}
		if d <= 0 || d > time.Minute {
			t.Errorf("sleep of %v", d)
		}
		e.clk.Advance(d)
		return nil
	}
	e.job.Run(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.runs)
}

func starts(runs []Run) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.Started.UTC().Format("15:04:05"))
	}
	return out
}

// The scheduled runs start at the cron times (UTC), each writes a backup under
// the job lock, is audited and observed, and the retention keeps the newest.
func TestJobRunsAtTheCronTimes(t *testing.T) {
	e := newJobEnv(t, "*/15 * * * *", func(c *JobConfig) { c.Keep = 2 })
	if st := e.job.Status(); !st.Next.Equal(t0.Add(15*time.Minute)) || st.Spec != "*/15 * * * *" || st.Last != nil || st.Keep != 2 {
		t.Fatalf("Status before the first run: %+v", st)
	}
	runs := e.run(t, func(runs []Run) bool { return len(runs) == 3 })
	if got, want := starts(runs), []string{"12:15:00", "12:30:00", "12:45:00"}; !slices.Equal(got, want) {
		t.Fatalf("runs at %v, want %v", got, want)
	}
	for _, r := range runs {
		if !r.OK() || r.Actor != "system" || !ValidName(r.Entry.Name) || r.Entry.SHA256 == "" {
			t.Fatalf("run %+v", r)
		}
	}
	es, err := e.job.Folder().List()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(es), []string{runs[2].Entry.Name, runs[1].Entry.Name}; !slices.Equal(got, want) {
		t.Fatalf("the folder holds %v, want %v", got, want)
	}
	if !slices.Equal(runs[2].Pruned, []string{runs[0].Entry.Name}) {
		t.Fatalf("the third run pruned %v", runs[2].Pruned)
	}
	want := []string{
		AuditCreate + " system backup:" + runs[0].Entry.Name,
		AuditCreate + " system backup:" + runs[1].Entry.Name,
		AuditDelete + " system backup:" + runs[0].Entry.Name,
		AuditCreate + " system backup:" + runs[2].Entry.Name,
	}
	if got := e.audit.actions(); !slices.Equal(got, want) {
		t.Fatalf("audit log\n%v\nwant\n%v", got, want)
	}
	if d := e.audit.entries[0].Detail; !strings.Contains(d, "sha256 "+runs[0].Entry.SHA256) || !strings.Contains(d, "bytes") ||
		!strings.Contains(d, "took") {
		t.Errorf("audit detail %q", d)
	}
	st := e.job.Status()
	if st.Last == nil || st.Last.Entry != runs[2].Entry || !st.LastGood.Equal(runs[2].Started) || !st.Next.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Status after: %+v", st)
	}
	// The lock is kept for a minute after a scheduled time (9/10 of 15 minutes
	// is more): released by then.
	if ls, _ := e.store.Locks(context.Background()); len(ls) != 1 || ls[0].Name != JobName ||
		!ls[0].Until.Equal(t0.Add(45*time.Minute+time.Minute)) {
		t.Fatalf("locks %+v", ls)
	}
	// A manual backup on this replica right after is not held off by that lock,
	// and leaves it as long as it was.
	e.clk.Advance(time.Second)
	if r, err := e.job.Now(context.Background(), "user:olga"); err != nil || !r.OK() {
		t.Fatalf("Now after a scheduled run: %+v %v", r, err)
	}
	if ls, _ := e.store.Locks(context.Background()); len(ls) != 1 || !ls[0].Until.Equal(t0.Add(46*time.Minute)) {
		t.Fatalf("locks after Now %+v", ls)
	}
}

// Descriptors work, and a time whose job lock another replica holds is skipped,
// neither observed nor audited; the next time runs.
func TestJobSkipsWhenTheLockIsHeld(t *testing.T) {
	e := newJobEnv(t, "@hourly", nil)
	if _, ok, err := e.store.TryLock(context.Background(), JobName, "replica-b", 70*time.Minute); err != nil || !ok {
		t.Fatalf("TryLock: %v %v", ok, err)
	}
	runs := e.run(t, func(runs []Run) bool { return len(runs) == 1 })
	if got := starts(runs); !slices.Equal(got, []string{"14:00:00"}) {
		t.Fatalf("runs at %v, want 14:00 only (13:00 was replica-b's)", got)
	}
	if got := e.audit.actions(); len(got) != 1 || !strings.HasPrefix(got[0], AuditCreate+" system") {
		t.Fatalf("audit %v", got)
	}
}

// Two replicas on one store reach the same scheduled time: one backs up.
func TestJobOneReplicaPerScheduledTime(t *testing.T) {
	a := newJobEnv(t, "@every 10m", nil)
	b, err := NewJob(JobConfig{Folder: Folder{Dir: filepath.Join(t.TempDir(), "b")}, Store: a.store, StoreKind: "bolt",
		Locker: a.store, Owner: "replica-b", Schedule: a.job.cfg.Schedule, Logger: quiet, Clock: a.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := t0.Add(10 * time.Minute)
	a.clk.Set(at)
	a.job.scheduled(ctx, a.job.cfg.Schedule, at)
	a.clk.Advance(5 * time.Second) // replica b's clock is a little behind; its tick comes later
	b.scheduled(ctx, a.job.cfg.Schedule, at)
	if st := b.Status(); st.Last != nil {
		t.Fatalf("replica b ran too: %+v", st.Last)
	}
	if st := a.job.Status(); st.Last == nil || !st.Last.OK() {
		t.Fatalf("replica a: %+v", st.Last)
	}
	// The next time, b is first.
	at = at.Add(10 * time.Minute)
	a.clk.Set(at)
	b.scheduled(ctx, a.job.cfg.Schedule, at)
	a.clk.Advance(2 * time.Second)
	a.job.scheduled(ctx, a.job.cfg.Schedule, at)
	if st := b.Status(); st.Last == nil || !st.Last.OK() || !st.Last.Started.Equal(at) {
		t.Fatalf("replica b at %s: %+v", at, st.Last)
	}
	if st := a.job.Status(); !st.Last.Started.Equal(at.Add(-10 * time.Minute)) {
		t.Fatalf("replica a ran at %s too", st.Last.Started)
	}
}

// A failed run is observed, audited as backup.create_failed and shown in Status;
// a manual one returns the error; the next success clears Last.
func TestJobFailureIsCounted(t *testing.T) {
	e := newJobEnv(t, "@every 1m", nil)
	// The folder's place is taken by a file: every backup fails.
	if err := os.MkdirAll(filepath.Dir(e.job.cfg.Folder.Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.job.cfg.Folder.Dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	runs := e.run(t, func(runs []Run) bool { return len(runs) == 2 })
	if len(runs) != 2 || runs[0].OK() || runs[1].OK() {
		t.Fatalf("runs %+v", runs)
	}
	got := e.audit.actions()
	if len(got) != 2 || !strings.HasPrefix(got[0], AuditCreateFailed+" system backup-dir:") ||
		!strings.Contains(e.audit.entries[0].Detail, "create the folder") {
		t.Fatalf("audit %v %+v", got, e.audit.entries)
	}
	st := e.job.Status()
	if st.Last == nil || st.Last.OK() || !st.LastGood.IsZero() {
		t.Fatalf("Status %+v", st)
	}
	ctx := audit.WithActor(context.Background(), "user:olga")
	if _, err := e.job.Now(ctx, ""); err == nil {
		t.Fatal("Now succeeded into a file")
	}
	if err := os.Remove(e.job.cfg.Folder.Dir); err != nil {
		t.Fatal(err)
	}
	r, err := e.job.Now(ctx, "")
	if err != nil || !r.OK() || r.Actor != "user:olga" {
		t.Fatalf("Now: %+v %v", r, err)
	}
	if st := e.job.Status(); !st.Last.OK() || !st.LastGood.Equal(r.Started) {
		t.Fatalf("Status after a success: %+v", st)
	}
	if got := e.audit.actions(); got[len(got)-1] != AuditCreate+" user:olga backup:"+r.Entry.Name {
		t.Fatalf("audit %v", got)
	}
	// A failing audit log does not fail the backup.
	e.audit.fail = errors.New("store down")
	e.clk.Advance(time.Second)
	if r, err := e.job.Now(ctx, "key:k1"); err != nil || r.Actor != "key:k1" {
		t.Fatalf("Now with the audit log down: %+v %v", r, err)
	}
}

// A manual backup while another replica holds the lock is a CONFLICT; it never
// keeps the lock after it; Delete is audited with its actor.
func TestJobNowAndDelete(t *testing.T) {
	e := newJobEnv(t, "", func(c *JobConfig) { c.Keep = 1 })
	ctx := audit.WithActor(context.Background(), "user:olga")
	if st := e.job.Status(); !st.Next.IsZero() || st.Spec != "" {
		t.Fatalf("Status without a schedule: %+v", st)
	}
	e.job.Run(ctx) // returns at once without a schedule
	first, err := e.job.Now(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if ls, _ := e.store.Locks(ctx); len(ls) != 0 {
		t.Fatalf("a manual backup kept its lock: %+v", ls)
	}
	if _, ok, err := e.store.TryLock(ctx, JobName, "replica-b", time.Minute); err != nil || !ok {
		t.Fatal(ok, err)
	}
	_, err = e.job.Now(ctx, "")
	var busy *BusyError
	if protocol.ErrorCode(err) != protocol.CodeConflict || !errors.As(err, &busy) || busy.Lock.Owner != "replica-b" ||
		!strings.Contains(err.Error(), "held by replica-b") {
		t.Fatalf("Now while replica-b holds the lock: %v", err)
	}
	e.clk.Advance(time.Minute)
	second, err := e.job.Now(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(second.Pruned, []string{first.Entry.Name}) {
		t.Fatalf("keep 1 pruned %v", second.Pruned)
	}
	if _, err := e.job.Delete(ctx, "../"+second.Entry.Name, ""); protocol.ErrorCode(err) != protocol.CodeNotFound {
		t.Fatalf("Delete of a path: %v", err)
	}
	got, err := e.job.Delete(ctx, second.Entry.Name, "")
	if err != nil || got != second.Entry {
		t.Fatalf("Delete: %+v %v", got, err)
	}
	acts := e.audit.actions()
	if acts[len(acts)-1] != AuditDelete+" user:olga backup:"+second.Entry.Name {
		t.Fatalf("audit %v", acts)
	}
	if es, _ := e.job.Folder().List(); len(es) != 0 {
		t.Fatalf("left %v", names(es))
	}
}

// A schedule with no time left ends Run; a clock that jumps ahead skips the
// times it jumped over.
func TestJobScheduleEdges(t *testing.T) {
	e := newJobEnv(t, "0 0 30 2 *", nil) // February 30th: never
	done := make(chan struct{})
	go func() { e.job.Run(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return for a schedule without times")
	}
	e = newJobEnv(t, "@every 1m", nil)
	jumped := false
	runs := e.run(t, func(runs []Run) bool {
		if len(runs) == 1 && !jumped {
			jumped = true
			e.clk.Advance(time.Hour) // the clock steps while it sleeps
		}
		return len(runs) == 2
	})
	if len(runs) != 2 || runs[1].Started.Sub(runs[0].Started) != time.Hour+time.Minute {
		t.Fatalf("runs at %v, want an hour and a minute apart", starts(runs))
	}
	if _, err := NewJob(JobConfig{}); err == nil {
		t.Fatal("NewJob without a folder")
	}
	if _, err := NewJob(JobConfig{Folder: Folder{Dir: "x"}, Store: e.store, Locker: e.store, Owner: "o", Keep: -1}); err == nil {
		t.Fatal("NewJob with a negative keep")
	}
}
