package admin_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// Issue #29, finding 2: least privilege in the admin. Each test here fails on
// the code before it (441cff1).

// hookURL is a webhook URL the tests set: a secret a full backup holds.
const hookURL = "https://discord.com/api/webhooks/29/least-privilege-token-0123456789"

// usedAt are the members a login or a key's use sets (the record's version with them).
var usedAt = regexp.MustCompile(`,"(lastUsedAt|lastLoginAt)":"[^"]*"|,"version":[0-9]+`)

// state is the store's records but its audit log (which a refused request may
// append to) and the times of last use: what a refused request must leave as it
// was.
func (e *env) state() string {
	e.t.Helper()
	_, recs, _ := backupLines(e.t, []byte(e.snapshot()))
	var keep []string
	for _, r := range recs {
		if !strings.HasPrefix(r, `{"kind":"audit"`) {
			keep = append(keep, usedAt.ReplaceAllString(r, ""))
		}
	}
	return strings.Join(keep, "\n")
}

// An operator cannot make an admin key, in the API or the web form (403
// FORBIDDEN, nothing made); an admin session and an admin key can.
func TestOperatorCannotCreateAdminKey(t *testing.T) {
	e := newEnv(t)
	e.user("operator", account.RoleOperator)
	op := e.login("operator", userPW)
	before := e.state()
	r := e.do("POST", "/admin/api/keys", `{"description":"escalate","admin":true}`, "Cookie", op).problem(t, protocol.CodeForbidden)
	if !strings.Contains(r.str("detail"), "only an admin creates an admin key") {
		t.Fatalf("detail: %s", r.raw)
	}
	if e.state() != before {
		t.Fatal("a refused admin key create changed the store")
	}
	// The operator's own keys are still theirs to make.
	var k wire.CreateAPIKeyResponse
	e.do("POST", "/admin/api/keys", `{"description":"plain"}`, "Cookie", op).status1(t, 201).decode(t, &k)
	if k.Key.Admin {
		t.Fatal("an operator's plain key is an admin key")
	}
	for _, hdr := range [][]string{{"Cookie", e.login("root", rootPW)}, {"X-API-Key", adminKey}} {
		e.do("POST", "/admin/api/keys", `{"description":"admin","admin":true}`, hdr...).status1(t, 201).decode(t, &k)
		if !k.Key.Admin {
			t.Fatalf("%s made no admin key: %+v", hdr[0], k.Key)
		}
	}
}

// Nobody raises a key to admin by an update (400, the key stays a /v1 key); an
// operator may neither change nor revoke an admin key (403 FORBIDDEN, the key
// as it was), while an admin may.
func TestOperatorCannotManageAdminKey(t *testing.T) {
	e := newEnv(t)
	e.user("operator", account.RoleOperator)
	op := e.login("operator", userPW)
	plainID, _ := idkeeper.HashAPIKey(plainKey)
	for _, hdr := range [][]string{{"Cookie", op}, {"X-API-Key", adminKey}} {
		e.do("POST", "/admin/api/keys/"+plainID, `{"admin":true}`, hdr...).problem(t, protocol.CodeInvalidRequest)
	}
	if k, _ := e.reg.Key(context.Background(), plainID); k.Key.Admin {
		t.Fatal("an update raised a key to admin")
	}
	id := adminKeyID(t)
	before := e.state()
	e.do("POST", "/admin/api/keys/"+id, `{"maxNodes":1}`, "Cookie", op).problem(t, protocol.CodeForbidden)
	e.do("POST", "/admin/api/keys/"+id, `{"expiresIn":"1h"}`, "Cookie", op).problem(t, protocol.CodeForbidden)
	e.do("POST", "/admin/api/keys/"+id+"/revoke", "", "Cookie", op).problem(t, protocol.CodeForbidden)
	if e.state() != before {
		t.Fatal("an operator changed an admin key")
	}
	e.do("GET", "/admin/api/me", "", "X-API-Key", adminKey).ok(t) // not revoked
	// The operator still manages the /v1 keys; an admin manages admin keys.
	e.do("POST", "/admin/api/keys/"+plainID, `{"maxNodes":5}`, "Cookie", op).ok(t)
	e.do("POST", "/admin/api/keys/"+id, `{"maxNodes":1}`, "Cookie", e.login("root", rootPW)).ok(t)
}

