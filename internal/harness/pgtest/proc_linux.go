package pgtest

import "syscall"

// dieWithParent kills the process with SIGKILL when the test binary dies.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
