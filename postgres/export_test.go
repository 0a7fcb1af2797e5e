package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// InTxForTest runs fn as a store transaction (inTx), retries included.
func (s *Store) InTxForTest(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.inTx(ctx, "test", fn)
}
