package etcd_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/etcd"
	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
)

func TestAdminStore(t *testing.T) {
	srv := etcdtest.Start(t)
	storetest.RunAdmin(t, func(t *testing.T, clock idkeeper.Clock) account.Store {
		return open(t, srv.Client(), etcd.Options{Clock: clock})
	})
}

func TestAlertStore(t *testing.T) {
	srv := etcdtest.Start(t)
	storetest.RunAlerts(t, func(t *testing.T) alert.StateStore {
		return open(t, srv.Client(), etcd.Options{})
	})
}

func TestBackupScheduleStore(t *testing.T) {
	srv := etcdtest.Start(t)
	storetest.RunBackupSchedule(t, func(t *testing.T) idkeeper.BackupScheduleStore {
		return open(t, srv.Client(), etcd.Options{})
	})
}

// A corrupt admin record is a store error, not a panic and not ErrNotFound.
func TestCorruptAdminRecord(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := t.Context()
	prefix := fmt.Sprintf("test%d/", prefixSeq.Add(1))
	s := open(t, srv.Client(), etcd.Options{Prefix: prefix})
	if err := s.CreateUser(ctx, account.User{Name: "alice", Role: account.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendAudit(ctx, audit.Entry{Action: "x"}.Seal(0, "")); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"user/alice": "{1", "audit/0000000000000001": "\x01", "alert/capacity": "[",
		"session/s1": "{"} {
		if _, err := srv.Client().Put(ctx, prefix+k, v); err != nil {
			t.Fatal(err)
		}
	}
	_, err1 := s.User(ctx, "alice")
	_, err2 := s.Users(ctx)
	err3 := s.UpdateUser(ctx, account.User{Name: "alice", Version: 1})
	_, err4 := s.AuditEntries(ctx, 1, 10)
	_, err5 := s.PruneAudit(ctx, time.Now(), 10)
	_, err6 := s.AlertState(ctx, alert.NameCapacity)
	_, err7 := s.Session(ctx, "s1")
	for i, err := range []error{err1, err2, err3, err4, err5, err6, err7} {
		if err == nil || errors.Is(err, idkeeper.ErrNotFound) || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("read %d of a corrupt record: %v", i+1, err)
		}
	}
}
