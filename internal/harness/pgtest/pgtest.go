// Package pgtest starts private PostgreSQL servers for tests.
//
// Every Server is a postgres process of its own, in a data directory that initdb
// made for it, listening on a free loopback port (never 5432, the machine's own
// server's) and on a Unix socket in that directory. The server is stopped and its
// directory deleted in t.Cleanup; it is killed with the test binary when that
// dies without running its cleanups. Nothing is skipped: when the binaries are
// missing or the server does not start, the test fails with the reason.
//
// # Binaries
//
// initdb, pg_ctl and postgres are taken from IDKEEPER_PG_BIN (a directory) when
// set, else from PATH when initdb is there, else from the newest
// /usr/lib/postgresql/VERSION/bin, where Debian's postgresql package puts them
// (scripts/test installs that package when initdb is missing).
//
// # Running as root
//
// initdb and postgres refuse to run as root. When the test runs as root (as CI
// does), pgtest runs them as the system user postgres, which Debian's package
// creates (IDKEEPER_PG_USER names another): the processes get that user's IDs
// (os/exec with a SysProcAttr Credential, as runuser would), and the server's
// directory, made by pgtest under os.TempDir() (which that user must be able to
// enter: mind a TMPDIR of mode 0700), is owned by that user. As any
// other user they run as that user. The directory of a test binary that died
// without its cleanups is removed by the next test binary that starts a server.
//
// # The server
//
// initdb creates the superuser idkeeper, whose password is random (Password,
// URL); connections over TCP must give it (scram-sha-256), connections over the
// Unix socket are trusted. By default the server runs with fsync off, as etcdtest
// runs etcd: the tests check the store's logic, and an fsync per commit only
// makes them slower; Options.Fsync turns it on, for durability tests and
// benchmarks. A store opened on a server without fsync must accept that (see the
// postgres package's durability check).
//
// Kill stops the server with SIGKILL, the postmaster and every process it
// started, as a crash of the machine's PostgreSQL does; Start after Kill or Stop runs it again
// on the same port and data directory, and PostgreSQL recovers from its WAL.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// SuperUser is the name of the server's superuser.
const SuperUser = "idkeeper"

// startTimeout bounds the wait for a server to accept connections; startAttempts
// is how often Start tries another port when the one it picked was taken.
const (
	startTimeout  = time.Minute
	startAttempts = 3
)

// Options change how a server runs. The zero value is what Start uses.
type Options struct {
	// Fsync runs the server with fsync on, as production runs it. Off by default.
	Fsync bool
	// Settings are further server settings (postgres -c NAME=VALUE), e.g.
	// "synchronous_commit": "off".
	Settings map[string]string
}

// Server is a PostgreSQL server owned by one test.
type Server struct {
	bins     string // the directory of initdb, pg_ctl and postgres
	dir      string // owns data/ and the log; deleted at cleanup
	cred     *syscall.Credential
	opts     Options
	password string
	port     int

	mu   sync.Mutex
	proc *process
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the postmaster has exited
}

// Start starts a server with the default Options and returns once it accepts
// connections.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith starts a server with o and returns once it accepts connections. It
// calls t.Fatalf, never t.Skip, when the binaries are missing or the server does
// not come up. The server is stopped, and its directory deleted, in t.Cleanup.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	s, err := start(t, o)
	if s != nil {
		t.Cleanup(s.cleanup)
	}
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s
}

// StartShared starts a server with o for several tests of a package: it is not
// stopped when t ends, but by the function returned, which TestMain calls after
// m.Run (the server dies with the test binary anyway). It fails t as StartWith
// does.
func StartShared(t testing.TB, o Options) (*Server, func()) {
	t.Helper()
	s, err := start(t, o)
	if err != nil {
		if s != nil {
			s.cleanup()
		}
		t.Fatalf("pgtest: %v", err)
	}
	return s, s.cleanup
}

// start makes the server's directory and starts it; on an error the returned
// server, when not nil, holds what needs cleaning up.
func start(t testing.TB, o Options) (*Server, error) {
	bins, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	s := &Server{bins: bins, cred: cred, opts: o, password: randomHex(16)}
	if s.dir, err = s.makeDir(); err != nil {
		return nil, err
	}
	began := time.Now()
	if err := s.initdb(); err != nil {
		return s, err
	}
	var errs []error
	for range startAttempts {
		if s.port, err = freePort(); err != nil {
			return s, err
		}
		if err = s.launch(); err == nil {
			t.Logf("pgtest: PostgreSQL on %s ready in %v (initdb included)", s.Addr(), time.Since(began).Round(time.Millisecond))
			return s, nil
		}
		errs = append(errs, err)
		if !strings.Contains(err.Error(), "already in use") {
			break
		}
	}
	return s, fmt.Errorf("PostgreSQL did not start: %w", errors.Join(errs...))
}

