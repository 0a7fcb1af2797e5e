package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const firstAdminPW = "the first admin's password"

// adminLogin logs in on base's admin API and returns the status and the session
// cookie.
func adminLogin(t *testing.T, base, name, pw string) (int, *http.Cookie) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"name": name, "password": pw})
	resp, err := http.Post(base+"/admin/api/login", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	for _, c := range resp.Cookies() {
		if c.Value != "" {
			return resp.StatusCode, c
		}
	}
	return resp.StatusCode, nil
}

// getStatus answers the status of GET base+path, with the cookie when not nil.
func getStatus(t *testing.T, base, path string, c *http.Cookie) int {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	if c != nil {
		req.AddCookie(c)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Issue #10: IDKEEPER_ADMIN_PASSWORD makes the first admin (--admin-user) on a
// store without accounts, and only then; it logs in through /admin/api/login on
// the API listener; users works through the server as that admin; the lease
// grants of the API are audited, with the key and the address, in a log that
// verifies once the server stopped.
func TestServerFirstAdminLoginAndAudit(t *testing.T) {
	dir := t.TempDir()
	store := "bolt:" + filepath.Join(dir, "idkeeper.db")
	initInProcess(t, store)
	pwFile := filepath.Join(dir, "admin-pw")
	if err := os.WriteFile(pwFile, []byte(firstAdminPW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{BootstrapKeyEnv: bootstrapKey, AdminKeyEnv: adminKey, AdminPasswordEnv + "_FILE": pwFile}
	s, _ := startInProcess(t, []string{"--store", store, "--admin-user", "root"}, env)
	if s.base == "" {
		t.Fatalf("the server did not start:\n%s", s.logs)
	}
	if !strings.Contains(s.logs.String(), `"msg":"first admin created","user":"root"`) {
		t.Fatalf("no first admin in the log:\n%s", s.logs)
	}
	if code, _ := adminLogin(t, s.base, "root", "wrong password 123"); code != http.StatusUnauthorized {
		t.Fatalf("login with a wrong password: %d", code)
	}
	code, cookie := adminLogin(t, s.base, "root", firstAdminPW)
	if code != http.StatusOK || cookie == nil {
		t.Fatalf("login: %d %v", code, cookie)
	}
	if got := getStatus(t, s.base, "/admin/api/me", cookie); got != http.StatusOK {
		t.Fatalf("me with the session: %d", got)
	}

	// users through the server, as the admin who logs in.
	ctx := context.Background()
	login := map[string]string{loginPasswordEnv: firstAdminPW}
	withStdin(t, "carol's password 1")
	if code, out, stderr := runInProcess(ctx, []string{"users", "add", "carol", "--role", "viewer", "--server", s.base,
		"--login-user", "root"}, login); code != exitOK || !strings.Contains(out, "added user carol (role viewer)") {
		t.Fatalf("users add through the server: %d %q %s", code, out, stderr)
	}
	if code, out, stderr := runInProcess(ctx, []string{"users", "set-role", "carol", "operator", "--server", s.base,
		"--login-user", "root"}, login); code != exitOK || out != "user carol: role operator\n" {
		t.Fatalf("users set-role through the server: %d %q %s", code, out, stderr)
	}
	withStdin(t, "carol's new password 2")
	if code, out, stderr := runInProcess(ctx, []string{"users", "reset-password", "carol", "--server", s.base,
		"--login-user", "root"}, login); code != exitOK || !strings.Contains(out, "password reset") {
		t.Fatalf("users reset-password through the server: %d %q %s", code, out, stderr)
	}
	code, viaServer, stderr := runInProcess(ctx, []string{"users", "list", "--server", s.base, "--login-user", "root"}, login)
	if code != exitOK || !strings.Contains(viaServer, "carol  operator") {
		t.Fatalf("users list through the server: %d %s %s", code, viaServer, stderr)
	}
	if code, _, stderr := runInProcess(ctx, []string{"users", "list", "--server", s.base, "--login-user", "root"},
		map[string]string{loginPasswordEnv: "wrong password 123"}); code != exitFail || !strings.Contains(stderr, "LOGIN_FAILED") {
		t.Fatalf("users list with a wrong login: %d %s", code, stderr)
	}
	// An admin API key lists the accounts, and changes none.
	withKey := map[string]string{AdminKeyEnv: adminKey}
	if code, out, stderr := runInProcess(ctx, []string{"users", "list", "--server", s.base}, withKey); code != exitOK || out != viaServer {
		t.Fatalf("users list with the admin key: %d %q %s", code, out, stderr)
	}
	withStdin(t, "dave's password 12")
	if code, _, stderr := runInProcess(ctx, []string{"users", "add", "dave", "--role", "viewer", "--server", s.base}, withKey); code != exitFail ||
		!strings.Contains(stderr, "FORBIDDEN") || !strings.Contains(stderr, "--login-user") {
		t.Fatalf("users add with the admin key: %d %s", code, stderr)
	}

	// A lease grant through /v1, audited.
	who := `{"requester":{"machineId":"m","pid":1,"startedAt":"2026-11-30T10:00:00Z","instance":"a"},"count":2}`
	s.client(bootstrapKey).do("POST", "/v1/leases", who, 200)
	if code := s.stop(); code != exitOK {
		t.Fatalf("exit %d:\n%s", code, s.logs)
	}
	if strings.Contains(s.logs.String(), firstAdminPW) || strings.Contains(s.logs.String(), "carol's") {
		t.Fatalf("a password was logged:\n%s", s.logs)
	}

	code, out, stderr := runInProcess(ctx, []string{"audit", "verify", "--store", store}, nil)
	if code != exitOK || !strings.HasPrefix(out, "audit log intact: entries 1..") {
		t.Fatalf("audit verify: %d %q %s", code, out, stderr)
	}
	_, out, _ = runInProcess(ctx, []string{"audit", "list", "--store", store, "--format", "json"}, nil)
	var rows []auditRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err, out)
	}
	seen := map[string]auditRow{}
	for _, r := range rows { // newest first: keep the newest of each action
		if _, ok := seen[r.Action]; !ok {
			seen[r.Action] = r
		}
	}
	if g := seen["lease.grant"]; !strings.HasPrefix(g.Actor, "key:") || g.RemoteIP != "127.0.0.1" || !strings.Contains(g.Detail, "count 2") {
		t.Fatalf("the grant's entry: %+v", g)
	}
	for _, a := range []string{"user.create", "user.login", "user.login_failed", "user.update", "user.password"} {
		if _, ok := seen[a]; !ok {
			t.Fatalf("no %s entry in %s", a, out)
		}
	}
	if seen["user.create"].Actor != "user:root" {
		t.Fatalf("the newest user.create: %+v", seen["user.create"])
	}

	// The users and the store as the operator sees them, and a restart with the
	// password: accounts exist, no new admin.
	_, onStore, _ := runInProcess(ctx, []string{"users", "list", "--store", store}, nil)
	if onStore != viaServer {
		t.Fatalf("users list through the server:\n%s\non the store:\n%s", viaServer, onStore)
	}
	s, _ = startInProcess(t, []string{"--store", store, "--admin-user", "other"}, env)
	if s.base == "" || !strings.Contains(s.logs.String(), "admin accounts exist") || strings.Contains(s.logs.String(), "first admin created") {
		t.Fatalf("restart:\n%s", s.logs)
	}
	s.stop()
}

// Issue #10: a password the first admin could not have (too short; issue #29: a
// common one) is refused before the store is touched, and so are session timeouts and a retention out of range.
func TestAdminSettingsAreCheckedAtStart(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{AdminPasswordEnv: "short"}, "IDKEEPER_ADMIN_PASSWORD: a password has 12 to 1024 bytes"},
		{nil, map[string]string{AdminPasswordEnv: "Password1234"}, "IDKEEPER_ADMIN_PASSWORD: the password is one of the most common"}, // issue #29
		{[]string{"--admin-user", "Root!"}, map[string]string{AdminPasswordEnv: firstAdminPW}, `--admin-user "Root!"`},
		{[]string{"--session-idle-timeout", "10s"}, nil, "session-idle-timeout = 10s is outside its range"},
		{[]string{"--session-absolute-timeout", "1000h"}, nil, "session-absolute-timeout = 1000h0m0s is outside its range"},
		{[]string{"--audit-retention", "30m"}, nil, "audit-retention = 30m0s is outside its range 1h0m0s"},
		{[]string{"--audit-retention", "0"}, nil, "audit-retention = 0s is outside its range"},
	} {
		db := filepath.Join(t.TempDir(), "idkeeper.db")
		args := append([]string{"server", "--listen", "127.0.0.1:0", "--store", "bolt:" + db}, c.args...)
		code, _, stderr := runInProcess(context.Background(), args, c.env)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %v: exit %d, %q; want 2 and %q", c.args, c.env, code, stderr, c.want)
		}
		if _, err := os.Stat(db); err == nil {
			t.Errorf("%v: the store file was created before the settings were checked", c.args)
		}
	}
}

