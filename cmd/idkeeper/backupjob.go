package main

import (
	"errors"
	"flag"
	"path/filepath"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/server"
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

// config checks the flags: a schedule that does not parse, or never fires, is
// refused here, before anything starts.
func (f *backupFlags) config(now time.Time) (server.BackupConfig, error) {
	c := server.BackupConfig{Keep: f.keep, MaxAge: f.maxAge, Gzip: f.gzip}
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
