package admin_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// requesterJSON is a requester member for pid.
func requesterJSON(pid string) string {
	return `{"machineId":"host-a","pid":` + pid + `,"startedAt":"2026-03-01T09:00:00.000Z","instance":"inst-` + pid + `"}`
}

// The key routes on both stores (issue #20's tests, moved with the routes): an
// admin key creates a key (secret once, 201, Location), lists and reads keys
// without secrets or hashes, revokes one, saying what becomes of its leases; the
// new key allocates on /v1 until it is revoked.
func TestKeys(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		r := e.do("POST", "/admin/api/keys", `{"description":"billing","expiresIn":"720h","maxNodes":2}`, "X-API-Key", adminKey)
		if r.status != 201 || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("create: %d %s", r.status, r.raw)
		}
		var made wire.CreateAPIKeyResponse
		r.decode(t, &made)
		id, _ := idkeeper.HashAPIKey(made.Secret)
		adminID, _ := idkeeper.HashAPIKey(adminKey)
		k := made.Key
		if !strings.HasPrefix(made.Secret, idkeeper.APIKeyPrefix) || k.ID != id || k.Description != "billing" ||
			k.Status != "active" || k.Admin || k.MaxNodes != 2 || k.CreatedBy != "key:"+adminID ||
			k.ExpiresAt == nil || *k.ExpiresAt != ts(start.Add(720*time.Hour)) || k.LastUsedAt != nil || k.RevokedAt != nil {
			t.Fatalf("created key %s", r.raw)
		}
		if loc := r.header.Get("Location"); loc != "/admin/api/keys/"+id {
			t.Fatalf("Location %q", loc)
		}
		e.do("POST", "/v1/leases", `{"requester":`+requesterJSON("1")+`,"count":2}`, "X-API-Key", made.Secret).ok(t)

		r = e.do("GET", "/admin/api/keys", "", "X-API-Key", adminKey).ok(t)
		if strings.Contains(string(r.raw), made.Secret) || strings.Contains(string(r.raw), "hash") {
			t.Fatalf("the list shows a secret or a hash: %s", r.raw)
		}
		var list wire.APIKeyList
		if r.decode(t, &list); len(list.Keys) != 3 {
			t.Fatalf("list: %s", r.raw)
		}
		var got wire.APIKey
		e.do("GET", "/admin/api/keys/"+id, "", "X-API-Key", adminKey).ok(t).decode(t, &got)
		if got.ID != id || got.NodesHeld != 2 {
			t.Fatalf("get: %+v", got)
		}

		r = e.do("POST", "/admin/api/keys/"+id+"/revoke", "", "X-API-Key", adminKey).ok(t)
		var rev wire.RevokeAPIKeyResponse
		r.decode(t, &rev)
		if rev.AlreadyRevoked || rev.Key.Status != "revoked" || rev.Key.RevokedAt == nil || rev.Key.NodesHeld != 2 ||
			!strings.Contains(rev.Leases, "its 2 node IDs stay held until their leases expire; holders cannot renew") {
			t.Fatalf("revoke: %s", r.raw)
		}
		e.do("GET", "/v1/leases/remaining", "", "X-API-Key", made.Secret).problem(t, protocol.CodeAPIKeyInvalid)
		e.do("POST", "/v1/leases/renew", `{"requester":`+requesterJSON("1")+`}`, "X-API-Key", made.Secret).
			problem(t, protocol.CodeAPIKeyInvalid)
		e.clk.Advance(time.Minute)
		e.do("POST", "/admin/api/keys/"+id+"/revoke", "", "X-API-Key", adminKey).ok(t).decode(t, &rev)
		if !rev.AlreadyRevoked || *rev.Key.RevokedAt != ts(start) {
			t.Fatalf("revoke again: %+v", rev)
		}
		e.do("POST", "/admin/api/keys/nope/revoke", "", "X-API-Key", adminKey).problem(t, protocol.CodeNotFound)
		e.do("GET", "/admin/api/keys/nope", "", "X-API-Key", adminKey).problem(t, protocol.CodeNotFound)

		// An admin key made through the API is one; a key made by a user says so.
		r = e.do("POST", "/admin/api/keys", `{"description":"ops","admin":true,"expiresAt":"2027-01-01T00:00:00Z"}`, "X-API-Key", adminKey)
		if r.decode(t, &made); r.status != 201 || !made.Key.Admin || *made.Key.ExpiresAt != "2027-01-01T00:00:00.000Z" {
			t.Fatalf("create an admin key: %d %s", r.status, r.raw)
		}
		e.do("GET", "/admin/api/keys", "", "X-API-Key", made.Secret).ok(t)
		e.user("alice", account.RoleOperator)
		e.do("POST", "/admin/api/keys", `{"description":"by alice"}`, "Cookie", e.login("alice", userPW)).
			status1(t, 201).decode(t, &made)
		if made.Key.CreatedBy != "user:alice" {
			t.Fatalf("createdBy %q", made.Key.CreatedBy)
		}
	})
}

