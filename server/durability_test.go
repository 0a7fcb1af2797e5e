package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
)

// readyDurability is the durability /readyz of srv says.
func readyDurability(t *testing.T, srv *Server) string {
	t.Helper()
	resp, err := http.Get("http://" + srv.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ready struct{ Durability string }
	if err := json.NewDecoder(resp.Body).Decode(&ready); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/readyz: %d %v", resp.StatusCode, err)
	}
	return ready.Durability
}

// awaitDurability waits until /readyz says want, within 10 s.
func awaitDurability(t *testing.T, srv *Server, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d := readyDurability(t, srv)
		if strings.Contains(d, want) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz durability %q, want %q", d, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Issue #32: /readyz says whether an acknowledged grant is on a standby, and
// keeps saying the truth while the server runs: the durability is asked again
// every DurabilityRecheck, so a synchronous standby made asynchronous, or one
// that stops streaming, shows (and is logged) without a restart.
func TestServer_DurabilityFollowsTheStandbys(t *testing.T) {
	recheck := DurabilityRecheck
	DurabilityRecheck = 50 * time.Millisecond
	t.Cleanup(func() { DurabilityRecheck = recheck })

	pg := pgtest.StartWith(t, pgtest.Options{Fsync: true})
	sb := pg.StartStandby(t, "sb1")
	pg.SetSynchronous(t, "sb1")
	logs := &syncBuffer{}
	const adminKey = "idk_servertest-admin-0123456789abcdefghij"
	cfg := Config{Listen: "127.0.0.1:0", Store: pg.URL(), InitStore: true, BootstrapAPIKey: testKey, AdminAPIKey: adminKey,
		StateFile: filepath.Join(t.TempDir(), "state"), ShutdownTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Registry: idkeeper.Config{Nodes: 8},
		Env: func(string) (string, bool) { return "", false }}
	srv, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if d := readyDurability(t, srv); !strings.HasPrefix(d, "PostgreSQL: fsync on") || !strings.Contains(d, "an acknowledged grant is on a standby") {
		t.Fatalf("/readyz durability %q with a synchronous standby", d)
	}

	pg.SetSynchronous(t, "")
	d := awaitDurability(t, srv, "a failover may lose acknowledged grants")
	// The admin store page says what /readyz says.
	req, _ := http.NewRequest("GET", "http://"+srv.Addr().String()+"/admin/api/store", nil)
	req.Header.Set("X-API-Key", adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var store struct{ Durability string }
	err = json.NewDecoder(resp.Body).Decode(&store)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || store.Durability != d {
		t.Fatalf("/admin/api/store: %d %q %v, want the durability %q", resp.StatusCode, store.Durability, err, d)
	}
	if l := logs.String(); !strings.Contains(l, "the store's durability changed") {
		t.Fatalf("the change is not logged:\n%s", l)
	}

	// Synchronous again, and then its standby gone: commits would wait for it.
	pg.SetSynchronous(t, "sb1")
	awaitDurability(t, srv, "an acknowledged grant is on a standby")
	sb.Kill(t)
	awaitDurability(t, srv, "every grant waits until one does")
	if d := srv.durability.String(); strings.Contains(d, pg.Password()) {
		t.Fatalf("the durability holds the password: %q", d)
	}

	// A store that turns unsafe while serving (not accepted at start) shows as
	// such and is logged as an error.
	pg.Exec(t, `ALTER SYSTEM SET synchronous_commit = off`)
	pg.Exec(t, `SELECT pg_reload_conf()`)
	d = awaitDurability(t, srv, "UNSAFE since ")
	if !strings.Contains(d, "synchronous_commit off") || !strings.Contains(d, "synchronous_commit = on") {
		t.Fatalf("the unsafe durability does not say what and how to fix it: %q", d)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "the store may now lose acknowledged writes") {
		t.Fatalf("the unsafe store is not logged as an error:\n%s", l)
	}
}
