package server

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
)

const testKey = "idk_servertest-key-0123456789abcdefghij"

// boltConfig is a server on a new bolt file in dir, on a free loopback port.
func boltConfig(dir string) Config {
	return Config{Listen: "127.0.0.1:0", Store: "bolt:" + filepath.Join(dir, "r.db"), InitStore: true,
		BootstrapAPIKey: testKey, ShutdownTimeout: time.Second, Logger: quietLogger(),
		Registry: idkeeper.Config{Nodes: 8}, Env: func(string) (string, bool) { return "", false }}
}

func TestConfig_ValidateErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no store", func(c *Config) { c.Store = "" }, "no store"},
		{"short bootstrap key", func(c *Config) { c.BootstrapAPIKey = "idk_short" }, BootstrapKeyEnv + " must be at least"},
		{"short admin key", func(c *Config) { c.AdminAPIKey = "idk_short" }, AdminKeyEnv + " must be at least"},
		{"one key for both", func(c *Config) { c.AdminAPIKey = c.BootstrapAPIKey }, "hold the same key"},
		{"first lease out of range", func(c *Config) { c.Registry.FirstLease = time.Second }, "first-lease"},
		{"bad admin name", func(c *Config) { c.AdminUser, c.AdminPassword = "No Spaces", "a long enough password 1" }, "--admin-user"},
		{"common password", func(c *Config) { c.AdminPassword = "password12345" }, "most common"},
		{"no state file, no secret", func(c *Config) { c.NoStateFile = true }, "NoStateFile needs Registry.ReceiptSecret"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := boltConfig(t.TempDir())
			c.edit(&cfg)
			err := cfg.Validate()
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate: %v, want a *ConfigError saying %q", err, c.want)
			}
		})
	}
	cfg := boltConfig(t.TempDir())
	cfg.Registry.LeaseDuration = time.Millisecond
	if err := cfg.Validate(); !errors.As(err, new(*idkeeper.RangeError)) {
		t.Fatalf("a lease duration out of range: %v, want an *idkeeper.RangeError", err)
	}
}

// Open on a real bolt file on loopback serves the API (the durability bolt says
// of itself in /readyz), Serve stops when its context ends, and the file is free
// again afterwards.
func TestOpen_ServeClose(t *testing.T) {
	dir := t.TempDir()
	srv, err := Open(context.Background(), boltConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if srv.StatePath() != filepath.Join(dir, "r.db."+StateFileName) {
		t.Errorf("state file %s", srv.StatePath())
	}
	resp, err := http.Get("http://" + srv.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct{ Durability string }
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !strings.Contains(ready.Durability, "bbolt file") {
		t.Fatalf("/readyz: %d %+v %v", resp.StatusCode, ready, err)
	}
	req, _ := http.NewRequest("GET", "http://"+srv.Addr().String()+"/v1/leases/remaining", nil)
	req.Header.Set("X-API-Key", testKey)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the bootstrap key: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Serve(ctx); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	st, err := bolt.Open(filepath.Join(dir, "r.db"), bolt.Options{Timeout: 100 * time.Millisecond, MustExist: true})
	if err != nil {
		t.Fatalf("the store after Close: %v", err)
	}
	st.Close()
}

// The job locks a closed server held (here the backup job's, for an hour) are
// handed back when the next server on its state file opens: another replica
// may run the job at once.
func TestClose_JobLocksReleasedByTheNextOpen(t *testing.T) {
	ctx := context.Background()
	cfg := boltConfig(t.TempDir())
	cfg.Registry.Owner = "replica-a"
	srv, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := srv.Store().TryLock(ctx, "backup", "replica-a", time.Hour); err != nil || !ok {
		t.Fatalf("TryLock: %v %v", ok, err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Registry.Owner = "replica-b"
	next, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	locks, err := next.Store().Locks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range locks {
		if l.Owner == "replica-a" {
			t.Fatalf("the lock %s of the closed replica-a is still held", l.Name)
		}
	}
}

// A busy port fails Open before the store is touched: no bolt file, no state
// file, no receipt secret.
func TestOpen_BusyPortLeavesTheStoreUntouched(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	for _, edit := range []func(*Config){
		func(c *Config) { c.Listen = ln.Addr().String() },
		func(c *Config) { c.MetricsListen = ln.Addr().String() },
		func(c *Config) { c.AdminListen = ln.Addr().String() },
	} {
		cfg := boltConfig(dir)
		edit(&cfg)
		_, err := Open(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "listen on "+ln.Addr().String()) {
			t.Fatalf("Open on a busy port: %v", err)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 0 {
			t.Fatalf("Open on a busy port left %d files in the store's folder", len(entries))
		}
	}
}

// A bolt file that does not exist is a *ConfigError naming `idkeeper init`, and
// nothing is created; an OpenedStore is closed by a failed Open.
func TestOpen_MissingBoltFile(t *testing.T) {
	dir := t.TempDir()
	cfg := boltConfig(dir)
	cfg.InitStore = false
	_, err := Open(context.Background(), cfg)
	if !errors.As(err, new(*ConfigError)) || !strings.Contains(err.Error(), "idkeeper init") {
		t.Fatalf("Open on a missing bolt file: %v", err)
	}
	if _, serr := os.Stat(filepath.Join(dir, "r.db")); !errors.Is(serr, fs.ErrNotExist) {
		t.Fatalf("the missing file was created: %v", serr)
	}
	st, err := bolt.Open(filepath.Join(dir, "given.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg = boltConfig(dir)
	cfg.OpenedStore, cfg.BootstrapAPIKey = st, "idk_short"
	if _, err := Open(context.Background(), cfg); err == nil {
		t.Fatal("Open with a short key succeeded")
	}
	if _, err := st.Status(context.Background()); err == nil {
		t.Fatal("the given store is still open after a failed Open")
	}
}

// Without a listener the caller serves Handler itself, and each store says
// what its own durability is.
func TestOpen_HandlerOnly(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "h.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Open(context.Background(), Config{OpenedStore: st, Store: "test", NoAdmin: true, NoStateFile: true,
		Registry: idkeeper.Config{ReceiptSecret: []byte("servertest-receipt-secret-0123456789abcdef")},
		Logger:   slog.New(slog.DiscardHandler), Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.Addr() != nil || srv.Handler() == nil || srv.StatePath() != "" {
		t.Fatalf("addr %v, handler %v, state %q", srv.Addr(), srv.Handler(), srv.StatePath())
	}
	if d := srv.durability.String(); d != "bbolt file: every write is fsynced before it is answered" {
		t.Errorf("durability %q", d)
	}
}
