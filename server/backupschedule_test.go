package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/bolt"
)

// auditList collects audit entries.
type auditList struct {
	mu sync.Mutex
	es []audit.Entry
}

func (a *auditList) Audit(_ context.Context, e audit.Entry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.es = append(a.es, e)
	return nil
}

func (a *auditList) entries() []audit.Entry {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]audit.Entry(nil), a.es...)
}

func openScheduleStore(t *testing.T) *bolt.Store {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "idkeeper.db"), bolt.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Init(t.Context(), idkeeper.PoolSpec{Nodes: 4}); err != nil {
		t.Fatal(err)
	}
	return st
}

// --backup-schedule seeds a store without a schedule once: of replicas starting
// together with different flags one wins, and every other start whose flag
// differs from the store's says, as a WARN, that the store's is in effect and
// where to change it; the seed is audited once.
func TestBackupScheduleFlagSeedsOnce(t *testing.T) {
	st := openScheduleStore(t)
	auditor := &auditList{}
	var logs [2]syncBuffer
	specs := [2]string{"0 3 * * *", "@hourly"}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			seedBackupSchedule(t.Context(), st, specs[i], []string{"replica-a", "replica-b"}[i], auditor,
				slog.New(slog.NewJSONHandler(&logs[i], nil)))
		})
	}
	wg.Wait()
	got, err := st.BackupSchedule(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	winner := -1
	for i, s := range specs {
		if got.Spec == s {
			winner = i
		}
	}
	if winner < 0 || got.Version != 1 || got.UpdatedBy != "flag:"+[]string{"replica-a", "replica-b"}[winner] {
		t.Fatalf("the store's schedule after two seeds: %+v", got)
	}
	loser := 1 - winner
	if l := logs[loser].String(); !strings.Contains(l, `"level":"WARN"`) || !strings.Contains(l, "which is in effect") ||
		!strings.Contains(l, "PUT /admin/api/backups/schedule") || !strings.Contains(l, `"store":"`+specs[winner]+`"`) {
		t.Errorf("the losing replica's log:\n%s", l)
	}
	if l := logs[winner].String(); strings.Contains(l, "WARN") || !strings.Contains(l, "written into the store") {
		t.Errorf("the winning replica's log:\n%s", l)
	}
	es := auditor.entries()
	if len(es) != 1 || es[0].Action != audit.BackupSchedule || es[0].Actor != "system" ||
		!strings.Contains(es[0].Detail, `none → "`+specs[winner]+`"`) {
		t.Fatalf("audit entries %+v", es)
	}
	// A later start: with the store's schedule no word, with another a WARN;
	// neither writes.
	var same, other syncBuffer
	seedBackupSchedule(t.Context(), st, specs[winner], "replica-c", auditor, slog.New(slog.NewJSONHandler(&same, nil)))
	seedBackupSchedule(t.Context(), st, "@weekly", "replica-d", auditor, slog.New(slog.NewJSONHandler(&other, nil)))
	seedBackupSchedule(t.Context(), st, "", "replica-e", auditor, slog.New(slog.NewJSONHandler(&same, nil)))
	if same.String() != "" || !strings.Contains(other.String(), `"flag":"@weekly"`) {
		t.Errorf("later starts logged %q and %q", same.String(), other.String())
	}
	if again, _ := st.BackupSchedule(t.Context()); again != got || len(auditor.entries()) != 1 {
		t.Fatalf("later starts changed the schedule: %+v, %d audit entries", again, len(auditor.entries()))
	}
}

// A running server's backup job follows a schedule changed in the store (as
// the admin web changes it on another replica) at its next poll: none, then
// scheduled backups and idkeeper_backup_scheduled 1, then off again.
func TestRunningBackupJobFollowsTheStore(t *testing.T) {
	st := openScheduleStore(t)
	promReg := prometheus.NewRegistry()
	runs := make(chan backup.Run, 100)
	cfg := BackupConfig{Dir: filepath.Join(t.TempDir(), "backups"), Gzip: true, PollEvery: 20 * time.Millisecond}
	r, err := startBackups(cfg, st, "bolt", "replica-a", &auditList{}, promReg, quietLogger(), func(run backup.Run) { runs <- run })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.close().Close() })
	gauge := func() float64 {
		mfs, _ := promReg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "idkeeper_backup_scheduled" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no idkeeper_backup_scheduled")
		return 0
	}
	if st := r.Job().Status(); st.Spec != "" || gauge() != 0 {
		t.Fatalf("without a stored schedule: %+v, gauge %v", st, gauge())
	}
	put := func(spec string, version uint64) {
		if err := st.PutBackupSchedule(t.Context(), idkeeper.BackupSchedule{Spec: spec, UpdatedBy: "user:alice", Version: version}); err != nil {
			t.Fatal(err)
		}
	}
	put("@every 1s", 0)
	select {
	case run := <-runs:
		if !run.OK() || run.Actor != "system" {
			t.Fatalf("the scheduled run: %+v", run)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no scheduled backup after the schedule was stored")
	}
	if st := r.Job().Status(); st.Spec != "@every 1s" || st.Version != 1 || gauge() != 1 {
		t.Fatalf("after the change: %+v, gauge %v", st, gauge())
	}
	put(idkeeper.BackupScheduleOff, 1)
	deadline := time.Now().Add(5 * time.Second)
	for r.Job().Status().Spec != "" {
		if time.Now().After(deadline) {
			t.Fatal("the job did not turn its schedule off")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if gauge() != 0 {
		t.Fatalf("gauge while off: %v", gauge())
	}
}