// Who may call the admin API with a key: an admin key; not a /v1 key (403
// ADMIN_KEY_REQUIRED), an empty or unknown key (401), nor an address off the
// allow-list (403 IP_NOT_ALLOWED).
func TestKeyCallersRefused(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		method, path, body string
	}{
		{"GET", "/admin/api/keys", ""},
		{"POST", "/admin/api/keys", `{"description":"x"}`},
		{"GET", "/admin/api/keys/abc", ""},
		{"POST", "/admin/api/keys/abc/revoke", ""},
	} {
		e.do(c.method, c.path, c.body, "X-API-Key", plainKey).problem(t, protocol.CodeAdminKeyRequired)
		e.do(c.method, c.path, c.body, "X-API-Key", "").problem(t, protocol.CodeAPIKeyMissing)
		e.do(c.method, c.path, c.body, "X-API-Key", "idk_not-a-key-0123456789abcdefghij").problem(t, protocol.CodeAPIKeyInvalid)
	}
	if ks, _ := e.reg.Keys(context.Background()); len(ks) != 2 {
		t.Fatalf("a refused create made a key: %+v", ks)
	}
	far := newEnv(t, func(s *setup) { s.floor = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")} })
	far.do("GET", "/admin/api/keys", "", "X-API-Key", adminKey).problem(t, protocol.CodeIPNotAllowed)
	// A session is no key: the allow-list does not apply to it.
	far.user("alice", account.RoleViewer)
	far.do("GET", "/admin/api/keys", "", "Cookie", far.login("alice", userPW)).ok(t)
}

// Create and update bodies are decoded strictly, as on /v1.
func TestKeyBodies(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		body, field string
	}{
		{`{}`, "description"},
		{`{"description":"  "}`, "description"},
		{`{"description":"` + strings.Repeat("x", 201) + `"}`, "description"},
		{`{"description":"x","Description":"y"}`, "Description"},
		{`{"description":"x","description":"y"}`, "description"},
		{`{"description":"x","secret":"mine"}`, "secret"},
		{`{"description":"x","expiresIn":"soon"}`, "expiresIn"},
		{`{"description":"x","expiresIn":"-1h"}`, "expiresIn"},
		{`{"description":"x","expiresIn":"0s"}`, "expiresIn"},
		{`{"description":"x","expiresIn":"1h","expiresAt":"2027-01-01T00:00:00Z"}`, "expiresIn"},
		{`{"description":"x","expiresAt":"2026-03-01T09:00:00Z"}`, "expiresAt"},
		{`{"description":"x","maxNodes":-1}`, "maxNodes"},
		{`{"description":"x","maxNodes":1.5}`, "maxNodes"},
		{`{"description":"x","admin":"yes"}`, "admin"},
		{`{"description":7}`, "description"},
		{`[]`, "body"},
		{`{"description":"x"} {}`, "body"},
	} {
		r := e.do("POST", "/admin/api/keys", c.body, "X-API-Key", adminKey).problem(t, protocol.CodeInvalidRequest)
		if r.str("field") != c.field {
			t.Errorf("%s: field %q, want %q: %s", c.body, r.str("field"), c.field, r.raw)
		}
	}
	e.do("POST", "/admin/api/keys", `{"description":"x"}`, "X-API-Key", adminKey, "Content-Type", "text/plain").
		problem(t, protocol.CodeUnsupportedMediaType)
	e.do("POST", "/admin/api/keys", `{"description":"`+strings.Repeat("x", 70<<10)+`"}`, "X-API-Key", adminKey).
		problem(t, protocol.CodeBodyTooLarge)
	if ks, _ := e.reg.Keys(context.Background()); len(ks) != 2 {
		t.Fatalf("a refused create made a key: %d keys", len(ks))
	}

	plainID, _ := idkeeper.HashAPIKey(plainKey)
	for _, c := range []struct {
		body, field string
	}{
		{`{}`, "body"},
		{`{"maxNodes":-1}`, "maxNodes"},
		{`{"maxNodes":4097}`, "maxNodes"},
		{`{"expiresAt":"2026-03-01T09:00:00Z"}`, "expiresAt"},
		{`{"expiresAt":"tomorrow"}`, "expiresAt"},
		{`{"expiresIn":"1h","expiresAt":null}`, "expiresIn"},
		{`{"expiresIn":"1h","expiresAt":"2027-01-01T00:00:00Z"}`, "expiresIn"},
		{`{"description":"renamed"}`, "description"},
	} {
		r := e.do("POST", "/admin/api/keys/"+plainID, c.body, "X-API-Key", adminKey).problem(t, protocol.CodeInvalidRequest)
		if r.str("field") != c.field {
			t.Errorf("update %s: field %q, want %q: %s", c.body, r.str("field"), c.field, r.raw)
		}
	}
}

