//go:build !unix

package localstate

import "os"

// lock is a no-op where flock does not exist: one process per file is then the
// operator's care.
func lock(*os.File) error { return nil }
