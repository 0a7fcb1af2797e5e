// Package redistest starts a private redis-server for tests.
//
// Every Server is a redis-server process of its own, found on PATH, listening on a
// free loopback port (never the machine's shared Redis) with a temporary working
// directory. It persists nothing unless WithAOF (or WithAOFEverySec) is given, so
// Restart then behaves like a Redis that lost every write: the way tests simulate a
// store reset. ReplicaOf and Promote set up and fail over a replica. The process is
// killed when the test ends.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// startTimeout bounds how long Start waits for a redis-server to answer PING.
const startTimeout = 10 * time.Second

// Option changes how a Server runs.
type Option func(*config)

type config struct {
	aof      string // appendfsync policy; "" is appendonly no
	cluster  bool
	join     bool   // a cluster node that claims no slot (StartCluster3 assigns them)
	password string // requirepass and masterauth; "" is none
}

// WithAOF turns the append-only file on (appendonly yes, appendfsync always) in
// the server's temporary directory, so its data survives Restart.
func WithAOF() Option { return func(c *config) { c.aof = "always" } }

// WithAOFEverySec is WithAOF with appendfsync everysec: the data survives Restart
// (a killed process loses nothing the kernel has), but Redis does not vouch for it.
func WithAOFEverySec() Option { return func(c *config) { c.aof = "everysec" } }

// WithCluster runs the server as a one-node Redis Cluster that owns every slot, so
// tests can use a cluster client and see cross-slot errors. Connect to Addr with
// a cluster client; URL still names database 0.
func WithCluster() Option { return func(c *config) { c.cluster = true } }

// WithPassword makes the server require pw (requirepass) and use it towards its
// master (masterauth). URL then carries it, and the package's own commands
// (ReplicaOf, Promote, the readiness checks) authenticate with it.
func WithPassword(pw string) Option { return func(c *config) { c.password = pw } }

// Server is a running redis-server owned by one test.
type Server struct {
	bin     string
	dir     string
	cfg     config
	port    int
	busPort int // cluster bus port (cluster-port); 0 until a cluster node first starts

	mu   sync.Mutex
	proc *process
}

type process struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{} // closed when the process has exited
}

// startProcess starts bin with args, its output collected, and closes done
// when it exits.
func startProcess(bin string, args ...string) (*process, error) {
	out := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &process{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Start starts a redis-server and returns once it answers PING. It calls
// t.Fatalf, never t.Skip, when redis-server is not on PATH or does not come up.
// The server is killed in t.Cleanup.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{dir: t.TempDir()}
	for _, o := range opts {
		o(&s.cfg)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server not found on PATH (install redis-server, e.g. apt-get install redis-server): %v", err)
	}
	s.bin = bin
	t.Cleanup(func() { s.kill() })

	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: no free loopback port: %v", err)
		}
		s.busPort = 0
		if lastErr = s.launch(port); lastErr == nil {
			return s
		}
	}
	t.Fatalf("redistest: redis-server did not start: %v", lastErr)
	return nil
}

// Addr is the server's host:port on 127.0.0.1.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the server's address as a redis:// URL on database 0, with the
// password of WithPassword as the user info's.
func (s *Server) URL() string {
	if s.cfg.password != "" {
		return "redis://" + url.UserPassword("", s.cfg.password).String() + "@" + s.Addr() + "/0"
	}
	return "redis://" + s.Addr() + "/0"
}

// Password is the password of WithPassword, "" without it.
func (s *Server) Password() string { return s.cfg.password }

// Stop kills the server and waits for it to exit. Clients see connection errors
// until Restart. Stopping a stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.kill()
}

// Restart kills the server (SIGKILL, like a crash) and starts it again on the same
// port and directory. Without WithAOF the new process starts empty; with it, it
// replays the append-only file. Either way it has a new replication ID.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.kill()
	var err error
	// The port can stay busy for a moment after the kill; a few retries cover it.
	for attempt := 0; attempt < 20; attempt++ {
		if err = s.launch(s.port); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redistest: redis-server did not restart on port %d: %v", s.port, err)
}

