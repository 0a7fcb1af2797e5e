package admin_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// POST /admin/api/backups with an Idempotency-Key, as the other admin creates:
// the retry gets the first backup again, never a second one; another body with
// the key is 422; another key is another backup.
func TestBackupCreateIdempotent(t *testing.T) {
	e := newEnv(t, func(s *setup) { s.idem = true })
	key := []string{"X-API-Key", adminKey, "Idempotency-Key", "nightly-1"}
	first := e.do("POST", "/admin/api/backups", "", key...).status1(t, http.StatusCreated)
	again := e.do("POST", "/admin/api/backups", "", key...).status1(t, http.StatusCreated)
	if string(again.raw) != string(first.raw) || again.header.Get(idempotency.HeaderReplayed) != "true" ||
		again.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("replay %s %v, first %s", again.raw, again.header, first.raw)
	}
	if es, err := e.backups.Folder().List(); err != nil || len(es) != 1 {
		t.Fatalf("backups after the retry: %v %v", es, err)
	}
	e.do("POST", "/admin/api/backups", `{"note":"other"}`, key...).problem(t, idempotency.CodeKeyReused)
	// The same key from another caller is another key, and another backup (two
	// seconds on: backups are named to the second).
	e.clk.Advance(2 * time.Second)
	r := e.do("POST", "/admin/api/backups", "", "Cookie", e.login("root", rootPW), "Sec-Fetch-Site", "same-origin",
		"Idempotency-Key", "nightly-1").status1(t, http.StatusCreated)
	var a, b wire.BackupFile
	first.decode(t, &a)
	r.decode(t, &b)
	if a.Name == b.Name || r.header.Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("another caller's key replayed %s", r.raw)
	}
	if es, _ := e.backups.Folder().List(); len(es) != 2 {
		t.Fatalf("%d backups", len(es))
	}
}
