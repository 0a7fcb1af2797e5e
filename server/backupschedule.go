package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
)

// seedBackupSchedule makes --backup-schedule (spec; "" for none) the store's
// first backup schedule: written when the store has none, once — of several
// replicas starting together the first write wins (PutBackupSchedule over
// Version 0) — and audited. When the store has one already that differs, the
// store's stays in force and a WARN says so and how to change it. A store that
// does not answer is logged: the job reads the schedule again at its next wake.
func seedBackupSchedule(ctx context.Context, bs idkeeper.BackupScheduleStore, spec, owner string, auditor idkeeper.Auditor,
	log *slog.Logger) {
	if spec == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cur, err := bs.BackupSchedule(ctx)
	if err == nil && cur.Version == 0 {
		by := "flag:" + owner
		if len(by) > audit.MaxFieldLen {
			by = by[:audit.MaxFieldLen]
		}
		err = bs.PutBackupSchedule(ctx, idkeeper.BackupSchedule{Spec: spec, UpdatedBy: by, UpdatedAt: time.Now()})
		if err == nil {
			log.Info("backup schedule: --backup-schedule written into the store as its first schedule", "schedule", spec)
			if auditor != nil {
				if aerr := auditor.Audit(ctx, audit.Entry{Actor: "system", Action: audit.BackupSchedule,
					Target: "backup-schedule", Detail: fmt.Sprintf("none → %q: --backup-schedule of replica %s", spec, owner)}); aerr != nil {
					log.Error("append to the audit log", "action", audit.BackupSchedule, "err", aerr)
				}
			}
			return
		}
		if errors.Is(err, idkeeper.ErrConflict) { // another replica's seed came first
			cur, err = bs.BackupSchedule(ctx)
		}
	}
	if err != nil {
		log.Warn("backup schedule: cannot read or seed the store's schedule; the backup job reads it again within a minute",
			"flag", spec, "err", err)
		return
	}
	if cur.Spec != spec {
		log.Warn("backup schedule: --backup-schedule differs from the schedule kept in the store, which is in effect; "+
			"change it on the admin web's Backups page or with PUT /admin/api/backups/schedule (the flag only seeds a store without one)",
			"flag", spec, "store", cur.Spec, "updatedBy", cur.UpdatedBy, "updatedAt", cur.UpdatedAt)
	}
}
