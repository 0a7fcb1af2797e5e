package pgtest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartStandby starts a streaming standby of s, named name (its
// application_name, as synchronous_standby_names lists it): pg_basebackup copies
// s into a directory of the standby's own, and the standby runs on a free port,
// in recovery, streaming from s. It returns once s reports it streaming. The
// standby is stopped, and its directory deleted, in t.Cleanup. Options of s
// apply to it too.
func (s *Server) StartStandby(t testing.TB, name string) *Server {
	t.Helper()
	sb := &Server{bins: s.bins, cred: s.cred, password: s.password, opts: Options{Fsync: s.opts.Fsync}}
	sb.opts.Settings = maps.Clone(s.opts.Settings)
	if sb.opts.Settings == nil {
		sb.opts.Settings = map[string]string{}
	}
	sb.opts.Settings["primary_conninfo"] = fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s application_name=%s",
		s.port, SuperUser, s.password, name)
	var err error
	if sb.dir, err = sb.makeDir(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(sb.cleanup)
	cmd := sb.command("pg_basebackup", "-h", "127.0.0.1", "-p", fmt.Sprint(s.port), "-U", SuperUser, "-D", sb.dataDir(),
		"--wal-method=stream", "--checkpoint=fast", "--no-sync")
	cmd.Env = append(cmd.Env, "PGPASSWORD="+s.password)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: pg_basebackup of %s: %v: %s", s.Addr(), err, tail(string(out)))
	}
	signal := sb.dataDir() + "/standby.signal"
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if sb.cred != nil {
		if err := os.Chown(signal, int(sb.cred.Uid), int(sb.cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	for range startAttempts {
		if sb.port, err = freePort(); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		if err = sb.launch(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("pgtest: the standby did not start: %v", err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		n, err := s.streaming(name)
		if err == nil && n > 0 {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgtest: standby %s does not stream from %s: %v: %s", name, s.Addr(), err, tail(sb.log()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// streaming counts the standbys named name that stream from s.
func (s *Server) streaming(name string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	var n int
	err = c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`,
		name).Scan(&n)
	return n, err
}

// SetSynchronous sets s's synchronous_standby_names to names ("" for none) and
// reloads its configuration: from then on a commit waits for those standbys.
func (s *Server) SetSynchronous(t testing.TB, names string) {
	t.Helper()
	s.Exec(t, `ALTER SYSTEM SET synchronous_standby_names = `+quote(names))
	s.Exec(t, `SELECT pg_reload_conf()`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := pgx.Connect(ctx, s.URL())
		var v string
		if err == nil {
			err = c.QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&v)
			c.Close(ctx)
		}
		cancel()
		if err == nil && v == names {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgtest: synchronous_standby_names stays %q (%v), want %q", v, err, names)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quote is s as an SQL string literal.
func quote(s string) string {
	out := []byte{'\''}
	for i := range len(s) {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// Promote ends the recovery of the standby s (pg_ctl promote): it becomes a
// primary that accepts writes, as a failover makes it. It returns once s is out
// of recovery.
func (s *Server) Promote(t testing.TB) {
	t.Helper()
	if out, err := s.command("pg_ctl", "promote", "-D", s.dataDir(), "-w").CombinedOutput(); err != nil {
		t.Fatalf("pgtest: pg_ctl promote: %v: %s", err, tail(string(out)))
	}
}
