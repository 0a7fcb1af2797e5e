package chaos

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Binaries are the programs a chaos run starts, built once per test binary.
type Binaries struct {
	Server      string // ./cmd/idkeeper: the production server, gateway and init
	ChaosServer string // ./internal/harness/chaos/cmd/chaosserver: the registry on a store control
	Client      string // ./internal/harness/chaos/cmd/chaosclient: the client library, and the client controls
}

// Build compiles the binaries into dir, without the race detector: the children
// must run at full speed, and the library's races are what its own tests look for.
func Build(dir string) (Binaries, error) {
	b := Binaries{
		Server:      filepath.Join(dir, "idkeeper"),
		ChaosServer: filepath.Join(dir, "chaosserver"),
		Client:      filepath.Join(dir, "chaosclient"),
	}
	const mod = "github.com/idkeeper/idkeeper"
	for _, job := range []struct{ out, pkg string }{
		{b.Server, mod + "/cmd/idkeeper"},
		{b.ChaosServer, mod + "/internal/harness/chaos/cmd/chaosserver"},
		{b.Client, mod + "/internal/harness/chaos/cmd/chaosclient"},
	} {
		cmd := exec.Command("go", "build", "-o", job.out, job.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %v\n%s", job.pkg, err, out)
		}
	}
	return b, nil
}

// process is a child process whose output goes to a log file. It is killed
// (SIGKILL) when the test binary dies (Pdeathsig) and by the run's cleanup.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File

	// logStart is the size of the log file when the process started: its own
	// lines follow (a restarted server appends to its predecessor's log).
	logStart int64

	mu      sync.Mutex
	stopped bool // SIGSTOP sent, no SIGCONT yet
	killed  bool // the harness sent SIGKILL
}

func startProcess(name, logPath string, env []string, bin string, args ...string) (*process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	var logStart int64
	if info, err := f.Stat(); err == nil {
		logStart = info.Size()
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), log: f, logStart: logStart}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process ID.
func (p *process) PID() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *process) kill() {
	p.mu.Lock()
	p.killed = !p.exited()
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// exitStatus is the process's exit status once it has exited (-1 when a signal
// ended it), and whether the harness killed it (SIGKILL) before it exited.
func (p *process) exitStatus() (code int, killed bool, exited bool) {
	if !p.exited() {
		return 0, false, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.ProcessState.ExitCode(), p.killed, true
}

// stop sends SIGSTOP; cont sends SIGCONT.
func (p *process) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
}

func (p *process) cont() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = false
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
}

// terminate sends SIGTERM (after SIGCONT if stopped) and waits up to grace for a
// clean exit, then kills. It reports whether the process exited by itself with
// status 0.
func (p *process) terminate(grace time.Duration) bool {
	if p.exited() {
		return p.cmd.ProcessState.Success()
	}
	p.mu.Lock()
	if p.stopped {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		p.stopped = false
	}
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.cmd.ProcessState.Success()
	case <-time.After(grace):
		p.kill()
		return false
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logTail returns the last max bytes of the file at path, or why it cannot.
func logTail(path string, max int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if int64(len(b)) > max {
		b = b[int64(len(b))-max:]
	}
	return string(b)
}

// errPortTaken reports whether err is waitHTTP's error for a process that exited
// because another process took its port between freePort and its listen.
func errPortTaken(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}

// waitHTTP polls url until it answers 200, the process exits, or timeout passes.
func waitHTTP(ctx context.Context, p *process, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	for {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.exited() {
			return fmt.Errorf("%s exited before %s answered (see %s); its log ends:\n%s", p.name, url, p.log.Name(),
				logTail(p.log.Name(), 2048))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %s did not answer 200 within %v: %v", p.name, url, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockOwnerPID extracts the PID from a job lock owner "host:pid:suffix" (the
// registry's default owner).
func lockOwnerPID(owner string) (int, bool) {
	parts := strings.Split(owner, ":")
	if len(parts) < 3 {
		return 0, false
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	return pid, err == nil
}
