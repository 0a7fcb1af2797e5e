//go:build !chaos_unsafe

package client

import (
	"time"

	"github.com/idkeeper/idkeeper"
)

// mintWindow is the window a generator mints in for a lease window nb … ex: the
// lease's own. A chaos_unsafe build (unsafe_hooks_chaos.go) can switch it off for
// the fault-injection suite's negative control; this is the production build.
func mintWindow(nb, ex time.Time) (time.Time, time.Time) { return nb, ex }

// sessionInstance is the instance of a new session's requester: a fresh random one
// (DESIGN §3). A chaos_unsafe build can switch it off for the negative control that
// shows what the instance prevents.
func sessionInstance() string { return idkeeper.NewInstance() }