// Issue #10: with --admin-listen the admin web is served there, and not on the API
// listener.
func TestAdminListen(t *testing.T) {
	store := "bolt:" + filepath.Join(t.TempDir(), "idkeeper.db")
	initInProcess(t, store)
	env := map[string]string{BootstrapKeyEnv: bootstrapKey, AdminPasswordEnv: firstAdminPW}
	s, _ := startInProcess(t, []string{"--store", store, "--admin-listen", "127.0.0.1:0"}, env)
	if s.base == "" {
		t.Fatalf("the server did not start:\n%s", s.logs)
	}
	defer s.stop()
	m := regexp.MustCompile(`"msg":"serving the admin web on its own listener","addr":"([^"]+)"`).FindStringSubmatch(s.logs.String())
	if m == nil {
		t.Fatalf("no admin listener in the log:\n%s", s.logs)
	}
	admin := "http://" + m[1]
	if code, cookie := adminLogin(t, admin, "admin", firstAdminPW); code != http.StatusOK || getStatus(t, admin, "/admin/api/me", cookie) != http.StatusOK {
		t.Fatalf("login on the admin listener: %d", code)
	}
	if got := getStatus(t, admin, "/admin/api/me", nil); got != http.StatusUnauthorized {
		t.Fatalf("me without a session on the admin listener: %d", got)
	}
	for _, p := range []string{"/admin/", "/admin/api/me"} {
		if got := getStatus(t, s.base, p, nil); got != http.StatusNotFound {
			t.Fatalf("%s on the API listener: %d, want 404", p, got)
		}
	}
	if code, _ := adminLogin(t, s.base, "admin", firstAdminPW); code != http.StatusNotFound {
		t.Fatalf("login on the API listener: %d, want 404", code)
	}
	if got := getStatus(t, admin, "/v1/version", nil); got != http.StatusNotFound {
		t.Fatalf("/v1/version on the admin listener: %d, want 404", got)
	}
	s.client(bootstrapKey).do("GET", "/v1/leases/remaining", "", 200)
}

