package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
)

// The Backups page shows the stored schedule with its next times (UTC) and
// which replicas run it; an admin changes it through the form — a bad cron
// text is refused on the page with nothing written, a good one saved and shown
// —, turns it off with one button, and a form read before another change is
// refused (409) instead of overwriting it. Checked with axe-core and
// photographed.
func TestBackupScheduleBrowser(t *testing.T) {
	e := newWebEnv(t)
	ctx := context.Background()
	var bs idkeeper.BackupScheduleStore = e.store
	stored := func() idkeeper.BackupSchedule {
		s, err := bs.BackupSchedule(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const saveBtn = `form.stack[action="/admin/backups/schedule"] button[type=submit]`
	const offBtn = `form.inline[action="/admin/backups/schedule"] button[type=submit]`

	b := newBrowser(t, e.url)
	b.open("/admin/login")
	b.fill("#login-name", "admin")
	b.fill("#login-password", webAdminPW)
	b.submit(`form[action="/admin/login"] button[type=submit]`)
	b.open("/admin/backups")
	if now := b.text("#schedule-now"); !strings.Contains(now, "@daily") {
		t.Fatalf("the schedule shown: %q", now)
	}
	if n := eval[float64](b, `document.querySelectorAll("#schedule-next li time").length`); n != 5 {
		t.Errorf("%v next times shown, want 5", n)
	}
	if main := b.text("main"); !strings.Contains(main, "is one of them") || !strings.Contains(main, "--backup-dir") {
		t.Errorf("the page does not say which replicas run the schedule: %s", main)
	}

	b.fill("#s-spec", "61 * * * *")
	if st := b.submit(saveBtn); st != http.StatusBadRequest {
		t.Fatalf("a bad schedule answered %d", st)
	}
	if main := b.text("main"); !strings.Contains(main, "The schedule was not changed") || !strings.Contains(main, "above maximum") {
		t.Errorf("the refusal: %s", main)
	}
	if s := stored(); s.Spec != "@daily" || s.Version != 1 {
		t.Fatalf("a refused schedule was written: %+v", s)
	}

	b.open("/admin/backups")
	b.fill("#s-spec", "0 3 * * *")
	if st := b.submit(saveBtn); st != http.StatusOK {
		t.Fatalf("saving answered %d: %s", st, b.text("main"))
	}
	if main := b.text("main"); !strings.Contains(main, "The backup schedule is now 0 3 * * * (UTC)") {
		t.Errorf("after saving: %s", main)
	}
	if now := b.text("#schedule-now"); !strings.Contains(now, "0 3 * * *") {
		t.Errorf("the schedule shown after saving: %q", now)
	}
	if first := b.text("#schedule-next li"); !strings.Contains(first, "03:00:00Z") {
		t.Errorf("the next time shown: %q", first)
	}
	if s := stored(); s.Spec != "0 3 * * *" || s.UpdatedBy != "user:admin" || s.Version != 2 {
		t.Fatalf("stored after saving: %+v", s)
	}
	b.check("backups-schedule")

	if st := b.submit(offBtn); st != http.StatusOK {
		t.Fatalf("turning off answered %d", st)
	}
	if main := b.text("main"); !strings.Contains(main, "Scheduled backups are off") {
		t.Errorf("after turning off: %s", main)
	}
	if s := stored(); !s.Off() || s.Version != 3 {
		t.Fatalf("stored after turning off: %+v", s)
	}

	// Another admin changes it while this form is open: the save is refused.
	b.open("/admin/backups")
	if err := bs.PutBackupSchedule(ctx, idkeeper.BackupSchedule{Spec: "@hourly", UpdatedBy: "user:ada", Version: 3}); err != nil {
		t.Fatal(err)
	}
	b.fill("#s-spec", "@weekly")
	if st := b.submit(saveBtn); st != http.StatusConflict {
		t.Fatalf("a stale form answered %d", st)
	}
	if main := b.text("main"); !strings.Contains(main, "changed since you read it") {
		t.Errorf("the conflict: %s", main)
	}
	if s := stored(); s.Spec != "@hourly" || s.Version != 4 {
		t.Fatalf("a stale form overwrote the schedule: %+v", s)
	}
}
