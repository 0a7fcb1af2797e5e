package postgres_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper/postgres"
)

// A transaction aborted for a serialization failure or a deadlock runs again
// from the start; any other error ends it at once.
func TestTxRetries(t *testing.T) {
	s := open(t, sharedServer(t), postgres.Options{})
	ctx := t.Context()
	raise := func(tx pgx.Tx, code string) error {
		_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '`+code+`'; END $$`)
		return err
	}
	for _, code := range []string{"40001", "40P01"} {
		attempts := 0
		err := s.InTxForTest(ctx, func(tx pgx.Tx) error {
			if attempts++; attempts < 3 {
				return raise(tx, code)
			}
			return nil
		})
		if err != nil || attempts != 3 {
			t.Errorf("SQLSTATE %s: %d attempts, %v; want 3 and success", code, attempts, err)
		}
	}
	attempts := 0
	err := s.InTxForTest(ctx, func(tx pgx.Tx) error {
		attempts++
		return raise(tx, "23505")
	})
	if err == nil || attempts != 1 || !strings.Contains(err.Error(), "injected") {
		t.Errorf("SQLSTATE 23505: %d attempts, %v; want 1 and the error", attempts, err)
	}
}