// Issue #10: dev prints the admin web's URL and a login made on first start that
// works, only once: a restart says "as before".
func TestDevPrintsTheAdminLogin(t *testing.T) {
	dir := t.TempDir()
	re := regexp.MustCompile(`admin\s+(http://\S+/admin/)\n\s+admin login: (.*)\n`)
	start := func() (url, login string, stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
		done := make(chan int, 1)
		go func() {
			args := []string{"dev", "--listen", "127.0.0.1:0", "--gateway-listen", "127.0.0.1:0", "--data", dir}
			done <- run(ctx, args, func(string) (string, bool) { return "", false }, stdout, stderr)
		}()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if m := re.FindStringSubmatch(stdout.String()); m != nil {
				return m[1], m[2], func() {
					cancel()
					if code := <-done; code != exitOK {
						t.Errorf("dev exited with %d", code)
					}
					if strings.Contains(stderr.String(), "shown only") || (strings.Contains(m[2], "/ ") &&
						strings.Contains(stderr.String(), strings.Fields(m[2])[2])) {
						t.Errorf("the admin password went to the log:\n%s", stderr)
					}
				}
			}
			select {
			case code := <-done:
				cancel()
				t.Fatalf("dev exited with %d:\n%s", code, stdout)
			default:
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("dev printed no admin login:\n%s", stdout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	url, login, stop := start()
	f := strings.Fields(login) // admin / PASSWORD (shown only …)
	if len(f) < 3 || f[0] != "admin" || f[1] != "/" || !strings.Contains(login, "shown only this once") {
		t.Fatalf("admin login %q", login)
	}
	base := strings.TrimSuffix(url, "/admin/")
	if code, cookie := adminLogin(t, base, "admin", f[2]); code != http.StatusOK || getStatus(t, base, "/admin/api/me", cookie) != http.StatusOK {
		t.Fatalf("login with the printed password: %d", code)
	}
	stop()
	_, login, stop = start()
	defer stop()
	if login != "as before" {
		t.Fatalf("after a restart: admin login %q, want as before", login)
	}
}
