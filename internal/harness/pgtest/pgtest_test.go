package pgtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
)

func query(t *testing.T, url, sql string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	var v string
	err = c.QueryRow(ctx, sql).Scan(&v)
	return v, err
}

// A server answers on its port with its password only; a committed row survives
// a kill -9 and the restart; a stopped server resumes.
func TestServer(t *testing.T) {
	s := pgtest.Start(t)
	if strings.HasSuffix(s.Addr(), ":5432") {
		t.Fatalf("the test server took the default port: %s", s.Addr())
	}
	if v, err := query(t, s.URL(), "SHOW fsync"); err != nil || v != "off" {
		t.Fatalf("fsync = %q, %v; want off by default", v, err)
	}
	bad := strings.Replace(s.URL(), s.Password(), "wrong", 1)
	if _, err := query(t, bad, "SELECT 1::text"); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	s.Exec(t, "CREATE TABLE t (v text)")
	s.Exec(t, "INSERT INTO t VALUES ('kept')")
	s.Restart(t)
	if v, err := query(t, s.URL(), "SELECT v FROM t"); err != nil || v != "kept" {
		t.Fatalf("after kill -9 and restart: %q, %v", v, err)
	}
	s.Kill(t)
	if _, err := query(t, s.URL(), "SELECT 1::text"); err == nil {
		t.Fatal("a killed server answered")
	}
	s.Resume(t)
	s.Stop(t)
	s.Resume(t)
	if v, err := query(t, s.URL(), "SELECT v FROM t"); err != nil || v != "kept" {
		t.Fatalf("after stop and resume: %q, %v", v, err)
	}
}

func TestFsync(t *testing.T) {
	s := pgtest.StartWith(t, pgtest.Options{Fsync: true, Settings: map[string]string{"synchronous_commit": "off"}})
	for name, want := range map[string]string{"fsync": "on", "synchronous_commit": "off"} {
		if v, err := query(t, s.URL(), "SHOW "+name); err != nil || v != want {
			t.Errorf("%s = %q, %v; want %s", name, v, err, want)
		}
	}
}

// A synchronous standby has every commit the primary acknowledged: promoted
// after the primary is killed right after a commit, it holds the row, and
// accepts writes.
func TestStandby(t *testing.T) {
	p := pgtest.Start(t)
	p.Exec(t, "CREATE TABLE t (v text)")
	sb := p.StartStandby(t, "standby1")
	if v, err := query(t, sb.URL(), "SELECT pg_is_in_recovery()::text"); err != nil || v != "true" {
		t.Fatalf("standby in recovery: %q, %v", v, err)
	}
	p.SetSynchronous(t, "standby1")
	p.Exec(t, "INSERT INTO t VALUES ('acknowledged')") // returns once the standby has flushed it
	p.Kill(t)
	sb.Promote(t)
	sb.Exec(t, "INSERT INTO t VALUES ('after')")
	if v, err := query(t, sb.URL(), "SELECT string_agg(v, ',' ORDER BY v) FROM t"); err != nil || v != "acknowledged,after" {
		t.Fatalf("on the promoted standby: %q, %v", v, err)
	}
}
