package idkeeper

import (
	"context"
	"time"

	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// The schedule of the scheduled backups (issue #30), kept in the store so that
// the admin web shows and changes it for every replica: `server
// --backup-schedule` only seeds it when the store has none, and the replicas
// started with --backup-dir read it at their job's rhythm (package backup) and
// take each scheduled backup under the job lock. The record is configuration of
// the running deployment, not data: a snapshot does not hold it, and a restore
// (LoadSnapshot) or a store reset leaves it as it was, so that restoring an old
// backup never changes, or turns off, the backups protecting the restored data.

// BackupScheduleOff is the Spec of a schedule that is turned off: manual backups
// only. A store with no record is off too.
const BackupScheduleOff = "off"

// MaxBackupScheduleLen bounds BackupSchedule.Spec, in bytes.
const MaxBackupScheduleLen = 128

// BackupSchedule is the stored schedule of the scheduled backups.
type BackupSchedule struct {
	// Spec is the schedule as written: a cron expression in UTC or a descriptor
	// (@daily, @every 6h) as package backup parses it (backup.ParseSchedule), or
	// BackupScheduleOff. The store checks only its bounds (Validate); the writer
	// parses it.
	Spec string
	// UpdatedBy is who wrote it (an audit actor: "user:NAME", "key:ID", or
	// "flag:OWNER" for the seed of a replica's --backup-schedule); UpdatedAt when,
	// to the millisecond.
	UpdatedBy string
	UpdatedAt time.Time
	// Version is the store's: 0 for a schedule never stored; PutBackupSchedule
	// stores one only over the Version it was read with, and increments it.
	Version uint64
}

// Off reports whether s runs no scheduled backup: BackupScheduleOff, or no
// record.
func (s BackupSchedule) Off() bool { return s.Spec == "" || s.Spec == BackupScheduleOff }

// Validate reports a Spec or UpdatedBy out of bounds as an INVALID_REQUEST error
// naming "schedule" or "updatedBy": Spec 1..MaxBackupScheduleLen bytes of text
// (CleanText, no surrounding spaces), UpdatedBy at most audit.MaxFieldLen bytes.
func (s BackupSchedule) Validate() error {
	if clean, ok := CleanText(s.Spec, MaxBackupScheduleLen); !ok || clean != s.Spec || s.Spec == "" {
		return protocol.Invalidf("schedule", "a backup schedule has 1 to %d bytes of text without surrounding spaces", MaxBackupScheduleLen)
	}
	if len(s.UpdatedBy) > audit.MaxFieldLen {
		return protocol.Invalidf("updatedBy", "updatedBy has at most %d bytes", audit.MaxFieldLen)
	}
	return nil
}

// BackupScheduleStore keeps the backup schedule: one record per store. Every
// method is atomic and safe for concurrent use by several processes sharing the
// store. bolt, redis and etcd implement it; internal/harness/storetest.RunBackupSchedule
// is its contract suite.
type BackupScheduleStore interface {
	// BackupSchedule returns the stored schedule, or the zero BackupSchedule
	// (Version 0, Off) when none is stored.
	BackupSchedule(ctx context.Context) (BackupSchedule, error)
	// PutBackupSchedule stores s with Version s.Version + 1 and UpdatedAt to the
	// millisecond when the stored Version is s.Version (0: none stored, so of
	// several first writers one wins); ErrConflict, changing nothing, when it is
	// not. A schedule that fails Validate is an INVALID_REQUEST error.
	PutBackupSchedule(ctx context.Context, s BackupSchedule) error
}
