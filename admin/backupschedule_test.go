package admin_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The schedule route: an operator reads it (with its next times in UTC and its
// version as ETag), only an admin changes it, over the version read (body or
// If-Match); a bad schedule, a missing or stale version is refused with nothing
// written; every change is audited with the old and the new text, and this
// replica's job follows it at once.
func TestBackupScheduleAPI(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.user("olga", account.RoleOperator)
		e.user("vera", account.RoleViewer)
		admin := []string{"Cookie", e.login("root", rootPW), "Sec-Fetch-Site", "same-origin"}
		oper := []string{"Cookie", e.login("olga", userPW), "Sec-Fetch-Site", "same-origin"}
		viewer := []string{"Cookie", e.login("vera", userPW)}
		key := []string{"X-API-Key", adminKey}

		var s wire.BackupSchedule
		r := e.do("GET", "/admin/api/backups/schedule", "", oper...).ok(t)
		r.decode(t, &s)
		day := start.Truncate(24 * time.Hour)
		if s.Schedule != "@daily" || s.Version != 1 || s.UpdatedBy != "flag:admin-tests" || s.UpdatedAt == nil || !s.RunsHere ||
			s.Replica == "" || len(s.NextRuns) != 5 || s.NextRuns[0] != ts(day.Add(24*time.Hour)) || s.NextRuns[4] != ts(day.Add(5*24*time.Hour)) ||
			r.header.Get("ETag") != `"1"` {
			t.Fatalf("GET as seeded: %+v, ETag %q", s, r.header.Get("ETag"))
		}
		e.do("GET", "/admin/api/backups/schedule", "", viewer...).problem(t, protocol.CodeForbidden)
		e.do("PUT", "/admin/api/backups/schedule", `{"schedule":"@hourly","version":1}`, oper...).problem(t, protocol.CodeForbidden)

		entries := len(e.auditAll(key...))
		for _, c := range []struct {
			body, ifMatch, field string
			code                 idkeeper.Code
		}{
			{`{"schedule":"61 * * * *","version":1}`, "", "schedule", protocol.CodeInvalidRequest},
			{`{"schedule":"TZ=Europe/Paris 0 3 * * *","version":1}`, "", "schedule", protocol.CodeInvalidRequest},
			{`{"schedule":"0 0 30 2 *","version":1}`, "", "schedule", protocol.CodeInvalidRequest},
			{`{"schedule":"","version":1}`, "", "schedule", protocol.CodeInvalidRequest},
			{`{"version":1}`, "", "schedule", protocol.CodeInvalidRequest},
			{`{"schedule":"@hourly"}`, "", "version", protocol.CodeInvalidRequest},
			{`{"schedule":"@hourly","version":-1}`, "", "version", protocol.CodeInvalidRequest},
			{`{"schedule":"@hourly","version":1}`, `"2"`, "version", protocol.CodeInvalidRequest},
			{`{"schedule":"@hourly"}`, "soon", "If-Match", protocol.CodeInvalidRequest},
			{`{"schedule":"@hourly","version":1,"keep":3}`, "", "", protocol.CodeInvalidRequest},
			{`{"schedule":"@hourly","version":0}`, "", "", protocol.CodeConflict},
			{`{"schedule":"@hourly","version":2}`, "", "", protocol.CodeConflict},
			{`{"schedule":"@hourly"}`, `"7"`, "", protocol.CodeConflict},
		} {
			hdr := admin
			if c.ifMatch != "" {
				hdr = append(slices.Clone(admin), "If-Match", c.ifMatch)
			}
			p := e.do("PUT", "/admin/api/backups/schedule", c.body, hdr...).problem(t, c.code)
			if c.field != "" && p.str("field") != c.field {
				t.Errorf("PUT %s (If-Match %q): field %q, want %q: %s", c.body, c.ifMatch, p.str("field"), c.field, p.raw)
			}
		}
		e.do("GET", "/admin/api/backups/schedule", "", key...).ok(t).decode(t, &s)
		if s.Schedule != "@daily" || s.Version != 1 {
			t.Fatalf("after refused changes: %+v", s)
		}
		if n := len(e.auditAll(key...)); n != entries {
			t.Fatalf("refused changes added %d audit entries", n-entries)
		}
		// A cross-site PUT with the session is refused before anything.
		e.do("PUT", "/admin/api/backups/schedule", `{"schedule":"@hourly","version":1}`, "Cookie", admin[1],
			"Sec-Fetch-Site", "cross-site").problem(t, protocol.CodeForbidden)

		// A change by the admin's session; the job follows at once.
		r = e.do("PUT", "/admin/api/backups/schedule", `{"schedule":" 0 3 * * * ","version":1}`, admin...).ok(t)
		r.decode(t, &s)
		if s.Schedule != "0 3 * * *" || s.Version != 2 || s.UpdatedBy != "user:root" || *s.UpdatedAt != ts(start) ||
			s.NextRuns[0] != ts(day.Add(3*time.Hour+24*time.Hour)) || r.header.Get("ETag") != `"2"` {
			t.Fatalf("after the change: %+v, ETag %q", s, r.header.Get("ETag"))
		}
		if st := e.backups.Status(); st.Spec != "0 3 * * *" || st.Version != 2 {
			t.Fatalf("the job after the change: %+v", st)
		}
		var list wire.Backups
		e.do("GET", "/admin/api/backups", "", key...).ok(t).decode(t, &list)
		if list.Schedule != "0 3 * * *" || list.NextRun == nil || *list.NextRun != s.NextRuns[0] {
			t.Fatalf("the folder's listing after the change: schedule %q, next %v", list.Schedule, list.NextRun)
		}
		// The same text again is no change.
		e.do("PUT", "/admin/api/backups/schedule", `{"schedule":"0 3 * * *","version":2}`, admin...).ok(t).decode(t, &s)
		if s.Version != 2 {
			t.Fatalf("an unchanged schedule was written: %+v", s)
		}
		// Off, by the admin key over If-Match.
		e.do("PUT", "/admin/api/backups/schedule", `{"schedule":"off"}`, append(slices.Clone(key), "If-Match", `"2"`)...).ok(t).decode(t, &s)
		if s.Schedule != idkeeper.BackupScheduleOff || s.Version != 3 || !strings.HasPrefix(s.UpdatedBy, "key:") || len(s.NextRuns) != 0 {
			t.Fatalf("after turning it off: %+v", s)
		}
		if st := e.backups.Status(); st.Spec != "" || !st.Next.IsZero() {
			t.Fatalf("the job while off: %+v", st)
		}
		var got []string
		for _, a := range e.auditAll(key...) {
			if a.Action == audit.BackupSchedule {
				got = append(got, a.Actor+" "+a.Target+" "+a.Detail)
			}
		}
		want := []string{
			s.UpdatedBy + ` backup-schedule "0 3 * * *" → "off"`,
			`user:root backup-schedule "@daily" → "0 3 * * *"`,
		}
		if !slices.Equal(got, want) {
			t.Fatalf("audit entries\n%q\nwant\n%q", got, want)
		}
		e.do("PUT", "/admin/api/backups/schedule", `{"schedule":"@daily","version":3}`, "X-API-Key", plainKey).status1(t, http.StatusForbidden)
	})
}

