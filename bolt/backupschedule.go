package bolt

import (
	"context"
	"math"

	"github.com/idkeeper/idkeeper"
)

// bucketSettings holds the deployment's settings kept in the store, one record
// per key: the backup schedule (idkeeper.BackupScheduleStore) under
// keyBackupSchedule. It is not part of a snapshot: a load or reset leaves it.
var (
	bucketSettings    = []byte("settings")
	keyBackupSchedule = []byte("backup-schedule")
)

// encodeSchedule is spec | updatedBy | updatedAt | version.
func encodeSchedule(s idkeeper.BackupSchedule) []byte {
	return newRec(24 + len(s.Spec) + len(s.UpdatedBy)).str(s.Spec).str(s.UpdatedBy).ms(timeMs(s.UpdatedAt)).u64(s.Version)
}

func decodeSchedule(v []byte) (idkeeper.BackupSchedule, error) {
	r := readRec("backup schedule", v)
	s := idkeeper.BackupSchedule{Spec: r.str(), UpdatedBy: r.str(), UpdatedAt: zeroOr(r.ms()), Version: r.u64()}
	return s, r.end()
}

// BackupSchedule implements idkeeper.BackupScheduleStore.
func (s *Store) BackupSchedule(ctx context.Context) (idkeeper.BackupSchedule, error) {
	var st idkeeper.BackupSchedule
	err := s.view(ctx, func(t *txn) error {
		b := t.tx.Bucket(bucketSettings)
		if b == nil {
			return nil
		}
		v := b.Get(keyBackupSchedule)
		if v == nil {
			return nil
		}
		var err error
		st, err = decodeSchedule(v)
		return err
	})
	return st, err
}

// PutBackupSchedule implements idkeeper.BackupScheduleStore.
func (s *Store) PutBackupSchedule(ctx context.Context, st idkeeper.BackupSchedule) error {
	if err := st.Validate(); err != nil {
		return err
	}
	if st.Version == math.MaxUint64 {
		return idkeeper.ErrConflict
	}
	return s.update(ctx, nil, func(t *txn) error {
		b, err := writeBucket(t, bucketSettings)
		if err != nil {
			return err
		}
		var cur uint64
		if v := b.Get(keyBackupSchedule); v != nil {
			old, err := decodeSchedule(v)
			if err != nil {
				return err
			}
			cur = old.Version
		}
		if cur != st.Version {
			return idkeeper.ErrConflict
		}
		st.Version++
		return b.Put(keyBackupSchedule, encodeSchedule(st))
	})
}
