package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// adminPost sends body to base's admin API route with the admin key and the
// Idempotency-Key key, and returns the answer's status, header and body.
func adminPost(t *testing.T, base, route, key, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+admin.APIPrefix+route, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", adminKey)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// The server gives the admin creates the Idempotency-Key semantics of
// docs/idempotency.md over its own store's records: a user create retried with
// its key is replayed (Idempotent-Replayed: true, the same body) and makes one
// user; another body with the key is 422; on Redis, another replica replays it
// too. A key create retried gets the key without its secret.
func TestServerAdminCreatesIdempotent(t *testing.T) {
	t.Run("bolt", func(t *testing.T) {
		dir := t.TempDir()
		store := "bolt:" + filepath.Join(dir, "idkeeper.db")
		initInProcess(t, store)
		s, _ := startInProcess(t, []string{"--store", store}, map[string]string{AdminKeyEnv: adminKey, AdminPasswordEnv: firstAdminPW})
		if s.base == "" {
			t.Fatalf("the server did not start:\n%s", s.logs)
		}
		checkAdminIdempotency(t, s.base, s.base)
		if code := s.stop(); code != exitOK {
			t.Fatalf("stop: exit %d:\n%s", code, s.logs)
		}
	})
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t, redistest.WithAOF())
		initInProcess(t, rs.URL())
		env := map[string]string{AdminKeyEnv: adminKey, AdminPasswordEnv: firstAdminPW}
		a, _ := startInProcess(t, []string{"--store", rs.URL(), "--state-file", filepath.Join(t.TempDir(), "a")}, env)
		b, _ := startInProcess(t, []string{"--store", rs.URL(), "--state-file", filepath.Join(t.TempDir(), "b")}, env)
		if a.base == "" || b.base == "" {
			t.Fatalf("the servers did not start:\n%s\n%s", a.logs, b.logs)
		}
		checkAdminIdempotency(t, a.base, b.base)
	})
}

// checkAdminIdempotency creates through first and retries through again (the same
// server, or another replica of the same store).
func checkAdminIdempotency(t *testing.T, first, again string) {
	t.Helper()
	// A user: only a logged-in admin creates accounts.
	code, cookie := adminLogin(t, first, "admin", firstAdminPW)
	if code != http.StatusOK {
		t.Fatalf("login: %d", code)
	}
	postUser := func(base, key, body string) (int, http.Header, []byte) {
		req, _ := http.NewRequest(http.MethodPost, base+admin.APIPrefix+"users", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	body := `{"name":"dave","role":"viewer","password":"daves-password-1"}`
	st1, h1, b1 := postUser(first, "3f1c9a7e-user", body)
	st2, h2, b2 := postUser(again, "3f1c9a7e-user", body)
	switch {
	case st1 != http.StatusCreated || h1.Get(idempotency.HeaderReplayed) != "":
		t.Fatalf("the first create: %d %v %s", st1, h1, b1)
	case st2 != http.StatusCreated || h2.Get(idempotency.HeaderReplayed) != "true" || string(b2) != string(b1) ||
		h2.Get("Location") != h1.Get("Location"):
		t.Fatalf("the retry: %d %v %s; first %s", st2, h2, b2, b1)
	}
	st3, _, b3 := postUser(again, "3f1c9a7e-user", `{"name":"dave","role":"admin","password":"daves-password-1"}`)
	var p struct{ Code string }
	_ = json.Unmarshal(b3, &p)
	if st3 != http.StatusUnprocessableEntity || p.Code != string(idempotency.CodeKeyReused) {
		t.Fatalf("another body with the key: %d %s", st3, b3)
	}
	req, _ := http.NewRequest(http.MethodGet, first+admin.APIPrefix+"users", nil)
	req.AddCookie(cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var users wire.UserList
	err = json.NewDecoder(resp.Body).Decode(&users)
	resp.Body.Close()
	if err != nil || len(users.Users) != 2 || users.Users[1].Name != "dave" {
		t.Fatalf("users after the retries: %+v, %v", users, err)
	}

	// An allow-list entry, with the admin key.
	entry := `{"prefix":"127.0.0.0/8","note":"this machine: the keys keep working"}`
	st1, _, b1 = adminPost(t, first, "allowlist", "allow-1", entry)
	st2, h2, b2 = adminPost(t, again, "allowlist", "allow-1", entry)
	if st1 != http.StatusCreated || st2 != http.StatusCreated || h2.Get(idempotency.HeaderReplayed) != "true" || string(b1) != string(b2) {
		t.Fatalf("allow-list create and retry: %d %s; %d %v %s", st1, b1, st2, h2, b2)
	}

	// An API key: the retry gets the key, never the secret.
	var k1, k2 wire.CreateAPIKeyResponse
	st1, _, b1 = adminPost(t, first, "keys", "key-1", `{"description":"billing"}`)
	st2, h2, b2 = adminPost(t, again, "keys", "key-1", `{"description":"billing"}`)
	if err := json.Unmarshal(b1, &k1); err != nil || st1 != http.StatusCreated || !k1.SecretShown || k1.Secret == "" {
		t.Fatalf("key create: %d %s", st1, b1)
	}
	if err := json.Unmarshal(b2, &k2); err != nil || st2 != http.StatusCreated || h2.Get(idempotency.HeaderReplayed) != "true" ||
		k2.SecretShown || k2.Secret != "" || k2.Key.ID != k1.Key.ID || strings.Contains(string(b2), k1.Secret) {
		t.Fatalf("key create retried: %d %v %s", st2, h2, b2)
	}
}
