//go:build unix

package localstate

import (
	"os"
	"syscall"
)

// lock takes an exclusive advisory lock on f, without waiting.
func lock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) }
