package postgres_test

import (
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/postgres"
)

func TestSnapshot(t *testing.T) {
	srv := sharedServer(t)
	storetest.RunSnapshot(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return open(t, srv, postgres.Options{Clock: clock})
	})
}

// TestSnapshotSmallBatches runs the contract with loads that copy 7 records at
// a time, so that every snapshot of the suite spans many copies.
func TestSnapshotSmallBatches(t *testing.T) {
	srv := sharedServer(t)
	storetest.RunSnapshot(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		s := open(t, srv, postgres.Options{Clock: clock})
		s.SetLoadBatchForTest(7)
		return s
	})
}
