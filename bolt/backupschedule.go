package bolt

import (
	"context"

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
	return s.putVersioned(ctx, bucketSettings, keyBackupSchedule, st.Version,
		func(v []byte) (uint64, error) {
			old, err := decodeSchedule(v)
			return old.Version, err
		},
		func(next uint64) []byte {
			st.Version = next
			return encodeSchedule(st)
		})
}
