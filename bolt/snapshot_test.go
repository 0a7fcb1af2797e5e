package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/storetest"
)

func TestSnapshot(t *testing.T) {
	storetest.RunSnapshot(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return open(t, filepath.Join(t.TempDir(), "idkeeper.db"), clock)
	})
}
