package admin_test

import (
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/admin"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// New refuses a config without its required parts; the defaults are /v1's.
func TestNew(t *testing.T) {
	e := newEnv(t)
	for _, c := range []admin.Config{
		{Accounts: e.acct, Store: e.store},
		{Registry: e.reg, Store: e.store},
		{Registry: e.reg, Accounts: e.acct},
		{Registry: e.reg, Accounts: e.acct, Store: e.store, Timeout: -1},
	} {
		if _, err := admin.New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
	if _, err := admin.New(admin.Config{Registry: e.reg, Accounts: e.acct, Store: e.store}); err != nil {
		t.Fatal(err)
	}
	if admin.DefaultMaxBodyBytes != idkhttp.DefaultMaxBodyBytes || admin.DefaultTimeout != idkhttp.DefaultTimeout ||
		admin.RetryAfterSeconds != idkhttp.RetryAfterSeconds || admin.APIPrefix != idkhttp.AdminPrefix {
		t.Fatal("the admin API's defaults differ from /v1's")
	}
}

// With Config.Idempotency, a create of a user or an allow-list entry retried with
// its Idempotency-Key gets the first answer again (Idempotent-Replayed: true) and
// creates nothing; another body with the key is 422; a key create is never
// replayed (its secret is kept nowhere). Without it the header is ignored: the
// retry is a 409.
func TestIdempotentCreates(t *testing.T) {
	e := newEnv(t, loopback, func(s *setup) { s.idem = true })
	e.user("boss", idkeeper.RoleAdmin)
	tok := e.login("boss", userPW)
	for _, c := range []struct{ path, body, other string }{
		{"/admin/api/users", `{"name":"dave","role":"viewer","password":"daves-password-1"}`,
			`{"name":"dave","role":"operator","password":"daves-password-1"}`},
		{"/admin/api/allowlist", `{"prefix":"198.51.100.0/24","note":"partner"}`, `{"prefix":"198.51.100.0/24","note":"other"}`},
	} {
		first := e.do("POST", c.path, c.body, "Cookie", tok, "Idempotency-Key", "k-"+c.path).status1(t, 201)
		again := e.do("POST", c.path, c.body, "Cookie", tok, "Idempotency-Key", "k-"+c.path).status1(t, 201)
		if string(again.raw) != string(first.raw) || again.header.Get(idempotency.HeaderReplayed) != "true" ||
			again.header.Get("Location") != first.header.Get("Location") {
			t.Fatalf("%s: replay %s %v, first %s", c.path, again.raw, again.header, first.raw)
		}
		e.do("POST", c.path, c.other, "Cookie", tok, "Idempotency-Key", "k-"+c.path).status1(t, 422)
		e.do("POST", c.path, c.body, "Cookie", tok, "Idempotency-Key", "another").problem(t, idkeeper.CodeConflict)
		// The same key from another caller is another key.
		e.do("POST", c.path, c.body, "Cookie", e.login("root", rootPW), "Idempotency-Key", "k-"+c.path).problem(t, idkeeper.CodeConflict)
	}
	var a, b wire.CreateAPIKeyResponse
	e.do("POST", "/admin/api/keys", `{"description":"once"}`, "Cookie", tok, "Idempotency-Key", "key").status1(t, 201).decode(t, &a)
	e.do("POST", "/admin/api/keys", `{"description":"once"}`, "Cookie", tok, "Idempotency-Key", "key").status1(t, 201).decode(t, &b)
	if a.Key.ID == b.Key.ID || a.Secret == b.Secret {
		t.Fatal("a key create was replayed")
	}

	plain := newEnv(t, loopback)
	plain.user("boss", idkeeper.RoleAdmin)
	ptok := plain.login("boss", userPW)
	body := `{"prefix":"198.51.100.0/24","note":"partner"}`
	plain.do("POST", "/admin/api/allowlist", body, "Cookie", ptok, "Idempotency-Key", "k").status1(t, 201)
	r := plain.do("POST", "/admin/api/allowlist", body, "Cookie", ptok, "Idempotency-Key", "k").problem(t, idkeeper.CodeConflict)
	if !strings.Contains(r.str("detail"), "already") {
		t.Fatalf("%s", r.raw)
	}
}
