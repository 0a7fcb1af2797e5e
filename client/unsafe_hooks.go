//go:build !chaos_unsafe

package client

import "time"

// mintWindow is the window a generator mints in for a lease window nb … ex: the
// lease's own. A chaos_unsafe build (unsafe_window_chaos.go) can switch it off for
// the fault-injection suite's negative control; this is the production build.
func mintWindow(nb, ex time.Time) (time.Time, time.Time) { return nb, ex }
