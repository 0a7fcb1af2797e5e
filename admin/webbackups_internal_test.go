package admin

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/backup"
)

// The Backups page and its confirmation drawn in the states a test server
// rarely shows: disabled, a failed last run, an unreadable folder, a damaged
// file, no schedule, a schedule without times.
func TestBackupTemplates(t *testing.T) {
	h := &Handler{log: slog.New(slog.DiscardHandler)}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	op := account.User{Name: "otto", Role: account.RoleOperator}
	good := backup.Entry{Name: "idkeeper-20261130T030000Z-0123abcd.idkbackup.gz", Size: 12345, TakenAt: now.Add(-9 * time.Hour),
		Generation: "0123abcd", Compressed: true, SHA256: strings.Repeat("ab", 32), Records: 4102}
	damaged := backup.Entry{Name: "idkeeper-20261129T030000Z-0123abcd.idkbackup", Size: 10, TakenAt: now.Add(-33 * time.Hour)}
	st := backup.Status{Dir: "/var/backups/<idk>", Gzip: true, Spec: "0 3 * * *", Next: now.Add(15 * time.Hour), Keep: 14,
		MaxAge: 720 * time.Hour, Last: &backup.Run{Actor: "system", Started: now.Add(-9 * time.Hour), Err: errors.New("disk full")}}
	manual := backup.Status{Dir: "/b", Last: &backup.Run{Actor: "user:otto", Started: now, Duration: 1500 * time.Millisecond, Entry: good}}
	never := st
	never.Next = time.Time{}
	cases := []struct {
		tmpl, want string
		p          any
	}{
		{"backups", "Backups are not enabled on this server", backupsView{Now: now}},
		{"backups", "--backup-dir DIR", backupsView{Now: now}},
		{"backups", "/var/backups/&lt;idk&gt;", backupsView{Enabled: true, Status: st, Now: now}},
		{"backups", `<span class="badge reject">failed</span>`, backupsView{Enabled: true, Status: st, LastErr: "disk full", Now: now}},
		{"backups", "The next one is due", backupsView{Enabled: true, Status: st, Now: now}},
		{"backups", "in 15h 0m", backupsView{Enabled: true, Status: st, Now: now}},
		{"backups", "none: the schedule has no time left", backupsView{Enabled: true, Status: never, Now: now}},
		{"backups", "The backup folder cannot be read: no access", backupsView{Enabled: true, Status: st, ListErr: "no access", Now: now}},
		{"backups", "abababababab…", backupsView{Enabled: true, Status: st, Rows: []backupRow{backupRowOf(good), backupRowOf(damaged)}, Now: now}},
		{"backups", "12.3 kB", backupsView{Enabled: true, Status: st, Rows: []backupRow{backupRowOf(good)}, Now: now}},
		{"backups", `<span class="badge reject">damaged</span>`, backupsView{Enabled: true, Status: st, Rows: []backupRow{backupRowOf(damaged)}, Now: now}},
		{"backups", "none: manual backups only", backupsView{Enabled: true, Status: manual, Now: now}},
		{"backups", "took 1.5s", backupsView{Enabled: true, Status: manual, Took: "1.5s", Now: now}},
		{"backups", "no limit by count; no limit by age", backupsView{Enabled: true, Status: manual, Now: now}},
		{"backupdelete", "12345 bytes", backupDeleteView{Row: backupRowOf(good), Found: true, Name: good.Name}},
		{"backupdelete", "unknown: the file has no trailer", backupDeleteView{Row: backupRowOf(damaged), Found: true, Name: damaged.Name}},
		{"backupdelete", "any more", backupDeleteView{Name: good.Name}},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		h.renderBlock(rec, httptest.NewRequest(http.MethodGet, "/admin/backups", nil), http.StatusOK, c.tmpl, "layout",
			view{Title: "Backups", Nav: "backups", User: op, SignedIn: true, P: c.p})
		if body := rec.Body.String(); rec.Code != http.StatusOK || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d, want %q in:\n%s", c.tmpl, rec.Code, c.want, body)
		}
	}
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1000: "1.0 kB", 12345: "12.3 kB", 5_600_000: "5.6 MB",
		7_000_000_000: "7.0 GB", 9_000_000_000_000: "9000.0 GB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
	// The navigation shows Backups to operators and admins only.
	for role, want := range map[account.Role]bool{account.RoleViewer: false, account.RoleOperator: true, account.RoleAdmin: true} {
		got := false
		for _, it := range (view{SignedIn: true, User: account.User{Role: role}}).NavItems() {
			got = got || it.Href == "/admin/backups"
		}
		if got != want {
			t.Errorf("%s sees Backups in the navigation: %t", role, got)
		}
	}
}
