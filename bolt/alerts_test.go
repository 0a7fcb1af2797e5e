package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
)

func TestAlertStore(t *testing.T) {
	storetest.RunAlerts(t, func(t *testing.T) alert.StateStore {
		return open(t, filepath.Join(t.TempDir(), "idkeeper.db"), nil)
	})
}

func TestBackupScheduleStore(t *testing.T) {
	storetest.RunBackupSchedule(t, func(t *testing.T) idkeeper.BackupScheduleStore {
		return open(t, filepath.Join(t.TempDir(), "idkeeper.db"), nil)
	})
}
