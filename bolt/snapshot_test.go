package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
)

func TestSnapshot(t *testing.T) {
	storetest.RunSnapshot(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return open(t, filepath.Join(t.TempDir(), "idkeeper.db"), clock)
	})
}

// TestSnapshotSmallBatches runs the contract with loads of 7 records a
// transaction, so that every snapshot of the suite spans many batches.
func TestSnapshotSmallBatches(t *testing.T) {
	storetest.RunSnapshot(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		s := open(t, filepath.Join(t.TempDir(), "idkeeper.db"), clock)
		s.SetLoadBatchForTest(7)
		return s
	})
}
