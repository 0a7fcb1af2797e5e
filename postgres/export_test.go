package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// InTxForTest runs fn as a store transaction (inTx), retries included.
func (s *Store) InTxForTest(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.inTx(ctx, "test", fn)
}

// WipeForTest deletes every lease record, the generation and the pool with
// them, as the loss of the database would: the storetest.Wiper hook. The
// other records stay, as on etcd's lost keys of the lease pool.
func (s *Store) WipeForTest(ctx context.Context) error {
	return s.update(ctx, "wipe", nil, func(t *txn) error {
		for _, tb := range []string{s.t.nodes, s.t.charges, s.t.history} {
			if _, err := t.tx.Exec(ctx, `DELETE FROM `+tb); err != nil {
				return err
			}
		}
		clear(t.nodes)
		t.m = meta{}
		return nil
	})
}

// SetLoadBatchForTest sets how many records a snapshot load copies in at a time.
func (s *Store) SetLoadBatchForTest(n int) { s.loadBatch = n }
