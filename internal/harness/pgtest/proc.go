package pgtest

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// kill stops the server with SIGKILL, the postmaster and every process it
// started, and waits until they are gone (Kill, Restart, the cleanup).
func (s *Server) kill() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return
	}
	// Every postmaster child makes itself a session leader (setsid), so the
	// postmaster's process group holds the postmaster alone. Stopped, it forks
	// no more; its children are then killed by PID, then the postmaster itself.
	pm := p.cmd.Process.Pid
	_ = syscall.Kill(pm, syscall.SIGSTOP)
	kids := children(pm)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pm, syscall.SIGKILL)
	<-p.done
	// Wait until the last child is gone, or the next start finds their shared
	// memory in use.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !slices.ContainsFunc(kids, alive) {
			return
		}
	}
}

// children are the PIDs of the processes whose parent is pid (/proc).
func children(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		k, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procStat(k); ppid == pid {
			out = append(out, k)
		}
	}
	return out
}

// alive reports whether pid runs: it exists and is no zombie.
func alive(pid int) bool {
	_, state := procStat(pid)
	return state != "" && state != "Z" && state != "X"
}

// procStat reads the parent PID and the state of pid from /proc/PID/stat; 0
// and "" when it is gone.
func procStat(pid int) (ppid int, state string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, ""
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0]
}