// ReplicaOf makes the server a replica of primary (REPLICAOF) and returns once the
// link is up and the initial sync is done. A master that had no replica gets a new
// replication ID when the first one attaches.
func (s *Server) ReplicaOf(t testing.TB, primary *Server) {
	t.Helper()
	host, port, _ := strings.Cut(primary.Addr(), ":")
	if reply, err := commandAuth(s.Addr(), s.cfg.password, "REPLICAOF "+host+" "+port); err != nil || !strings.HasPrefix(reply, "+OK") {
		t.Fatalf("redistest: REPLICAOF %s: %q %v", primary.Addr(), reply, err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := commandAuth(s.Addr(), s.cfg.password, "INFO replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica of %s did not sync: %v %s", primary.Addr(), err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Promote turns a replica into a master (REPLICAOF NO ONE), as a failover does: it
// gets a new replication ID and keeps its former master's as master_replid2.
func (s *Server) Promote(t testing.TB) {
	t.Helper()
	if reply, err := commandAuth(s.Addr(), s.cfg.password, "REPLICAOF NO ONE"); err != nil || !strings.HasPrefix(reply, "+OK") {
		t.Fatalf("redistest: REPLICAOF NO ONE: %q %v", reply, err)
	}
}

func (s *Server) launch(port int) error {
	if port == 6379 {
		return errors.New("refusing the default Redis port 6379")
	}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--daemonize", "no",
		"--logfile", "",
		"--loglevel", "warning",
		"--databases", "16",
		// A replica a test attaches syncs at once instead of after the 5 s default.
		"--repl-diskless-sync-delay", "0",
	}
	if s.cfg.aof != "" {
		args = append(args, "--appendonly", "yes", "--appendfsync", s.cfg.aof)
	} else {
		args = append(args, "--appendonly", "no")
	}
	if s.cfg.password != "" {
		args = append(args, "--requirepass", s.cfg.password, "--masterauth", s.cfg.password)
	}
	bus := s.busPort
	if s.cfg.cluster {
		// An explicit bus port: the default, port+10000, is past 65535 for a
		// high ephemeral port, or may be taken.
		if bus == 0 {
			var err error
			if bus, err = freePort(); err != nil {
				return err
			}
		}
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus))
	}
	p, err := startProcess(s.bin, args...)
	if err != nil {
		return err
	}
	cmd, out := p.cmd, p.out

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("redis-server on port %d exited: %s", port, strings.TrimSpace(out.String()))
		default:
		}
		if ping(addr, s.cfg.password) == nil {
			if s.cfg.cluster && !s.cfg.join {
				if err := claimSlots(addr, s.cfg.password); err != nil {
					_ = cmd.Process.Kill()
					<-p.done
					return fmt.Errorf("redis-server on port %d: cluster: %w", port, err)
				}
			}
			s.mu.Lock()
			s.port, s.proc, s.busPort = port, p, bus
			s.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-p.done
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s",
				port, startTimeout, strings.TrimSpace(out.String()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) kill() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// ping reports nil when addr answers PING with +PONG, after AUTH when pw is
// set. A server still loading its AOF answers -LOADING, which is not ready.
func ping(addr, pw string) error {
	line, err := commandAuth(addr, pw, "PING")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// claimSlots gives a one-node cluster every slot (a restarted one has them from
// nodes.conf already) and waits until the cluster state is ok.
func claimSlots(addr, pw string) error {
	if reply, err := commandAuth(addr, pw, "CLUSTER ADDSLOTSRANGE 0 16383"); err != nil {
		return err
	} else if strings.HasPrefix(reply, "-") && !strings.Contains(reply, "busy") {
		return fmt.Errorf("CLUSTER ADDSLOTSRANGE: %s", reply)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := commandAuth(addr, pw, "CLUSTER INFO")
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster state not ok: %v %s", err, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// command sends one inline command and returns its reply: a status or error line
// as is ("+OK", "-ERR …"), a bulk string's content.
func command(addr, line string) (string, error) { return commandAuth(addr, "", line) }

// commandAuth is command after AUTH pw when pw is set; a failed AUTH is an error.
func commandAuth(addr, pw, line string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReader(c)
	if pw != "" {
		if _, err := c.Write(encodeCommand("AUTH", pw)); err != nil {
			return "", err
		}
		if reply, err := r.ReadString('\n'); err != nil {
			return "", err
		} else if !strings.HasPrefix(reply, "+OK") {
			return "", fmt.Errorf("AUTH: %s", strings.TrimSpace(reply))
		}
	}
	if _, err := c.Write([]byte(line + "\r\n")); err != nil {
		return "", err
	}
	first, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	first = strings.TrimRight(first, "\r\n")
	if !strings.HasPrefix(first, "$") {
		return first, nil
	}
	n, err := strconv.Atoi(first[1:])
	if err != nil || n < 0 {
		return "", fmt.Errorf("bad reply %q", first)
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// freePort asks the kernel for a free loopback port. Another process may take it
// before redis-server binds it; Start retries with a new port then.
func freePort() (int, error) {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port != 6379 {
			return port, nil
		}
	}
}

// syncBuffer collects the server's log, bounded so a chatty server cannot grow it
// without limit.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const maxLog = 16 << 10

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := maxLog - b.buf.Len(); room > 0 {
		if len(p) > room {
			b.buf.Write(p[:room])
		} else {
			b.buf.Write(p)
		}
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
