package redis

import (
	"context"
	"errors"
	"fmt"
	"math"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
)

// keySettings is the hash of the deployment's settings kept in the store, under
// the store's hash tag: the backup schedule (idkeeper.BackupScheduleStore) in
// field fieldBackupSchedule. It is not part of a snapshot: a load or reset
// leaves it.
const (
	keySettings         = "settings"
	fieldBackupSchedule = "backup-schedule"
)

// scheduleRecord is the JSON of the backup schedule; UpdatedAt in Unix ms, 0 for
// the zero time.
type scheduleRecord struct {
	Spec      string `json:"spec"`
	UpdatedBy string `json:"updatedBy,omitempty"`
	UpdatedAt int64  `json:"updatedAt,omitempty"`
	Version   uint64 `json:"version"`
}

// backupSchedule reads the schedule and its record as stored ("" when none).
func (s *Store) backupSchedule(ctx context.Context) (idkeeper.BackupSchedule, string, error) {
	rec, err := s.client.HGet(ctx, s.adminKey(keySettings), fieldBackupSchedule).Result()
	if errors.Is(err, goredis.Nil) {
		return idkeeper.BackupSchedule{}, "", nil
	}
	if err != nil {
		return idkeeper.BackupSchedule{}, "", fmt.Errorf("redis: backup schedule: %w", err)
	}
	var r scheduleRecord
	if err := decodeRecord("setting", fieldBackupSchedule, rec, &r); err != nil {
		return idkeeper.BackupSchedule{}, "", err
	}
	return idkeeper.BackupSchedule{Spec: r.Spec, UpdatedBy: r.UpdatedBy, UpdatedAt: timeOrZero(r.UpdatedAt), Version: r.Version}, rec, nil
}

// BackupSchedule implements idkeeper.BackupScheduleStore: one HGET.
func (s *Store) BackupSchedule(ctx context.Context) (idkeeper.BackupSchedule, error) {
	st, _, err := s.backupSchedule(ctx)
	return st, err
}

// PutBackupSchedule implements idkeeper.BackupScheduleStore: HSETNX for the
// first schedule, else the compare-and-set script over the record read.
func (s *Store) PutBackupSchedule(ctx context.Context, st idkeeper.BackupSchedule) error {
	if err := st.Validate(); err != nil {
		return err
	}
	cur, old, err := s.backupSchedule(ctx)
	if err != nil {
		return err
	}
	if cur.Version != st.Version || st.Version == math.MaxUint64 {
		return idkeeper.ErrConflict
	}
	rec, err := encodeRecord("setting", scheduleRecord{Spec: st.Spec, UpdatedBy: st.UpdatedBy, UpdatedAt: msOrZero(st.UpdatedAt),
		Version: st.Version + 1})
	if err != nil {
		return err
	}
	if old == "" {
		added, err := s.client.HSetNX(ctx, s.adminKey(keySettings), fieldBackupSchedule, rec).Result()
		if err != nil {
			return fmt.Errorf("redis: put backup schedule: %w", err)
		}
		if !added {
			return idkeeper.ErrConflict
		}
		return nil
	}
	// user_update is a compare-and-set of one hash field: it replaces the record
	// only while it is still the one read.
	v, err := s.run(ctx, scriptUserUpdate, []string{s.adminKey(keySettings)}, false, fieldBackupSchedule, old, rec)
	if err != nil {
		return wrap("put backup schedule", err)
	}
	if v != int64(1) {
		return idkeeper.ErrConflict
	}
	return nil
}