// binDir finds the directory of initdb, pg_ctl and postgres.
func binDir() (string, error) {
	if d := os.Getenv("IDKEEPER_PG_BIN"); d != "" {
		return d, checkBins(d)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if d := filepath.Dir(p); checkBins(d) == nil {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, d := range dirs {
		if checkBins(d) == nil {
			return d, nil
		}
	}
	return "", errors.New("initdb, pg_ctl and postgres not found on PATH, in IDKEEPER_PG_BIN nor in " +
		"/usr/lib/postgresql/*/bin: install PostgreSQL (apt-get install postgresql; scripts/test does)")
}

func checkBins(dir string) error {
	for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
	}
	return nil
}

// versionOf is the major version in /usr/lib/postgresql/VERSION/bin, 0 when none.
func versionOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// credential is whom the server's processes run as: nil (the test's own user)
// unless the test runs as root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	name := cmpOr(os.Getenv("IDKEEPER_PG_USER"), "postgres")
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL needs another user to run as: %v "+
			"(Debian's postgresql package creates postgres; IDKEEPER_PG_USER names another)", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	if uid == 0 {
		return nil, fmt.Errorf("IDKEEPER_PG_USER %s is root, which PostgreSQL refuses", name)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ownerFile, in a server's directory, holds the PID of the test binary that
// made it.
const ownerFile = "owner.pid"

// sweepOnce removes, once per test binary, the directories of servers whose
// test binary died without its cleanups (its servers died with it: Pdeathsig).
var sweepOnce sync.Once

func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "pgtest-*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		os.RemoveAll(d)
	}
}

// makeDir makes the server's directory, owned by the user the server runs as.
func (s *Server) makeDir() (string, error) {
	sweepOnce.Do(sweep)
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

// command is bin of the server's binaries, run as the server's user.
func (s *Server) command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bins, bin), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd
}

// initdb makes the data directory with the superuser and its password.
func (s *Server) initdb() error {
	pwfile := filepath.Join(s.dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return err
	}
	if s.cred != nil {
		if err := os.Chown(pwfile, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	out, err := s.command("initdb", "-D", s.dataDir(), "-U", SuperUser, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput()
	os.Remove(pwfile)
	if err != nil {
		return fmt.Errorf("initdb: %v: %s", err, tail(string(out)))
	}
	return nil
}

// launch starts the postmaster on s.port and waits until it accepts connections.
func (s *Server) launch() error {
	if s.port == 5432 {
		return errors.New("refusing PostgreSQL's default port 5432")
	}
	args := []string{"-D", s.dataDir(), "-p", strconv.Itoa(s.port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + s.dir, "-c", "max_connections=200", "-c", "log_min_messages=warning"}
	settings := map[string]string{"fsync": "off", "full_page_writes": "off"}
	if s.opts.Fsync {
		settings = map[string]string{}
	}
	for k, v := range s.opts.Settings {
		settings[k] = v
	}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", k+"="+settings[k])
	}
	logf, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := s.command("postgres", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Out of the test's process group (a ^C of go test reaches the test binary,
	// whose cleanups stop the server); killed with the test binary, upon which
	// its children exit by themselves.
	cmd.SysProcAttr.Setpgid = true
	dieWithParent(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("postgres exited while starting: %s", tail(s.log()))
		default:
		}
		if err := s.ping(); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("postgres did not accept connections within %v: %v: %s", startTimeout, err, tail(s.log()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping connects over TCP with the password and runs a query.
func (s *Server) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.Ping(ctx)
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "postgres.log") }

func (s *Server) log() string {
	b, _ := os.ReadFile(s.logPath())
	return string(b)
}

// Addr is the server's host:port on 127.0.0.1.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Password is the superuser's password.
func (s *Server) Password() string { return s.password }

// URL is a postgres:// URL of the superuser, with its password, on database
// postgres, without TLS.
func (s *Server) URL() string { return s.DatabaseURL("postgres") }

// DatabaseURL is URL on another database.
func (s *Server) DatabaseURL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(SuperUser, s.password), Host: s.Addr(), Path: "/" + db,
		RawQuery: "sslmode=disable"}
	return u.String()
}

// Exec runs sql on database postgres as the superuser, failing t on an error.
func (s *Server) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// Kill stops the server with SIGKILL, every process of it at once, and waits
// until they are gone: a crash. Killing a stopped server does nothing.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.kill()
}

// Stop shuts the server down cleanly (pg_ctl stop -m fast): clients are
// disconnected, the WAL is flushed. Stopping a stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return
	}
	if out, err := s.command("pg_ctl", "stop", "-D", s.dataDir(), "-m", "fast", "-w").CombinedOutput(); err != nil {
		t.Fatalf("pgtest: pg_ctl stop: %v: %s", err, tail(string(out)))
	}
	<-p.done
	s.mu.Lock()
	s.proc = nil
	s.mu.Unlock()
}

// Restart kills the server (Kill) and starts it again on the same port and data
// directory; it returns once the server accepts connections, having recovered
// every committed transaction from its WAL (with fsync off, only what the
// operating system kept: a process crash loses nothing, a machine crash may).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.kill()
	s.Resume(t)
}

// Resume starts a stopped or killed server again on the same port and data
// directory.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	var err error
	// The port can stay busy for a moment after a kill.
	for range 20 {
		if err = s.launch(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("pgtest: PostgreSQL did not start again on %s: %v", s.Addr(), err)
}

func (s *Server) cleanup() {
	s.kill()
	os.RemoveAll(s.dir)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tail is the end of a log, for an error message.
func tail(s string) string {
	const max = 2000
	s = strings.TrimSpace(s)
	if len(s) > max {
		s = "…" + s[len(s)-max:]
	}
	return s
}
