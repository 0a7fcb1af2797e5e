package admin_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// testBackups is the backup job of the test envs: a gzip folder of its own,
// "@daily" (the schedule stored in st, as the server seeds it), keep 14, 30
// days, over st. With clock, every reading is a second
// later than the one before, so that backups made at one instant of a fake
// clock get names of their own; without, the real clock.
func testBackups(t *testing.T, st idkeeper.Store, auditor idkeeper.Auditor, clock func() time.Time) *backup.Job {
	t.Helper()
	ss, ok := st.(snapshot.Store)
	if !ok {
		t.Fatalf("%T has no snapshots", st)
	}
	bs := st.(idkeeper.BackupScheduleStore)
	if err := bs.PutBackupSchedule(t.Context(), idkeeper.BackupSchedule{Spec: "@daily", UpdatedBy: "flag:admin-tests",
		UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if clock != nil {
		base, n := clock, atomic.Int64{}
		clock = func() time.Time { return base().Add(time.Duration(n.Add(1)) * time.Second) }
	}
	j, err := backup.NewJob(backup.JobConfig{Folder: backup.Folder{Dir: filepath.Join(t.TempDir(), "backups"), Gzip: true},
		Store: ss, StoreKind: "bolt", Locker: st, Owner: "admin-tests", Schedules: bs, Keep: 14,
		MaxAge: 720 * time.Hour, Audit: auditor, Logger: slog.New(slog.DiscardHandler), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	j.Refresh(t.Context())
	return j
}

// The backup routes: create (201 with the entry, audited with the caller),
// list (settings, last run, entries), download (the file as it is, as an
// attachment), delete (204, audited); names that are not a backup's are 404.
func TestBackupsAPI(t *testing.T) {
	e := newEnv(t)
	op := []string{"Cookie", e.login("root", rootPW), "Sec-Fetch-Site", "same-origin"} // the folder is an admin's (leastpriv_test.go)
	key := []string{"X-API-Key", adminKey}

	var list wire.Backups
	e.do("GET", "/admin/api/backups", "", op...).ok(t).decode(t, &list)
	if !list.Enabled || list.Schedule != "@daily" || list.Keep != 14 || list.MaxAgeMs != (720*time.Hour).Milliseconds() ||
		!list.Compressed || list.NextRun == nil || list.LastRun != nil || list.LastSuccess != nil || len(list.Backups) != 0 ||
		list.Dir == "" {
		t.Fatalf("empty folder: %+v", list)
	}
	var made []wire.BackupFile
	for _, hdr := range [][]string{op, key} {
		r := e.do("POST", "/admin/api/backups", "", hdr...).status1(t, http.StatusCreated)
		var f wire.BackupFile
		r.decode(t, &f)
		if !backup.ValidName(f.Name) || !f.Compressed || f.Bytes <= 0 || len(f.SHA256) != 64 || f.Records == 0 ||
			r.header.Get("Location") != "/admin/api/backups/"+f.Name {
			t.Fatalf("created %+v, Location %q", f, r.header.Get("Location"))
		}
		made = append(made, f)
	}
	e.do("GET", "/admin/api/backups", "", key...).ok(t).decode(t, &list)
	if len(list.Backups) != 2 || list.Backups[0] != made[1] || list.Backups[1] != made[0] {
		t.Fatalf("list %+v, made %+v", list.Backups, made)
	}
	if lr := list.LastRun; lr == nil || !lr.OK || lr.Actor != "key:"+adminKeyID(t) || lr.Backup == nil || *lr.Backup != made[1] ||
		lr.Error != "" || lr.Pruned == nil || list.LastSuccess == nil {
		t.Fatalf("last run %+v", list.LastRun)
	}
	e.waitAudit(backup.AuditCreate, "backup:"+made[0].Name)
	if a := e.waitAudit(backup.AuditCreate, "backup:"+made[1].Name); a.Actor != "key:"+adminKeyID(t) ||
		!strings.Contains(a.Detail, made[1].SHA256) {
		t.Fatalf("audit %+v", a)
	}

	// Download: the file as the folder holds it.
	r := e.do("GET", "/admin/api/backups/"+made[0].Name, "", op...)
	if r.status != 200 || r.header.Get("Content-Type") != admin.BackupGzipType || r.header.Get("Cache-Control") != "no-store" ||
		!strings.Contains(r.header.Get("Content-Disposition"), `attachment; filename=`+made[0].Name) {
		t.Fatalf("download: %d %v", r.status, r.header)
	}
	onDisk, err := os.ReadFile(filepath.Join(list.Dir, made[0].Name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.raw, onDisk) || int64(len(r.raw)) != made[0].Bytes {
		t.Fatalf("downloaded %d bytes, the file has %d", len(r.raw), len(onDisk))
	}
	if sum, err := backup.Verify(bytes.NewReader(r.raw)); err != nil || sum.SHA256 != made[0].SHA256 {
		t.Fatalf("the download verifies: %+v %v", sum, err)
	}
	if r := e.do("GET", "/admin/api/backups/"+made[0].Name, "", append([]string{"Range", "bytes=0-1"}, key...)...); r.status != 206 ||
		!bytes.Equal(r.raw, onDisk[:2]) {
		t.Fatalf("range: %d %q", r.status, r.raw)
	}
	if r := e.do("HEAD", "/admin/api/backups/"+made[0].Name, "", key...); r.status != 200 || len(r.raw) != 0 ||
		r.header.Get("Content-Length") != itoa(len(onDisk)) {
		t.Fatalf("HEAD: %d %v", r.status, r.header)
	}

	// Names that are not a backup of the folder.
	if err := os.WriteFile(filepath.Join(filepath.Dir(list.Dir), "secret.idkbackup"), []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"..%2Fsecret.idkbackup", "..", "%2E%2E%2Fsecret.idkbackup", strings.TrimSuffix(made[0].Name, ".gz"),
		made[0].Name + ".tmp", url.PathEscape("../" + made[0].Name), "idkeeper-20990101T000000Z-00000000.idkbackup"} {
		e.do("GET", "/admin/api/backups/"+name, "", op...).problem(t, protocol.CodeNotFound)
		e.do("POST", "/admin/api/backups/"+name+"/delete", "", op...).problem(t, protocol.CodeNotFound)
	}
	// A path that leaves the folder never reaches the route at all.
	if r := e.do("GET", "/admin/api/backups/../../secret.idkbackup", "", op...); r.header.Get("Content-Type") == admin.BackupGzipType ||
		r.header.Get("Content-Type") == admin.BackupContentType || strings.Contains(string(r.raw), "x\n") {
		t.Fatalf("traversal: %d %v %s", r.status, r.header, r.raw)
	}

	// Delete.
	e.do("POST", "/admin/api/backups/"+made[0].Name+"/delete", "", op...).status1(t, http.StatusNoContent)
	e.do("POST", "/admin/api/backups/"+made[0].Name+"/delete", "", op...).problem(t, protocol.CodeNotFound)
	e.do("GET", "/admin/api/backups/"+made[0].Name, "", op...).problem(t, protocol.CodeNotFound)
	if a := e.waitAudit(backup.AuditDelete, "backup:"+made[0].Name); a.Actor != "user:root" {
		t.Fatalf("delete audit %+v", a)
	}
	e.do("GET", "/admin/api/backups", "", op...).ok(t).decode(t, &list)
	if len(list.Backups) != 1 || list.Backups[0] != made[1] {
		t.Fatalf("after delete %+v", list.Backups)
	}

	// Another replica holds the job lock: 409, nothing written.
	if _, ok, err := e.store.TryLock(context.Background(), backup.JobName, "replica-b", time.Hour); err != nil || !ok {
		t.Fatal(ok, err)
	}
	r = e.do("POST", "/admin/api/backups", "", op...).problem(t, protocol.CodeConflict)
	if !strings.Contains(r.str("detail"), "replica-b") {
		t.Fatalf("conflict %s", r.raw)
	}
}

// adminKeyID is the ID of the envs' admin key.
func adminKeyID(t *testing.T) string {
	t.Helper()
	id, _ := idkeeper.HashAPIKey(adminKey)
	return id
}

// A failed backup is a problem answer, shown as the last run.
func TestBackupsAPIFailure(t *testing.T) {
	e := newEnv(t)
	var list wire.Backups
	e.do("GET", "/admin/api/backups", "", "X-API-Key", adminKey).ok(t).decode(t, &list)
	// The folder's place is taken by a file.
	if err := os.WriteFile(list.Dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := e.do("POST", "/admin/api/backups", "", "X-API-Key", adminKey).problem(t, protocol.CodeInternal)
	if d := r.str("detail"); !strings.Contains(d, "could not be written into the backup folder: not a directory") ||
		strings.Contains(d, list.Dir) {
		t.Fatalf("detail %q", d)
	}
	if err := os.Remove(list.Dir); err != nil {
		t.Fatal(err)
	}
	e.do("GET", "/admin/api/backups", "", "X-API-Key", adminKey).ok(t).decode(t, &list)
	if lr := list.LastRun; lr == nil || lr.OK || !strings.Contains(lr.Error, "not a directory") || lr.Backup != nil || list.LastSuccess != nil {
		t.Fatalf("last run %+v", list.LastRun)
	}
	e.waitAudit(backup.AuditCreateFailed, "backup-dir:"+list.Dir)
}

// A server without a backup folder lists nothing, enabled false; the other
// routes are 404 saying how to enable them; the page says so too.
func TestBackupsDisabled(t *testing.T) {
	e := newEnv(t)
	h, err := admin.New(admin.Config{Registry: e.reg, Accounts: e.acct, Store: e.store, AllowList: e.allow,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	call := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Header.Set("X-API-Key", adminKey)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := call("GET", "/admin/api/backups"); st != 200 || !strings.Contains(body, `"enabled":false`) ||
		!strings.Contains(body, `"backups":[]`) {
		t.Fatalf("list: %d %s", st, body)
	}
	for _, c := range [][2]string{{"POST", "/admin/api/backups"}, {"GET", "/admin/api/backups/idkeeper-20260101T000000Z-0123abcd.idkbackup"},
		{"POST", "/admin/api/backups/idkeeper-20260101T000000Z-0123abcd.idkbackup/delete"}} {
		if st, body := call(c[0], c[1]); st != 404 || !strings.Contains(body, "--backup-dir") {
			t.Errorf("%s %s: %d %s", c[0], c[1], st, body)
		}
	}
}

var backupLinkRE = regexp.MustCompile(`href="(/admin/api/backups/[^"]+)"`)

// The Backups page: operators and admins only (viewers neither see it in the
// navigation nor load it); back up now, download, delete after a confirmation.
func TestBackupsPage(t *testing.T) {
	e := newWebEnv(t)
	e.addUser("vera", account.RoleViewer)
	e.addUser("otto", account.RoleOperator)
	vera, otto := e.client(), e.client()
	vera.login("vera")
	otto.login("otto")
	if p := vera.get("/admin/leases"); strings.Contains(p.body, `href="/admin/backups"`) {
		t.Error("a viewer's navigation links the Backups page")
	}
	checkPage(t, "viewer's backups", vera.get("/admin/backups"), http.StatusForbidden)
	checkPage(t, "viewer's back up now", vera.post("/admin/backups", url.Values{}), http.StatusForbidden)
	checkPage(t, "viewer's delete", vera.post("/admin/backups/delete", url.Values{"name": {"x"}}), http.StatusForbidden)
	if p := vera.get("/admin/api/backups"); p.status != http.StatusForbidden {
		t.Errorf("a viewer lists the backups: %d", p.status)
	}

	// An operator sees the folder and downloads a redacted backup; the rest is
	// an admin's.
	p := otto.get("/admin/backups")
	checkPage(t, "operator's backups", p, http.StatusOK)
	if forms := postForms(p.body); len(forms) != 1 || strings.Contains(p.body, "Back up now") ||
		!strings.Contains(p.body, `href="/admin/api/backup?redacted=1"`) {
		t.Errorf("the operator's page: forms %q", forms)
	}
	checkPage(t, "operator's back up now", otto.post("/admin/backups", url.Values{}), http.StatusForbidden)
	checkPage(t, "operator's restore", otto.post("/admin/restore", url.Values{}), http.StatusForbidden)
	e.addUser("ada", account.RoleAdmin)
	otto = e.client()
	otto.login("ada")
	p = otto.get("/admin/backups")
	checkPage(t, "backups", p, http.StatusOK)
	for _, want := range []string{`href="/admin/backups" aria-current="page"`, "No backup yet", "<code>@daily</code> (UTC)",
		"the newest 14", "none older than 720h", "Back up now", "Preview the restore"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the empty page lacks %q", want)
		}
	}
	if forms := postForms(p.body); len(forms) != 5 || forms[1] != "/admin/backups/schedule" || forms[2] != "/admin/backups/schedule" ||
		forms[3] != "/admin/backups" || forms[4] != "/admin/restore" {
		t.Errorf("forms %q", forms)
	}
	p = otto.post("/admin/backups", url.Values{})
	if p.status != http.StatusSeeOther || p.location() != "/admin/backups" {
		t.Fatalf("back up now: %d to %q: %s", p.status, p.location(), p.body)
	}
	p = otto.get("/admin/backups")
	if !strings.Contains(p.body, "was written:") || !strings.Contains(p.body, `<span class="badge ok">ok</span>`) {
		t.Errorf("after a backup: %s", p.body)
	}
	es, err := e.backups.Folder().List()
	if err != nil || len(es) != 1 {
		t.Fatalf("folder %v %v", es, err)
	}
	b := es[0]
	for _, want := range []string{b.Name, b.SHA256[:12] + "…", "/admin/backups/delete?name=" + b.Name} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	m := backupLinkRE.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatal("no download link")
	}
	dl := otto.get(m[1])
	if dl.status != 200 || int64(len(dl.body)) != b.Size {
		t.Fatalf("download with the session: %d, %d bytes", dl.status, len(dl.body))
	}
	// Delete: confirm, then POST.
	c := otto.get("/admin/backups/delete?name=" + b.Name)
	checkPage(t, "confirm", c, http.StatusOK)
	if !strings.Contains(c.body, b.SHA256) || !strings.Contains(c.body, "Delete the backup") {
		t.Errorf("confirm page: %s", c.body)
	}
	checkPage(t, "confirm a bad name", otto.get("/admin/backups/delete?name=../x"), http.StatusNotFound)
	p = otto.post("/admin/backups/delete", url.Values{"name": {b.Name}})
	if p.status != http.StatusSeeOther || p.location() != "/admin/backups" {
		t.Fatalf("delete: %d %q: %s", p.status, p.location(), p.body)
	}
	if p = otto.get("/admin/backups"); !strings.Contains(p.body, "was deleted.") || !strings.Contains(p.body, "No backup yet") {
		t.Errorf("after the delete: %s", p.body)
	}
	if c := otto.get("/admin/backups/delete?name=" + b.Name); !strings.Contains(c.body, "any more") {
		t.Errorf("confirm a deleted backup: %s", c.body)
	}
	p = otto.post("/admin/backups/delete", url.Values{"name": {b.Name}})
	checkPage(t, "delete again", p, http.StatusNotFound)
	if !strings.Contains(p.body, "could not be deleted") {
		t.Errorf("delete again: %s", p.body)
	}
}
