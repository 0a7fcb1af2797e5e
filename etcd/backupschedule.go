package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/idkeeper/idkeeper"
)

// The backup schedule (idkeeper.BackupScheduleStore): one JSON record under
// setting/backup-schedule, changed by compare and set on the key's revision. It
// is not part of a snapshot: a load or reset leaves it.

var _ idkeeper.BackupScheduleStore = (*Store)(nil)

// scheduleRec is the JSON of the backup schedule; UpdatedAt in Unix ms (zero
// time: absent).
type scheduleRec struct {
	Spec      string `json:"spec"`
	UpdatedBy string `json:"updatedBy,omitempty"`
	UpdatedAt int64  `json:"updatedAt,omitempty"`
	Version   uint64 `json:"version"`
}

func decodeSchedule(v []byte) (idkeeper.BackupSchedule, error) {
	var r scheduleRec
	if err := json.Unmarshal(v, &r); err != nil {
		return idkeeper.BackupSchedule{}, fmt.Errorf("etcd: corrupt backup schedule: %w", err)
	}
	return idkeeper.BackupSchedule{Spec: r.Spec, UpdatedBy: r.UpdatedBy, UpdatedAt: optTime(r.UpdatedAt), Version: r.Version}, nil
}

// BackupSchedule implements idkeeper.BackupScheduleStore.
func (s *Store) BackupSchedule(ctx context.Context) (idkeeper.BackupSchedule, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.k.backupSchedule)
	if err != nil {
		return idkeeper.BackupSchedule{}, wrap("backup schedule", err)
	}
	if len(resp.Kvs) == 0 {
		return idkeeper.BackupSchedule{}, nil
	}
	return decodeSchedule(resp.Kvs[0].Value)
}

// PutBackupSchedule implements idkeeper.BackupScheduleStore: compare and set on
// the record's key, the stored Version checked against st.Version.
func (s *Store) PutBackupSchedule(ctx context.Context, st idkeeper.BackupSchedule) error {
	if err := st.Validate(); err != nil {
		return err
	}
	if st.Version == math.MaxUint64 {
		return idkeeper.ErrConflict
	}
	return s.cas(ctx, "put backup schedule", s.k.backupSchedule, func(v []byte, ok bool) (casOp, string, error) {
		var cur uint64
		if ok {
			old, err := decodeSchedule(v)
			if err != nil {
				return casKeep, "", err
			}
			cur = old.Version
		}
		if cur != st.Version {
			return casKeep, "", idkeeper.ErrConflict
		}
		rec, err := jsonString(scheduleRec{Spec: st.Spec, UpdatedBy: st.UpdatedBy, UpdatedAt: optMs(st.UpdatedAt), Version: st.Version + 1})
		return casPut, rec, err
	})
}
