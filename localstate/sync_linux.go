package localstate

import (
	"os"
	"syscall"
)

// datasync flushes f's data (not its metadata: the size never changes after
// creation) to the disk.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
