package admin_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/backup"
)

// TestRestoreBrowser restores a backup through the admin web in Chromium
// (issue #29): the Backups page's upload form previews the file — what the
// restore replaces (users, webhooks, keys, leases, audit entries) and how many
// node IDs it quarantines until when — and writes nothing; a confirmation with a
// wrong password is refused on the same page; the admin's password restores it,
// ends the session and lands on the login page saying what was done. Each page
// is checked with axe-core and photographed at desktop and phone width.
func TestRestoreBrowser(t *testing.T) {
	e := newWebEnv(t)
	ctx := context.Background()
	var file bytes.Buffer
	if _, err := backup.Export(ctx, e.store, &file, backup.Source{Store: "bolt", TakenAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "idkeeper-1-20260301T100000Z.idkbackup")
	if err := os.WriteFile(path, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// After the backup: a key the restore will take away.
	if _, _, err := apikey.NewAdmin(e.reg).Create(ctx, apikey.Spec{Description: "made after the backup"}); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, e.url)
	b.open("/admin/login")
	b.fill("#login-name", "admin")
	b.fill("#login-password", webAdminPW)
	b.submit(`form[action="/admin/login"] button[type=submit]`)
	b.open("/admin/backups")
	b.do("choose the file", chromedp.SetUploadFiles(chromedp.CSS("#r-file"), []string{path}))
	if st := b.submit(`form[action="/admin/restore"] button[type=submit]`); st != http.StatusOK {
		t.Fatalf("preview answered %d: %s", st, b.text("main"))
	}
	main := b.text("main")
	for _, want := range []string{"Nothing is written yet", "4096 node IDs", "nobody gets one until about", "Alert webhooks",
		"Audit entries", "Your password"} {
		if !strings.Contains(main, want) {
			t.Errorf("the preview lacks %q: %s", want, main)
		}
	}
	if ks, _ := e.reg.Keys(ctx); len(ks) != 1 {
		t.Fatalf("the preview changed the keys: %d", len(ks))
	}
	b.check("restore-preview")

	b.fill("#r-pw", "wrong-password-0000")
	if st := b.submit(`form[action="/admin/restore/confirm"] button[type=submit]`); st != http.StatusBadRequest {
		t.Fatalf("a wrong password answered %d", st)
	}
	if msg := b.text("[role=alert]"); !strings.Contains(msg, "The store was not restored") || !strings.Contains(msg, "password is wrong") {
		t.Errorf("wrong password: %q", msg)
	}
	if ks, _ := e.reg.Keys(ctx); len(ks) != 1 {
		t.Fatal("a refused confirmation changed the keys")
	}
	b.checkA11y("restore-wrong-password")

	b.fill("#r-pw", webAdminPW)
	b.submit(`form[action="/admin/restore/confirm"] button[type=submit]`)
	if p := b.path(); !strings.HasPrefix(p, "/admin/login") {
		t.Fatalf("after the restore the browser is at %s", p)
	}
	if msg := b.text("main"); !strings.Contains(msg, "The store was restored from the backup") ||
		!strings.Contains(msg, "4096 node IDs are quarantined until") {
		t.Errorf("after the restore: %s", msg)
	}
	if ks, _ := e.reg.Keys(ctx); len(ks) != 0 {
		t.Fatalf("after the restore %d keys, want the backup's 0", len(ks))
	}
	b.check("restore-done")
}
