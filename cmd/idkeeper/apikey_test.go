package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
)

const adminKey = "idk_admin-0123456789abcdefghijklmnopq"

// Issue #20 item 1: a key never expires unless --expires says so.
func TestAPIKeyCreateNeverExpiresByDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	initInProcess(t, "bolt:"+path) // only init makes a bolt store (issue #30)
	code, stdout, stderr := runInProcess(context.Background(), []string{"apikey", "create", "--store", "bolt:" + path, "--description", "billing"}, nil)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "never expires") {
		t.Fatalf("the log does not say the key never expires: %s", stderr)
	}
	st, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	id, _ := idkeeper.HashAPIKey(strings.TrimSpace(stdout))
	if k, err := st.APIKey(context.Background(), id); err != nil || !k.ExpiresAt.IsZero() || k.Admin {
		t.Fatalf("stored key %+v, %v; want one that never expires, no admin key", k, err)
	}
	code, out, _ := runInProcess(context.Background(), []string{"apikey", "-h"}, nil)
	if code != exitOK || !strings.Contains(strings.Join(strings.Fields(out), " "), "A key never expires unless --expires") ||
		strings.Contains(out, "720h") {
		t.Fatalf("apikey -h: %d %s", code, out)
	}
}

// Issue #20 item 2: with a server holding the bolt file, the key commands work
// through its admin API (--server, the admin key from a file named in the
// environment) and print what they print on the store; the new key allocates;
// revoke through the server refuses it at once; a key that is no admin key is
// refused, and so is a missing one.
func TestAPIKeysThroughARunningServer(t *testing.T) {
	dir := t.TempDir()
	store := "bolt:" + filepath.Join(dir, "idkeeper.db")
	initInProcess(t, store)
	s, _ := startInProcess(t, []string{"--store", store}, map[string]string{BootstrapKeyEnv: bootstrapKey, AdminKeyEnv: adminKey})
	if s == nil {
		t.Fatal("the server did not start")
	}
	if !strings.Contains(s.logs.String(), "admin API key created") || strings.Contains(s.logs.String(), adminKey) {
		t.Fatalf("the admin key at start:\n%s", s.logs)
	}
	ctx := context.Background()

	// On the store itself, the server holds the file.
	if code, _, stderr := runInProcess(ctx, []string{"apikey", "create", "--store", store, "--description", "x"}, nil); code == exitOK ||
		!strings.Contains(stderr, "locked") || !strings.Contains(stderr, "give --server URL") {
		t.Fatalf("create on a held bolt file: %d %s", code, stderr)
	}

	keyFile := filepath.Join(dir, "admin.key")
	if err := os.WriteFile(keyFile, []byte(adminKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	viaServer := map[string]string{AdminKeyEnv + "_FILE": keyFile}
	cli := func(env map[string]string, args ...string) (int, string, string) {
		return runInProcess(ctx, append(args, "--server", s.base), env)
	}
	code, out, stderr := cli(viaServer, "apikey", "create", "--description", "billing", "--max-nodes", "2", "--expires", "2160h")
	if code != exitOK {
		t.Fatalf("create through the server: %d %s", code, stderr)
	}
	secret := strings.TrimSpace(out)
	id, _ := idkeeper.HashAPIKey(secret)
	if !strings.HasPrefix(secret, idkeeper.APIKeyPrefix) || strings.Contains(stderr, secret) || !strings.Contains(stderr, id) ||
		strings.Contains(stderr, adminKey) {
		t.Fatalf("create printed %q, logged %s", out, stderr)
	}
	who := `{"requester":{"machineId":"m","pid":1,"startedAt":"2026-11-30T10:00:00Z","instance":"a"},"count":2}`
	s.client(secret).do("POST", "/v1/leases", who, 200)

	// An admin key made through the server is one; the admin key may come from
	// --admin-api-key-file too.
	code, out, stderr = runInProcess(ctx, []string{"apikey", "create", "--description", "ops", "--admin", "--server", s.base,
		"--admin-api-key-file", keyFile}, nil)
	if code != exitOK {
		t.Fatalf("create an admin key: %d %s", code, stderr)
	}
	opsKey := strings.TrimSpace(out)
	s.client(opsKey).do("GET", "/admin/api/keys", "", 200)

	// Refused: a key that is no admin key, no key, --store with --server.
	if code, _, stderr := cli(map[string]string{AdminKeyEnv: bootstrapKey}, "apikey", "list"); code == exitOK || !strings.Contains(stderr, "ADMIN_KEY_REQUIRED") {
		t.Fatalf("list with a key that is no admin key: %d %s", code, stderr)
	}
	if code, _, stderr := cli(nil, "apikey", "list"); code != exitUsage || !strings.Contains(stderr, AdminKeyEnv) {
		t.Fatalf("list without an admin key: %d %s", code, stderr)
	}
	if code, _, stderr := cli(viaServer, "apikey", "list", "--store", store); code != exitUsage || !strings.Contains(stderr, "not both") {
		t.Fatalf("list with --store and --server: %d %s", code, stderr)
	}

	code, out, stderr = cli(viaServer, "apikey", "revoke", id)
	if code != exitOK || !strings.Contains(out, "revoked key "+id+" (billing); its leases (2 node IDs) end at their expiry") {
		t.Fatalf("revoke through the server: %d %s %s", code, out, stderr)
	}
	s.client(secret).do("GET", "/v1/leases/remaining", "", 401)
	if code, out, _ = cli(viaServer, "apikey", "revoke", id); code != exitOK || !strings.Contains(out, "was revoked already") {
		t.Fatalf("revoke again: %d %s", code, out)
	}
	if code, _, stderr = cli(viaServer, "apikey", "revoke", "nope"); code == exitOK || !strings.Contains(stderr, `there is no key "nope"`) {
		t.Fatalf("revoke an unknown key: %d %s", code, stderr)
	}

	// The list through the server is the list on the store, byte for byte, in both
	// formats. (Uses are recorded in the background: wait until two reads agree.)
	var viaJSON, viaTable string
	for i := 0; ; i++ {
		_, a, _ := cli(viaServer, "apikey", "list", "--format", "json")
		_, tbl, _ := cli(viaServer, "apikey", "list")
		_, b, _ := cli(viaServer, "apikey", "list", "--format", "json")
		if a == b || i == 20 {
			viaJSON, viaTable = a, tbl
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{`"id": "` + id + `"`, `"status": "revoked"`, `"admin": true`, `"nodesHeld": 2`} {
		if !strings.Contains(viaJSON, want) {
			t.Fatalf("the list through the server lacks %s:\n%s", want, viaJSON)
		}
	}
	if !strings.Contains(viaTable, "active (bootstrap, admin)") || !strings.Contains(viaTable, "revoked") {
		t.Fatalf("the table through the server:\n%s", viaTable)
	}
	if code := s.stop(); code != exitOK {
		t.Fatalf("server exit %d", code)
	}
	_, onStore, _ := runInProcess(ctx, []string{"apikey", "list", "--store", store, "--format", "json"}, nil)
	_, onStoreTable, _ := runInProcess(ctx, []string{"apikey", "list", "--store", store}, nil)
	if onStore != viaJSON || onStoreTable != viaTable {
		t.Fatalf("through the server:\n%s\n%s\non the store:\n%s\n%s", viaJSON, viaTable, onStore, onStoreTable)
	}
}
