//go:build linux

package snowflake

import (
	"syscall"
	"time"
)

// sleep blocks the calling thread for about d with nanosleep(2). time.Sleep is too
// coarse here: the runtime waits for timers in whole milliseconds on Linux, so a
// sleep shorter than 1 ms lasts about 1.1 ms and a generator at its ceiling would
// skip about one millisecond in eight. (A timerfd waited on in the netpoller was
// tried too: no better rate, and more CPU per wake-up.) An early return (EINTR) is
// harmless: the caller reads the clock again.
func sleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
