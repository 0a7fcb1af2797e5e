package client

import "time"

// Clock is the time source of a Session. It has two faces, and the Session never
// mixes them:
//
//   - Now is the wall clock. It is sent to the server as clientUtcNow and the
//     generators mint their timestamps from it. It may be stepped by NTP.
//   - Mono is a monotonic reading: it never goes back and is not moved by clock
//     steps. Lease deadlines and the renew and retry schedules are kept on it.
//
// AfterFunc runs f once, after d has elapsed on the monotonic clock, in a goroutine
// of the clock's choosing; Stop on the returned Timer cancels it. Tests inject
// clienttest.Clock, whose time moves only when the test says so.
type Clock interface {
	Now() time.Time
	Mono() time.Duration
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call. Stop reports whether it stopped the call
// before it started; *time.Timer satisfies it.
type Timer interface {
	Stop() bool
}

// SystemClock returns the process's clock: time.Now for the wall clock, the
// runtime's monotonic clock (CLOCK_MONOTONIC on Linux, which stops while the machine
// is suspended) for Mono, and time.AfterFunc for timers.
func SystemClock() Clock { return systemClock{origin: time.Now()} }

type systemClock struct{ origin time.Time }

func (systemClock) Now() time.Time { return time.Now() }

// Mono reads the runtime's monotonic clock: time.Since uses only the monotonic
// reading of origin, so wall-clock steps do not move it.
func (c systemClock) Mono() time.Duration { return time.Since(c.origin) }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
