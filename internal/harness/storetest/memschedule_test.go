package storetest

import (
	"context"
	"sync"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// TestMemBackupSchedule runs RunBackupSchedule against memSchedule, a naive
// reference implementation written from the doc comments of
// idkeeper.BackupScheduleStore: it checks the suite itself.
func TestMemBackupSchedule(t *testing.T) {
	RunBackupSchedule(t, func(*testing.T) idkeeper.BackupScheduleStore { return &memSchedule{} })
}

type memSchedule struct {
	mu sync.Mutex
	s  idkeeper.BackupSchedule
}

func (m *memSchedule) BackupSchedule(context.Context) (idkeeper.BackupSchedule, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.s, nil
}

func (m *memSchedule) PutBackupSchedule(_ context.Context, s idkeeper.BackupSchedule) error {
	if err := s.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.Version != m.s.Version {
		return idkeeper.ErrConflict
	}
	s.Version++
	if !s.UpdatedAt.IsZero() {
		s.UpdatedAt = protocol.Millis(s.UpdatedAt)
	}
	m.s = s
	return nil
}
