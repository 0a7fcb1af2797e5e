package postgres_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
	"github.com/idkeeper/idkeeper/postgres"
)

func TestParseURL(t *testing.T) {
	cfg, err := postgres.ParseURL("postgres://ids:s3cret@db1.example:6432/idkeeper?sslmode=require&schema=prod_ids&application_name=idk")
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Pool.ConnConfig
	if c.Host != "db1.example" || c.Port != 6432 || c.Database != "idkeeper" || c.User != "ids" || c.Password != "s3cret" ||
		c.TLSConfig == nil || cfg.Schema != "prod_ids" || c.RuntimeParams["application_name"] != "idk" {
		t.Fatalf("config %+v, schema %q", c, cfg.Schema)
	}
	if _, ok := c.RuntimeParams["schema"]; ok {
		t.Fatal("schema was passed to the server as a setting")
	}
	cfg, err = postgres.ParseURL("postgresql://h/db?sslmode=disable")
	if err != nil || cfg.Schema != postgres.DefaultSchema || cfg.Pool.ConnConfig.TLSConfig != nil {
		t.Fatalf("postgresql:// default: %+v %v", cfg, err)
	}

	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("from-file\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = postgres.ParseURL("postgres://ids@h/db?password_file=" + pw)
	if err != nil || cfg.Pool.ConnConfig.Password != "from-file" {
		t.Fatalf("password_file: %q, %v", cfg.Pool.ConnConfig.Password, err)
	}
	pgpass := filepath.Join(t.TempDir(), "pgpass")
	if err := os.WriteFile(pgpass, []byte("h:5432:db:ids:from-pgpass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = postgres.ParseURL("postgres://ids@h:5432/db?passfile=" + pgpass)
	if err != nil || cfg.Pool.ConnConfig.Password != "from-pgpass" {
		t.Fatalf("passfile: %q, %v", cfg.Pool.ConnConfig.Password, err)
	}
	t.Setenv("PGPASSWORD", "from-env")
	cfg, err = postgres.ParseURL("postgres://ids@h/db")
	if err != nil || cfg.Pool.ConnConfig.Password != "from-env" {
		t.Fatalf("PGPASSWORD: %q, %v", cfg.Pool.ConnConfig.Password, err)
	}

	for raw, want := range map[string]string{
		"redis://h:6379":                                               "must start with",
		"postgres://h/db?schema=Bad-Name":                              "schema must be",
		"postgres://h/db?schema=a&schema=b":                            "schema must be",
		"postgres://h/db?schema=9lives":                                "schema must be",
		"postgres://h/db?sslmode=sometimes":                            "sslmode",
		"postgres://h/db?sslmode=disable&x=1&x=2":                      "given 2 times",
		"postgres://h/db?password_file=/nonexist":                      "password_file",
		"postgres://u:pw@h/db?password_file=" + pw:                     "give one",
		"postgres://h:port/db":                                         "bad URL",
		"postgres://h/db?sslmode=verify-full&sslrootcert=/nonexistent": "sslrootcert",
	} {
		_, err := postgres.ParseURL(raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL(%q) = %v, want an error with %q", raw, err, want)
		}
	}
	// No error repeats the password, wherever it is given.
	for _, raw := range []string{
		"postgres://u:topsecret@h:port/db",
		"postgres://u:topsecret@h/db?sslmode=sometimes",
		"postgres://u:topsecret@h/db?sslmode=verify-full&sslrootcert=/nonexistent",
		"postgres://u@h/db?password=topsecret&sslmode=sometimes",
		"postgres://u:top%73ecret@h/db?connect_timeout=x",
	} {
		if _, err := postgres.ParseURL(raw); err == nil || strings.Contains(err.Error(), "topsecret") ||
			strings.Contains(err.Error(), "top%73ecret") {
			t.Errorf("ParseURL(%q): an error repeats the password: %v", raw, err)
		}
	}
	for raw, want := range map[string]string{
		"postgres://u:topsecret@h:5432/db":         "postgres://u:xxxxx@h:5432/db",
		"postgres://u@h/db?password=topsecret&a=b": "postgres://u@h/db?a=b&password=xxxxx",
		"postgres://u:topsecret@h:port/db":         "(a URL that does not parse)",
	} {
		if got := postgres.RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

// Open connects, checks the server and the schema, and owns its pool; a wrong
// password is refused without being repeated; the schema is the URL's.
func TestOpen(t *testing.T) {
	srv := pgtest.StartWith(t, pgtest.Options{Fsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, srv.URL()+"&schema=from_url", postgres.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if s.Schema() != "from_url" || !strings.Contains(s.Identity(), "schema from_url") || strings.Contains(s.Identity(), srv.Password()) {
		t.Fatalf("schema %q, identity %q", s.Schema(), s.Identity())
	}
	if v, err := s.CheckSchema(ctx); err != nil || v != 0 {
		t.Fatalf("CheckSchema before InitSchema = %d, %v; want 0", v, err)
	}
	if _, err := s.APIKeys(ctx); err == nil || !strings.Contains(err.Error(), "run idkeeper init") {
		t.Fatalf("a read before InitSchema: %v, want an error that says to run idkeeper init", err)
	}
	if err := s.InitSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.InitSchema(ctx); err != nil {
		t.Fatalf("InitSchema again: %v", err)
	}
	if v, err := s.CheckSchema(ctx); err != nil || v != postgres.SchemaVersion {
		t.Fatalf("CheckSchema = %d, %v", v, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping after Close: the pool is still open")
	}

	if _, err := postgres.Open(ctx, "postgres://u:topsecret@127.0.0.1:1/db?connect_timeout=2", postgres.Options{}); err == nil ||
		strings.Contains(err.Error(), "topsecret") {
		t.Fatalf("Open of a closed port: %v", err)
	}
	wrong := strings.Replace(srv.URL(), srv.Password(), "wrong-topsecret", 1)
	if _, err := postgres.Open(ctx, wrong, postgres.Options{}); err == nil || strings.Contains(err.Error(), "wrong-topsecret") {
		t.Fatalf("Open with a wrong password: %v", err)
	}
}

// A schema written by a newer IdKeeper is refused by Open and InitSchema, with
// a message that names both versions; nothing changes.
func TestNewerSchemaRefused(t *testing.T) {
	srv := sharedServer(t)
	s := open(t, srv, postgres.Options{Schema: "newer"})
	srv.Exec(t, `UPDATE newer.schema_version SET version = 99`)
	ctx := t.Context()
	_, err := postgres.Open(ctx, srv.URL()+"&schema=newer", postgres.Options{AcceptLostWrites: true, Logger: quiet})
	if !errors.Is(err, postgres.ErrSchemaNewer) || !strings.Contains(err.Error(), "version 99") {
		t.Fatalf("Open on a newer schema: %v", err)
	}
	if err := s.InitSchema(ctx); !errors.Is(err, postgres.ErrSchemaNewer) {
		t.Fatalf("InitSchema on a newer schema: %v", err)
	}
}

// Open refuses a server that may lose acknowledged writes unless that is
// accepted, and tells what it found.
func TestDurability(t *testing.T) {
	ctx := t.Context()
	noFsync := sharedServer(t) // fsync off
	if _, err := postgres.Open(ctx, noFsync.URL(), postgres.Options{Logger: quiet}); !errors.Is(err, postgres.ErrLostWrites) ||
		!strings.Contains(err.Error(), "fsync is off") {
		t.Fatalf("Open with fsync off: %v", err)
	}
	s, err := postgres.Open(ctx, noFsync.URL(), postgres.Options{AcceptLostWrites: true, Logger: quiet})
	if err != nil {
		t.Fatalf("Open with fsync off, accepted: %v", err)
	}
	s.Close()

	asyncCommit := pgtest.StartWith(t, pgtest.Options{Fsync: true, Settings: map[string]string{"synchronous_commit": "off"}})
	if _, err := postgres.Open(ctx, asyncCommit.URL(), postgres.Options{Logger: quiet}); !errors.Is(err, postgres.ErrLostWrites) ||
		!strings.Contains(err.Error(), "synchronous_commit is off") {
		t.Fatalf("Open with synchronous_commit off: %v", err)
	}
	s, err = postgres.Open(ctx, asyncCommit.URL()+"&options=-c%20synchronous_commit%3Don", postgres.Options{Logger: quiet})
	if err != nil {
		t.Fatalf("Open with synchronous_commit on for the store's sessions: %v", err)
	}
	d, err := s.CheckDurability(ctx)
	if err != nil || !d.Fsync || d.SynchronousCommit != "on" || d.OnStandby() || d.Standbys != 0 ||
		d.String() != "fsync on, synchronous_commit on; no standby" {
		t.Fatalf("durability %+v (%s), %v", d, d, err)
	}
	s.Close()
}

// CheckDurability tells an asynchronous standby from a synchronous one: only
// with the second is an acknowledged commit on a standby.
func TestDurabilityStandby(t *testing.T) {
	ctx := t.Context()
	p := pgtest.StartWith(t, pgtest.Options{Fsync: true})
	sb := p.StartStandby(t, "standby1")
	if _, err := postgres.Open(ctx, sb.URL(), postgres.Options{Logger: quiet}); err == nil || !strings.Contains(err.Error(), "standby") {
		t.Fatalf("Open on a standby: %v", err)
	}
	both := "postgres://" + pgtest.SuperUser + ":" + p.Password() + "@" + sb.Addr() + "," + p.Addr() +
		"/postgres?sslmode=disable&target_session_attrs=read-write"
	s, err := postgres.Open(ctx, both, postgres.Options{Logger: quiet})
	if err != nil {
		t.Fatalf("Open on both, the standby first: %v", err)
	}
	if want := []string{sb.Addr(), p.Addr()}; !strings.Contains(s.Identity(), min(want[0], want[1])+","+max(want[0], want[1])+"/postgres") {
		t.Fatalf("Identity of two hosts = %q", s.Identity())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := s.CheckDurability(ctx)
	if err != nil || d.Standbys != 1 || d.SyncStandbys != 0 || d.OnStandby() || !strings.Contains(d.String(), "may lose") {
		t.Fatalf("with an asynchronous standby: %+v (%s), %v", d, d, err)
	}
	p.SetSynchronous(t, "standby1")
	// The walsender takes the new setting up by itself, a moment later.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if d, err = s.CheckDurability(ctx); err != nil || d.SyncStandbys == 1 {
			break
		}
	}
	if err != nil || d.Standbys != 1 || d.SyncStandbys != 1 || !d.OnStandby() || d.SyncStandbyNames != "standby1" ||
		!strings.Contains(d.String(), "on a standby") {
		t.Fatalf("with a synchronous standby: %#v, %v", d, err)
	}
}