// On a replica without --backup-dir the schedule is the store's all the same:
// shown (off while none is stored), changed by an admin, with the page and the
// API saying that this replica takes no scheduled backups.
func TestBackupScheduleWithoutBackupDir(t *testing.T) {
	e := newEnv(t, func(s *setup) { s.noBackups = true })
	admin := []string{"Cookie", e.login("root", rootPW), "Sec-Fetch-Site", "same-origin"}
	var s wire.BackupSchedule
	e.do("GET", "/admin/api/backups/schedule", "", admin...).ok(t).decode(t, &s)
	if s.Schedule != idkeeper.BackupScheduleOff || s.Version != 0 || s.UpdatedBy != "" || s.UpdatedAt != nil || s.RunsHere ||
		len(s.NextRuns) != 0 {
		t.Fatalf("GET on a store without a schedule: %+v", s)
	}
	e.do("PUT", "/admin/api/backups/schedule", `{"schedule":"@weekly","version":0}`, admin...).ok(t).decode(t, &s)
	if s.Schedule != "@weekly" || s.Version != 1 || s.RunsHere || len(s.NextRuns) != 5 {
		t.Fatalf("after the first change: %+v", s)
	}
	if es := e.auditAll(admin...); len(es) == 0 || es[0].Action != audit.BackupSchedule || es[0].Detail != `none (off) → "@weekly"` {
		t.Fatalf("the newest audit entry: %+v", es[0])
	}
	p := e.do("GET", "/admin/backups", "", admin...)
	body := string(p.raw)
	for _, want := range []string{"<code>@weekly</code> (UTC)", "has no <code>--backup-dir</code> and takes none",
		`action="/admin/backups/schedule"`, "Backups are not enabled on this server"} {
		if p.status != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("the page (%d) lacks %q", p.status, want)
		}
	}
}
