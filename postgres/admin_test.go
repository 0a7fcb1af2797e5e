package postgres_test

import (
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/idemtest"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/postgres"
)

func TestAdminStore(t *testing.T) {
	srv := sharedServer(t)
	storetest.RunAdmin(t, func(t *testing.T, clock idkeeper.Clock) account.Store {
		return open(t, srv, postgres.Options{Clock: clock})
	})
}

func TestAlertStore(t *testing.T) {
	srv := sharedServer(t)
	storetest.RunAlerts(t, func(t *testing.T) alert.StateStore {
		return open(t, srv, postgres.Options{})
	})
}

func TestBackupScheduleStore(t *testing.T) {
	srv := sharedServer(t)
	storetest.RunBackupSchedule(t, func(t *testing.T) idkeeper.BackupScheduleStore {
		return open(t, srv, postgres.Options{})
	})
}

// The idempotency suite's purge and cap cases skip a store that is not a Purger
// or a CountingStore: a renamed method must fail the build, not skip them.
var (
	_ idemtest.Purger           = (*postgres.Store)(nil)
	_ idempotency.CountingStore = (*postgres.Store)(nil)
)

func TestIdempotencyContract(t *testing.T) {
	srv := sharedServer(t)
	idemtest.Run(t, func(t *testing.T, clock idkeeper.Clock) idempotency.Store {
		return open(t, srv, postgres.Options{Clock: clock})
	})
}
