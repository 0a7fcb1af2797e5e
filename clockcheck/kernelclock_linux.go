package clockcheck

import (
	"fmt"
	"math"
	"time"

	"golang.org/x/sys/unix"
)

// ReadKernelClock reads the kernel's NTP state with adjtimex and modes 0: a
// read that changes nothing and needs no capability (CAP_SYS_TIME is for
// changes), so it works in a container, where it reads the host's kernel (time
// is not namespaced). Error: the call's, e.g. EPERM under a seccomp filter that
// denies adjtimex (systemd's ProtectClock=yes does).
func ReadKernelClock() (KernelReading, error) {
	var tx unix.Timex // Modes 0: read only
	state, err := unix.Adjtimex(&tx)
	if err != nil {
		return KernelReading{}, fmt.Errorf("adjtimex: %w", err)
	}
	return KernelReading{
		State:    state,
		Status:   int(tx.Status),
		MaxError: microseconds(int64(tx.Maxerror)),
		EstError: microseconds(int64(tx.Esterror)),
	}, nil
}

// microseconds converts a kernel count of µs, saturating instead of overflowing.
func microseconds(us int64) time.Duration {
	const limit = math.MaxInt64 / int64(time.Microsecond)
	switch {
	case us > limit:
		return math.MaxInt64
	case us < -limit:
		return math.MinInt64
	}
	return time.Duration(us) * time.Microsecond
}