// Setting a key's expiry and quota: an expiry, then never (null); a quota; a
// revoked key cannot change; each change is audited.
func TestKeyUpdate(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.user("alice", account.RoleOperator)
		tok := e.login("alice", userPW)
		plainID, _ := idkeeper.HashAPIKey(plainKey)
		var k wire.APIKey
		e.do("POST", "/admin/api/keys/"+plainID, `{"expiresIn":"48h","maxNodes":3}`, "Cookie", tok).ok(t).decode(t, &k)
		if k.ExpiresAt == nil || *k.ExpiresAt != ts(start.Add(48*time.Hour)) || k.MaxNodes != 3 {
			t.Fatalf("%+v", k)
		}
		e.do("POST", "/admin/api/keys/"+plainID, `{"expiresAt":null}`, "Cookie", tok).ok(t).decode(t, &k)
		if k.ExpiresAt != nil || k.MaxNodes != 3 {
			t.Fatalf("never: %+v", k)
		}
		e.do("POST", "/admin/api/keys/"+plainID, `{"expiresAt":"2026-06-01T00:00:00Z","maxNodes":0}`, "Cookie", tok).ok(t).decode(t, &k)
		if *k.ExpiresAt != "2026-06-01T00:00:00.000Z" || k.MaxNodes != 0 {
			t.Fatalf("%+v", k)
		}
		e.do("POST", "/admin/api/keys/nope", `{"maxNodes":1}`, "Cookie", tok).problem(t, protocol.CodeNotFound)
		e.do("POST", "/admin/api/keys/"+plainID+"/revoke", "", "Cookie", tok).ok(t)
		e.do("POST", "/admin/api/keys/"+plainID, `{"maxNodes":1}`, "Cookie", tok).problem(t, protocol.CodeConflict)
		var n int
		for _, x := range e.auditAll("Cookie", tok) {
			if x.Action == audit.KeyUpdate && x.Target == "key:"+plainID && x.Actor == "user:alice" && x.RemoteIP == "127.0.0.1" {
				n++
			}
		}
		if n != 3 {
			t.Fatalf("%d updates audited, want 3", n)
		}
	})
}

// Secrets are in one answer only, the create's: never in a list, a read, the
// audit log or the users; passwords and their hashes never.
func TestSecretsNeverShown(t *testing.T) {
	e := newEnv(t)
	e.user("boss", account.RoleAdmin)
	tok := e.login("boss", userPW)
	var made wire.CreateAPIKeyResponse
	e.do("POST", "/admin/api/keys", `{"description":"secret test"}`, "Cookie", tok).status1(t, 201).decode(t, &made)
	e.do("POST", "/admin/api/users", `{"name":"carol","role":"viewer","password":"carols-password-1"}`, "Cookie", tok).status1(t, 201)
	e.do("POST", "/admin/api/users/carol/password", `{"password":"carols-password-2"}`, "Cookie", tok).status1(t, 204)
	carol := e.login("carol", "carols-password-2")
	e.do("POST", "/admin/api/me/password", `{"oldPassword":"carols-password-2","newPassword":"carols-password-3"}`, "Cookie", carol).
		status1(t, 204)
	e.do("POST", "/admin/api/login", `{"name":"carol","password":"carols-wrong-pass"}`).problem(t, protocol.CodeLoginFailed)
	secrets := []string{made.Secret, made.Secret[len(idkeeper.APIKeyPrefix):], adminKey, plainKey, userPW, rootPW,
		"carols-password-1", "carols-password-2", "carols-password-3", "carols-wrong-pass", "$argon2id", tok, carol}
	for _, path := range []string{"/admin/api/keys", "/admin/api/keys/" + made.Key.ID, "/admin/api/users", "/admin/api/me",
		"/admin/api/audit?limit=1000", "/admin/api/allowlist", "/admin/api/store", "/admin/api/leases"} {
		r := e.do("GET", path, "", "Cookie", tok).ok(t)
		for _, s := range secrets {
			if strings.Contains(string(r.raw), s) {
				t.Errorf("GET %s shows a secret %q: %s", path, s, r.raw)
			}
		}
	}
	es, err := e.store.AuditEntriesBefore(context.Background(), 0, 1000)
	if err != nil || len(es) < 5 {
		t.Fatalf("%d entries, %v", len(es), err)
	}
	for _, x := range es {
		for _, s := range secrets {
			if strings.Contains(x.Detail+x.Target+x.Actor, s) {
				t.Errorf("the audit log holds a secret: %+v", x)
			}
		}
	}
}
