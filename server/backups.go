package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/internal/httpserve"
	"github.com/idkeeper/idkeeper/snapshot"
)

// The server's scheduled and manual backups (issue #12, docs/backup.md
// "Scheduled and manual backups"): BackupConfig.Dir turns them on; the schedule,
// kept in the store (issue #30), is changed in the admin web, BackupConfig.Spec
// only seeds it when the store has none; every replica with a Dir follows it and
// one takes each scheduled backup under the store's job lock "backup"; Keep and
// MaxAge prune the folder after each one. Its runs are in the audit log and in
// the metrics below.

// backupMetrics are the backup job's metrics.
type backupMetrics struct {
	lastSuccess, duration, bytes, scheduled prometheus.Gauge
	failures                                prometheus.Counter
}

func newBackupMetrics(reg prometheus.Registerer) *backupMetrics {
	m := &backupMetrics{
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idkeeper_backup_last_success_timestamp_seconds",
			Help: "When the last successful backup into --backup-dir ended (Unix seconds); at start, when the folder's newest backup was taken; 0 without one."}),
		duration: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idkeeper_backup_duration_seconds",
			Help: "How long the last successful backup on this server took."}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idkeeper_backup_bytes",
			Help: "The size on disk of the last successful backup (at start, of the folder's newest)."}),
		scheduled: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idkeeper_backup_scheduled",
			Help: "1 when this server backs up on a schedule (the store's, set in the admin web or seeded by --backup-schedule), 0 for manual backups only: an overdue backup is an alert only with a schedule."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "idkeeper_backup_failures_total",
			Help: "Backups on this server that failed (scheduled or manual; not those skipped for another replica's lock)."}),
	}
	reg.MustRegister(m.lastSuccess, m.duration, m.bytes, m.scheduled, m.failures)
	return m
}

// observe records a run. A run cut short because the server stops is no failure.
func (m *backupMetrics) observe(r backup.Run) {
	switch {
	case r.OK():
		m.lastSuccess.Set(float64(r.Started.Add(r.Duration).UnixMilli()) / 1000)
		m.duration.Set(r.Duration.Seconds())
		m.bytes.Set(float64(r.Entry.Size))
	case errors.Is(r.Err, context.Canceled):
	default:
		m.failures.Inc()
	}
}

// backupRunner is the server's backup job and its schedule's goroutine.
type backupRunner struct {
	job  *backup.Job
	stop context.CancelFunc
	done chan struct{}
}

// startBackups makes the backup job of cfg over store (its job lock taken as
// owner, its runs audited through audit) with its metrics on promReg, and runs
// its schedule; onRun is told of every run, after the metrics. Nil without cfg.Dir.
func startBackups(cfg BackupConfig, store idkeeper.Store, kind, owner string, audit idkeeper.Auditor,
	promReg prometheus.Registerer, log *slog.Logger, onRun func(backup.Run)) (*backupRunner, error) {
	if cfg.Dir == "" {
		return nil, nil
	}
	ss, ok := store.(snapshot.Store)
	if !ok {
		return nil, fmt.Errorf("--backup-dir: the store %T cannot be backed up", store)
	}
	m := newBackupMetrics(promReg)
	jc := backup.JobConfig{Folder: backup.Folder{Dir: cfg.Dir, Gzip: cfg.Gzip}, Store: ss, StoreKind: kind, Locker: store,
		Owner: owner, Keep: cfg.Keep, MaxAge: cfg.MaxAge, Audit: audit, Logger: log,
		Observe: func(r backup.Run) { m.observe(r); onRun(r) }, PollEvery: cfg.PollEvery,
		ScheduleChanged: func(spec string) { m.scheduled.Set(map[bool]float64{true: 1}[spec != ""]) }}
	bs, ok := store.(idkeeper.BackupScheduleStore)
	if ok {
		jc.Schedules = bs
		seedBackupSchedule(context.Background(), bs, cfg.Spec, owner, audit, log)
	} else if cfg.Schedule != nil {
		jc.Schedule, jc.Spec = cfg.Schedule, cfg.Spec
		m.scheduled.Set(1)
	}
	job, err := backup.NewJob(jc)
	if err != nil {
		return nil, err
	}
	// The newest backup of the folder stands for the last success until this
	// server makes one: a restart does not look like a backup overdue.
	if es, err := job.Folder().List(); err != nil {
		log.Warn("cannot read the backup folder", "dir", cfg.Dir, "err", err)
	} else if len(es) > 0 {
		m.lastSuccess.Set(float64(es[0].TakenAt.Unix()))
		m.bytes.Set(float64(es[0].Size))
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &backupRunner{job: job, stop: stop, done: make(chan struct{})}
	// The stored schedule is read before Run, so that the log line and the
	// admin web's first answers show it.
	job.Refresh(ctx)
	go func() {
		defer close(r.done)
		job.Run(ctx)
	}()
	st := job.Status()
	if st.Spec == "" {
		log.Info("backups: manual only, no schedule (the admin web's Backups page sets one)", "dir", cfg.Dir, "keep", cfg.Keep,
			"maxAge", cfg.MaxAge)
	} else {
		log.Info("backups scheduled", "dir", cfg.Dir, "schedule", st.Spec, "next", st.Next, "keep", cfg.Keep, "maxAge", cfg.MaxAge)
	}
	return r, nil
}

// Job is the runner's job; nil for a nil runner.
func (r *backupRunner) Job() *backup.Job {
	if r == nil {
		return nil
	}
	return r.job
}

// close is the shutdown step of the backups: the schedule stops, a backup under
// way is cut short (its temporary file removed).
func (r *backupRunner) close() httpserve.Step {
	return httpserve.Step{What: "stop the backups", Close: func() error {
		if r == nil {
			return nil
		}
		r.stop()
		<-r.done
		return nil
	}}
}