// A restore takes an admin's session, never a key whatever its role, and the
// admin's password again; it first previews what it replaces and quarantines,
// and applies only that preview (its checksum), once. Every refusal writes
// nothing; a wrong password counts as a failed login of the account and is
// audited; the restore's audit entry says what it replaced and what it
// quarantined until when.
func TestRestoreNeedsAdminSessionAndPassword(t *testing.T) {
	e := newEnv(t, func(s *setup) { s.nodes = 16 })
	e.user("operator", account.RoleOperator)
	e.user("boss", account.RoleAdmin)
	root := e.login("root", rootPW)
	e.do("POST", "/admin/api/me/webhook", `{"url":"`+hookURL+`"}`, "Cookie", root).ok(t)
	_, file := e.raw("GET", "/admin/api/backup", nil, "Cookie", root)
	e.allocV1("after-the-backup", 3)
	e.do("POST", "/admin/api/keys", `{"description":"after the backup"}`, "Cookie", root).status1(t, 201)
	before := e.state()
	oct := []string{"Content-Type", "application/octet-stream"}

	// No key, not even an admin key; no operator.
	for _, path := range []string{"/admin/api/restore/preview", "/admin/api/restore"} {
		e.do("POST", path, string(file), append([]string{"X-API-Key", adminKey}, oct...)...).problem(t, protocol.CodeForbidden)
		e.do("POST", path, string(file), append([]string{"Cookie", e.login("operator", userPW)}, oct...)...).
			problem(t, protocol.CodeForbidden)
	}
	// The old one-step restore is gone: the file as the confirmation is refused.
	e.do("POST", "/admin/api/restore", string(file), append([]string{"Cookie", root}, oct...)...).
		problem(t, protocol.CodeUnsupportedMediaType)

	// The preview: what it replaces, what it quarantines; nothing written.
	e.clk.Advance(time.Minute)
	var pv wire.RestorePreview
	pvr := e.preview(root, file).ok(t)
	pvr.decode(t, &pv)
	cfg := e.reg.Config()
	until := e.clk.Now().Add(cfg.LeaseDuration + cfg.Grace)
	if pv.Replaces.Users != 3 || pv.Replaces.Keys != 3 || pv.Replaces.Leases != 3 || pv.Replaces.Webhooks != 1 ||
		pv.Replaces.Audit == 0 || pv.With.Users != 3 || pv.With.Keys != 2 || pv.With.Leases != 0 || pv.With.Webhooks != 1 ||
		pv.Quarantined != (wire.RestoreNodes{Nodes: "0-15", Count: 16}) || pv.QuarantineEnd != ts(until) ||
		pv.Actor != "user:root" || len(pv.SHA256) != 64 || len(pv.Preview) != 32 {
		t.Fatalf("preview %+v", pv)
	}
	if after := e.state(); after != before {
		t.Fatalf("a preview changed the store:\n%s\n---\n%s", after, before)
	}
	e.waitAudit(admin.AuditRestorePreview, "store")

	confirm := func(tok, preview, sum, pw string) response {
		body, _ := json.Marshal(wire.RestoreConfirm{Preview: preview, SHA256: sum, Password: pw})
		return e.do("POST", "/admin/api/restore", string(body), "Cookie", tok)
	}
	// Without the password; with a wrong one (audited); another file's checksum;
	// another admin's preview; an unknown one.
	if r := confirm(root, pv.Preview, pv.SHA256, "").problem(t, protocol.CodeInvalidRequest); r.str("field") != "password" &&
		!strings.Contains(string(r.raw), "password") {
		t.Fatalf("without the password: %s", r.raw)
	}
	confirm(root, pv.Preview, pv.SHA256, "wrong-password-0000").problem(t, protocol.CodeInvalidRequest)
	e.waitAudit(admin.AuditRestoreRefused, "store")
	confirm(root, pv.Preview, strings.Repeat("0", 64), rootPW).problem(t, protocol.CodeConflict)
	confirm(e.login("boss", userPW), pv.Preview, pv.SHA256, userPW).problem(t, protocol.CodeNotFound)
	confirm(root, strings.Repeat("a", 32), pv.SHA256, rootPW).problem(t, protocol.CodeNotFound)
	if e.state() != before {
		t.Fatal("a refused confirmation changed the store")
	}

	// The right password applies the preview, once.
	var sum wire.Restore
	confirm(root, pv.Preview, pv.SHA256, rootPW).ok(t).decode(t, &sum)
	if sum.Actor != "user:root" || sum.SHA256 != pv.SHA256 || sum.Quarantined.Count != 16 {
		t.Fatalf("restore %+v", sum)
	}
	entry := e.waitAudit(audit.BackupRestore, "store")
	for _, w := range []string{"confirmed with the password", "16 node IDs quarantined until " + sum.QuarantineEnd,
		"replaced 3 users (1 with a webhook), 3 API keys, 3 leases", pv.SHA256} {
		if !strings.Contains(entry.Detail, w) {
			t.Errorf("the audit entry lacks %q: %s", w, entry.Detail)
		}
	}
	root = e.login("root", rootPW)
	confirm(root, pv.Preview, pv.SHA256, rootPW).problem(t, protocol.CodeNotFound)
}

