package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/bolt"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
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
// creates nothing; another body with the key is 422. A key create retried gets the
// key without its secret, which is stored nowhere ("secretShown": false). Without
// it the header is ignored: the retry is a 409.
func TestIdempotentCreates(t *testing.T) {
	e := newEnv(t, loopback, func(s *setup) { s.idem = true })
	e.user("boss", account.RoleAdmin)
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
		e.do("POST", c.path, c.body, "Cookie", tok, "Idempotency-Key", "another").problem(t, protocol.CodeConflict)
		// The same key from another caller is another key.
		e.do("POST", c.path, c.body, "Cookie", e.login("root", rootPW), "Idempotency-Key", "k-"+c.path).problem(t, protocol.CodeConflict)
	}
	before, err := e.reg.Keys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var a, b wire.CreateAPIKeyResponse
	first := e.do("POST", "/admin/api/keys", `{"description":"once"}`, "Cookie", tok, "Idempotency-Key", "key").status1(t, 201)
	first.decode(t, &a)
	again := e.do("POST", "/admin/api/keys", `{ "description" : "once" }`, "Cookie", tok, "Idempotency-Key", "key").status1(t, 201)
	again.decode(t, &b)
	switch {
	case !a.SecretShown || !strings.HasPrefix(a.Secret, "idk_") || a.Message != "":
		t.Fatalf("the first answer: %s", first.raw)
	case again.header.Get(idempotency.HeaderReplayed) != "true" || again.header.Get("Location") != first.header.Get("Location"):
		t.Fatalf("the replay's headers: %v", again.header)
	case b.SecretShown || b.Secret != "" || b.Message != admin.KeyCreateReplayed || b.Key != a.Key:
		t.Fatalf("the replay: %s\nfirst: %s", again.raw, first.raw)
	case strings.Contains(string(again.raw), a.Secret[4:]) || strings.Contains(string(again.raw), `"secret"`):
		t.Fatalf("the replay holds the secret: %s", again.raw)
	}
	if after, err := e.reg.Keys(context.Background()); err != nil || len(after) != len(before)+1 {
		t.Fatalf("keys %d after, %d before: %v", len(after), len(before), err)
	}
	e.do("POST", "/admin/api/keys", `{"description":"twice"}`, "Cookie", tok, "Idempotency-Key", "key").problem(t, idempotency.CodeKeyReused)
	// The record in the store holds no secret either.
	rec, started, err := e.store.(*bolt.Store).Idempotency().Begin(context.Background(),
		idempotency.Scope("user:boss", "admin.keys.create", "key"), "another request", "token", time.Minute)
	if err != nil || started || rec == nil || !strings.Contains(string(rec.Body), a.Key.ID) ||
		strings.Contains(string(rec.Body), a.Secret[4:]) || strings.Contains(fmt.Sprint(rec.Metadata), a.Secret[4:]) {
		t.Fatalf("the stored record: %+v, started %v, %v", rec, started, err)
	}
	// A refused key create (400) is not stored: the corrected request runs with the key.
	e.do("POST", "/admin/api/keys", `{"description":"x","expiresAt":"2020-01-01T00:00:00Z"}`, "Cookie", tok,
		"Idempotency-Key", "past").problem(t, protocol.CodeInvalidRequest)
	var c wire.CreateAPIKeyResponse
	e.do("POST", "/admin/api/keys", `{"description":"x"}`, "Cookie", tok, "Idempotency-Key", "past").status1(t, 201).decode(t, &c)
	if !c.SecretShown || c.Secret == "" {
		t.Fatalf("the corrected create: %+v", c)
	}

	plain := newEnv(t, loopback)
	plain.user("boss", account.RoleAdmin)
	ptok := plain.login("boss", userPW)
	body := `{"prefix":"198.51.100.0/24","note":"partner"}`
	plain.do("POST", "/admin/api/allowlist", body, "Cookie", ptok, "Idempotency-Key", "k").status1(t, 201)
	r := plain.do("POST", "/admin/api/allowlist", body, "Cookie", ptok, "Idempotency-Key", "k").problem(t, protocol.CodeConflict)
	if !strings.Contains(r.str("detail"), "already") {
		t.Fatalf("%s", r.raw)
	}
}
