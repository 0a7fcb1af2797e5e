//go:build chaos_unsafe

package client

import (
	"os"
	"time"

	"github.com/idkeeper/idkeeper"
)

// This build is for the fault-injection suite's negative control only (see
// internal/chaos and docs/reliability.md); never ship it.

// unsafeNoWindow, set by IDKEEPER_UNSAFE_NO_WINDOW=1 at process start, makes every
// generator mint outside its lease window (an unbounded window); the lease deadline
// still stops issuing.
var unsafeNoWindow = os.Getenv("IDKEEPER_UNSAFE_NO_WINDOW") == "1"

func mintWindow(nb, ex time.Time) (time.Time, time.Time) {
	if unsafeNoWindow {
		return time.Time{}, time.Time{}
	}
	return nb, ex
}

// unsafeNoInstance, set by IDKEEPER_UNSAFE_NO_INSTANCE=1 at process start, gives
// every session an empty instance: sessions with equal machine ID, PID and start
// time then share one requester, as before DESIGN §3 was amended.
var unsafeNoInstance = os.Getenv("IDKEEPER_UNSAFE_NO_INSTANCE") == "1"

func sessionInstance() string {
	if unsafeNoInstance {
		return ""
	}
	return idkeeper.NewInstance()
}