// Wrong passwords given to confirm a restore count as failed logins of the
// account: after LoginPairFailures of them even the right one is throttled.
func TestRestorePasswordIsThrottled(t *testing.T) {
	e := newEnv(t, func(s *setup) { s.nodes = 16 })
	root := e.login("root", rootPW)
	_, file := e.raw("GET", "/admin/api/backup", nil, "Cookie", root)
	pv := e.preview(root, file).ok(t)
	for range account.LoginPairFailures {
		e.confirm(root, pv, "wrong-password-0000").problem(t, protocol.CodeInvalidRequest)
	}
	r := e.confirm(root, pv, rootPW).problem(t, protocol.CodeInvalidRequest)
	if !strings.Contains(r.str("detail"), "too many wrong passwords") {
		t.Fatalf("after %d wrong passwords: %s", account.LoginPairFailures, r.raw)
	}
}

// An operator's backup is redacted: a full one is refused (403), the redacted
// one holds no password hash, key hash or webhook URL, says so in its header,
// and a restore of it is refused before anything is written.
func TestOperatorBackupIsRedacted(t *testing.T) {
	e := newEnv(t)
	e.user("operator", account.RoleOperator)
	root := e.login("root", rootPW)
	e.do("POST", "/admin/api/me/webhook", `{"url":"`+hookURL+`"}`, "Cookie", root).ok(t)
	op := e.login("operator", userPW)
	for _, q := range []string{"", "?gzip=1", "?redacted=0"} {
		e.do("GET", "/admin/api/backup"+q, "", "Cookie", op).problem(t, protocol.CodeForbidden)
	}
	_, full := e.raw("GET", "/admin/api/backup", nil, "Cookie", root)
	resp, data := e.raw("GET", "/admin/api/backup?redacted=1", nil, "Cookie", op)
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Disposition"), "-redacted.idkbackup") {
		t.Fatalf("redacted export: %d %v", resp.StatusCode, resp.Header)
	}
	adminHash, _ := json.Marshal(hexOf(adminKey))
	for _, secret := range []string{"$argon2id$", hookURL, string(adminHash)} {
		if !bytes.Contains(full, []byte(secret)) {
			t.Fatalf("the full backup lacks %q: the test checks nothing", secret)
		}
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("the operator's backup holds %q", secret)
		}
	}
	sum, err := backup.Verify(bytes.NewReader(data))
	if err != nil || !sum.Header.Redacted || sum.Counts.Users != 2 || sum.Counts.Keys != 2 {
		t.Fatalf("the redacted backup: %+v %v", sum, err)
	}
	before := e.state()
	r := e.preview(root, data).problem(t, protocol.CodeInvalidRequest)
	if !strings.Contains(r.str("detail"), "redacted") || !strings.Contains(r.str("detail"), "nothing was written") {
		t.Fatalf("restore of a redacted backup: %s", r.raw)
	}
	if e.state() != before {
		t.Fatal("a refused restore of a redacted backup changed the store")
	}
	e.login("root", rootPW) // every account still logs in
}

