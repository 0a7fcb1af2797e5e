//go:build !linux

package pgtest

import "syscall"

// dieWithParent does nothing where the kernel cannot kill a process with its
// parent: a server outlives a test binary that dies without its cleanups.
func dieWithParent(*syscall.SysProcAttr) {}
