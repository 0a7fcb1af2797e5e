package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/snapshot"
)

// The server's scheduled and manual backups (issue #12, docs/backup.md
// "Scheduled and manual backups"): --backup-dir turns them on; the schedule, a
// cron schedule (UTC), is kept in the store (issue #30) and changed in the admin
// web, --backup-schedule only seeds it when the store has none; every replica
// with --backup-dir follows it and one takes each scheduled backup under the
// store's job lock "backup"; --backup-keep and --backup-max-age prune the
// folder after each one. The job runs in the registry's process; its runs are
// in the audit log and in the metrics below.

// Defaults of the backup flags.
const (
	DefaultBackupKeep   = 14
	DefaultBackupMaxAge = 30 * 24 * time.Hour
)

// backupFlags are the server's backup flags.
type backupFlags struct {
	dir, schedule string
	keep          int
	maxAge        time.Duration
	gzip          bool
}

func (f *backupFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dir, "backup-dir", "", "folder of the server's backups: manual ones from the admin web's Backups page and /admin/api/backups, "+
		"scheduled ones with --backup-schedule (created, mode 0700, when missing); empty: no backups")
	fs.StringVar(&f.schedule, "backup-schedule", "", `the first schedule of the backups into --backup-dir, written into the store when it has none `+
		`(then the admin web's Backups page changes it): a cron expression in UTC, 5 fields `+
		`(minute hour day-of-month month day-of-week: "0 3 * * *"), @daily, @hourly, @weekly, @every 6h, or off; empty: the store's schedule (none: manual backups only)`)
	fs.IntVar(&f.keep, "backup-keep", DefaultBackupKeep, "keep the newest N backups of --backup-dir after each backup; 0: no limit by count")
	fs.DurationVar(&f.maxAge, "backup-max-age", DefaultBackupMaxAge, "delete the backups of --backup-dir older than this after each backup, never the newest; 0: no limit by age")
	fs.BoolVar(&f.gzip, "backup-gzip", true, "gzip-compress the backups of --backup-dir (NAME.idkbackup.gz)")
}

// backupConfig is what the backup flags say; Dir "" means no backups.
type backupConfig struct {
	Dir      string
	Spec     string          // --backup-schedule trimmed: the store's first schedule; "" to seed none
	Schedule backup.Schedule // nil without Spec or for "off"
	Keep     int
	MaxAge   time.Duration
	Gzip     bool
	// PollEvery is how often the job reads the stored schedule; 0: a minute
	// (tests shorten it).
	PollEvery time.Duration
}

// config checks the flags: a schedule that does not parse, or never fires, is
// refused here, before anything starts.
func (f *backupFlags) config(now time.Time) (backupConfig, error) {
	c := backupConfig{Keep: f.keep, MaxAge: f.maxAge, Gzip: f.gzip}
	switch {
	case f.keep < 0:
		return c, usagef("--backup-keep %d: want 0 (no limit) or more", f.keep)
	case f.maxAge < 0:
		return c, usagef("--backup-max-age %s: want 0 (no limit) or a positive duration", f.maxAge)
	case f.dir == "" && f.schedule != "":
		return c, usagef("--backup-schedule %q needs --backup-dir: the folder the backups go to", f.schedule)
	case f.dir == "":
		return c, nil
	}
	dir, err := filepath.Abs(f.dir)
	if err != nil {
		return c, usagef("--backup-dir %q: %v", f.dir, err)
	}
	c.Dir = dir
	if f.schedule != "" {
		if c.Schedule, c.Spec, err = parseBackupSchedule(f.schedule, now); err != nil {
			return c, err
		}
	}
	return c, nil
}

// parseBackupSchedule parses a --backup-schedule (backup.ParseSchedule: UTC,
// "off" a nil Schedule) and returns it with its trimmed text; its error is a
// usage error naming the flag.
func parseBackupSchedule(spec string, now time.Time) (backup.Schedule, string, error) {
	sched, text, err := backup.ParseSchedule(spec, now)
	if e := (*idkeeper.Error)(nil); errors.As(err, &e) {
		return nil, "", usagef("--backup-schedule %s", e.Message)
	}
	return sched, text, err
}

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
func startBackups(cfg backupConfig, store idkeeper.Store, kind, owner string, audit idkeeper.Auditor,
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
func (r *backupRunner) close() closeStep {
	return closeStep{"stop the backups", func() error {
		if r == nil {
			return nil
		}
		r.stop()
		<-r.done
		return nil
	}}
}
