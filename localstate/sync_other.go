//go:build !linux

package localstate

import "os"

func datasync(f *os.File) error { return f.Sync() }
