package bolt

import (
	"context"

	bbolt "go.etcd.io/bbolt"
)

// WipeForTest deletes every bucket of the file, as a lost volume would lose
// everything, generation included: the storetest.Wiper hook. It exists in test
// builds only.
func (s *Store) WipeForTest(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.Update(func(tx *bbolt.Tx) error {
		var names [][]byte
		err := tx.ForEach(func(name []byte, _ *bbolt.Bucket) error {
			names = append(names, append([]byte(nil), name...))
			return nil
		})
		if err != nil {
			return err
		}
		for _, name := range names {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
		}
		return createBuckets(tx)
	})
}

// SetLoadBatchForTest makes LoadSnapshot write at most n records a transaction, so
// that small snapshots load in many batches.
func (s *Store) SetLoadBatchForTest(n int) { s.loadBatch = n }

// NoSyncForTest turns fsync off, for benchmarks that measure the store's own work
// apart from the disk's.
func (s *Store) NoSyncForTest() { s.db.NoSync = true }