// The backup folder holds full backups: an operator lists it, but neither
// backs up into it, downloads nor deletes (403, nothing changed).
func TestOperatorCannotTouchFullBackups(t *testing.T) {
	e := newEnv(t)
	e.user("operator", account.RoleOperator)
	op := e.login("operator", userPW)
	var f wire.BackupFile
	e.do("POST", "/admin/api/backups", "", "X-API-Key", adminKey).status1(t, 201).decode(t, &f)
	e.do("POST", "/admin/api/backups", "", "Cookie", op).problem(t, protocol.CodeForbidden)
	e.do("GET", "/admin/api/backups/"+f.Name, "", "Cookie", op).problem(t, protocol.CodeForbidden)
	e.do("POST", "/admin/api/backups/"+f.Name+"/delete", "", "Cookie", op).problem(t, protocol.CodeForbidden)
	var list wire.Backups
	e.do("GET", "/admin/api/backups", "", "Cookie", op).ok(t).decode(t, &list)
	if len(list.Backups) != 1 || list.Backups[0] != f {
		t.Fatalf("the folder after the refusals: %+v", list.Backups)
	}
}

// hexOf is the hex SHA-256 of an API key's secret, as a full backup holds it.
func hexOf(secret string) string {
	_, h := idkeeper.HashAPIKey(secret)
	return hex.EncodeToString(h)
}

// The key pages follow the same rules: the Admin key box shows to an admin
// only, and an operator's form asking for one is refused (403, no key); an
// operator sees an admin key's page without its forms, and its POSTs are
// refused.
func TestAdminKeyPages(t *testing.T) {
	e := newWebEnv(t)
	e.addUser("otto", account.RoleOperator)
	ada, otto := e.client(), e.client()
	ada.login("admin")
	otto.login("otto")
	if p := otto.get("/admin/keys"); strings.Contains(p.body, `name="admin"`) {
		t.Error("an operator's key form offers an admin key")
	}
	if p := ada.get("/admin/keys"); !strings.Contains(p.body, `name="admin"`) {
		t.Error("an admin's key form offers no admin key")
	}
	checkPage(t, "operator asks for an admin key", otto.post("/admin/keys", url.Values{"description": {"x"}, "admin": {"true"}}),
		http.StatusForbidden)
	if ks, _ := e.reg.Keys(context.Background()); len(ks) != 0 {
		t.Fatalf("a refused form made a key: %+v", ks)
	}
	p := ada.post("/admin/keys", url.Values{"description": {"ops automation"}, "admin": {"true"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("admin makes an admin key: %d %s", p.status, p.body)
	}
	checkPage(t, "admin makes an admin key", ada.get(p.location()), http.StatusOK)
	ks, _ := e.reg.Keys(context.Background())
	if len(ks) != 1 || !ks[0].Key.Admin {
		t.Fatalf("keys after the admin's form: %+v", ks)
	}
	id := ks[0].Key.ID
	kp := otto.get("/admin/keys/" + id)
	checkPage(t, "operator's view of an admin key", kp, http.StatusOK)
	if forms := postForms(kp.body); len(forms) != 1 || !strings.Contains(kp.body, "only an admin may change or revoke it") {
		t.Errorf("the operator's admin key page: forms %q", forms)
	}
	checkPage(t, "operator revokes an admin key", otto.post("/admin/keys/"+id+"/revoke", url.Values{}), http.StatusForbidden)
	checkPage(t, "operator changes an admin key", otto.post("/admin/keys/"+id, url.Values{"maxNodes": {"1"}}), http.StatusForbidden)
	if k, _ := e.reg.Key(context.Background(), id); k.Key.Revoked() || k.Key.MaxNodes != 0 {
		t.Fatalf("the operator changed the admin key: %+v", k.Key)
	}
}
