package redistest

import "syscall"

// sysProcAttr kills the server when the test binary dies without running its
// cleanups (a panic, a timeout, SIGKILL), so no redis-server outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
