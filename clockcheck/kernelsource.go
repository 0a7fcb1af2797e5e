package clockcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// The kernel clock states and status flag KernelSource judges: Linux's values
// (adjtimex(2), <linux/timex.h>), the same on every architecture.
const (
	// KernelTimeError is the state TIME_ERROR: the clock is not synchronised.
	// The states TIME_OK (0) to TIME_WAIT (4) are leap-second states of a
	// synchronised clock; any other value is refused too.
	KernelTimeError = 5
	// KernelStatusUnsync is the status flag STA_UNSYNC: no daemon vouches for
	// the clock (set at boot, by a clock step, or by the kernel once maxerror
	// reaches 16 s).
	KernelStatusUnsync = 0x40
)

// Defaults and constants of KernelSource.
const (
	// DefaultKernelMaxError is the largest maximum error the kernel source
	// vouches for: 16 s, the bound the NTP source puts on a server's root
	// distance (beevik/ntp's Validate) and the kernel's own NTP_PHASE_LIMIT, at
	// which it sets STA_UNSYNC. The replicas apply their tighter Δ/2 on top.
	DefaultKernelMaxError = 16 * time.Second
	// KernelDriftPPM is how fast the kernel grows maxerror while no daemon
	// updates it (MAXFREQ, 500 ppm): the source adds the same growth between
	// its readings.
	KernelDriftPPM = 500
)

// ErrKernelClockUnsupported is ReadKernelClock's error where the kernel's NTP
// state cannot be read: every OS but Linux.
var ErrKernelClockUnsupported = errors.New("clockcheck: the kernel clock source needs Linux (adjtimex)")

// KernelReading is one read of the kernel's NTP state: adjtimex with modes 0,
// which changes nothing and needs no privilege.
type KernelReading struct {
	// State is the call's result: TIME_OK (0) .. TIME_WAIT (4), TIME_ERROR (5).
	State int
	// Status holds the STA_* flags.
	Status int
	// MaxError is the kernel's bound on the clock's error (maxerror, kept in µs),
	// as the discipline daemon (chrony, ntpd, timesyncd) last set it plus the
	// kernel's 500 ppm growth since.
	MaxError time.Duration
	// EstError is the daemon's estimate of the error (esterror, µs): logged,
	// never used as a bound.
	EstError time.Duration
}

// KernelSource is a TimeSource fed by the host kernel's clock discipline, as
// maintained by chrony, ntpd or systemd-timesyncd: the agent's own clock, but
// only while the kernel says a daemon vouches for it. Every PollInterval it
// reads the kernel's NTP state (Read); a reading vouches when its state is not
// TIME_ERROR (nor unknown), its status lacks STA_UNSYNC and its maximum error,
// plus 500 µs, is at most MaxError. A reading that does not vouch, or a failed read, drops
// synced at once (logged with the reason), and the next read comes after
// min(PollInterval, 4 s).
//
// Now reports, from the last reading that vouched,
//
//	ref         = the wall clock at the reading + monotonic time elapsed since
//	uncertainty = MaxError + 500 µs + 500 ppm × age (the kernel's growth of
//	              maxerror, one second of it not yet applied)
//	synced      = the last read vouched, age ≤ MaxAge and uncertainty ≤ MaxError
//	age         = monotonic time elapsed since the reading
//
// and zero values with synced = false otherwise. A clock step between two
// readings moves nothing until the next reading (the kernel sets STA_UNSYNC on
// a step). Zero-value fields take their defaults. Set the fields before Start.
type KernelSource struct {
	// Read reads the kernel's NTP state. Default ReadKernelClock.
	Read func() (KernelReading, error)
	// PollInterval is the time between two readings. Default 64 s, as the NTP
	// source's.
	PollInterval time.Duration
	// MaxAge is the oldest reading that still counts as synced. Default 5 min.
	MaxAge time.Duration
	// MaxError is the largest maximum error vouched for. Default 16 s.
	MaxError time.Duration
	// Logger receives an info line when the source becomes synced, a warning
	// with the reason when it stops being synced or the reason changes.
	// Default slog.Default().
	Logger *slog.Logger

	clock func() time.Time // time.Now unless a test shifts it

	mu     sync.Mutex
	last   *kernelSample // the last reading that vouched; nil after one that did not
	logged string        // the reason last logged; "synced" once synced was logged
	run    poller
}

// kernelSample is a reading that vouched, anchored on the monotonic clock.
type kernelSample struct {
	mono     time.Time // the local clock right after the reading, with its monotonic part
	maxError time.Duration
}

// kernelSynced is the logged state of a source that vouches.
const kernelSynced = "synced"

func (s *KernelSource) now() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}

func (s *KernelSource) maxError() time.Duration {
	if s.MaxError > 0 {
		return s.MaxError
	}
	return DefaultKernelMaxError
}

func (s *KernelSource) maxAge() time.Duration {
	if s.MaxAge > 0 {
		return s.MaxAge
	}
	return DefaultMaxAge
}

// Now implements TimeSource.
func (s *KernelSource) Now() (ref time.Time, uncertainty time.Duration, synced bool, age time.Duration) {
	now := s.now()
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if last == nil {
		return time.Time{}, 0, false, 0
	}
	age = max(now.Sub(last.mono), 0)
	unc := kernelUncertainty(last.maxError, age)
	return last.mono.Round(0).Add(age), unc, age <= s.maxAge() && unc <= s.maxError(), age
}

// kernelUncertainty is the error bound of a reading of maximum error maxError
// at age: the kernel's growth of 500 ppm added, one second of it not yet
// applied by the kernel at the reading.
func kernelUncertainty(maxError, age time.Duration) time.Duration {
	return maxError + (time.Second+age)/(1_000_000/KernelDriftPPM)
}

// Poll reads the kernel once and keeps the reading if it vouches. It returns
// why it does not: the read's error, or the state, status flag or maximum error
// refused. Either way the outcome is logged when it changed.
func (s *KernelSource) Poll() error {
	read := s.Read
	if read == nil {
		read = ReadKernelClock
	}
	r, err := read()
	mono := s.now()
	if err == nil {
		err = s.judge(r)
	} else {
		err = fmt.Errorf("cannot read the kernel's clock state: %w", err)
	}
	s.mu.Lock()
	s.last = nil
	if err == nil {
		s.last = &kernelSample{mono: mono, maxError: r.MaxError}
	}
	s.mu.Unlock()
	s.logState(r, err)
	return err
}

// judge returns why reading r does not vouch, or nil.
func (s *KernelSource) judge(r KernelReading) error {
	switch {
	case r.State == KernelTimeError:
		return errors.New("the kernel reports TIME_ERROR: its clock is not synchronised")
	case r.State < 0 || r.State > KernelTimeError:
		return fmt.Errorf("the kernel reports the unknown clock state %d", r.State)
	case r.Status&KernelStatusUnsync != 0:
		return errors.New("the kernel's status has STA_UNSYNC: no daemon vouches for its clock")
	case r.MaxError < 0:
		return fmt.Errorf("the kernel reports a negative maximum error (%s)", r.MaxError)
	case kernelUncertainty(r.MaxError, 0) > s.maxError():
		return fmt.Errorf("the kernel's maximum error %s (+500 µs) is over the bound %s", r.MaxError, s.maxError())
	}
	return nil
}

// logState logs a change of outcome and wakes Wait once synced.
func (s *KernelSource) logState(r KernelReading, err error) {
	state := kernelSynced
	if err != nil {
		state = err.Error()
	}
	s.mu.Lock()
	changed := state != s.logged
	s.logged = state
	s.mu.Unlock()
	if err == nil {
		s.run.synced()
	}
	switch {
	case !changed:
	case err == nil:
		s.logger().Info("kernel clock source synced", "maxError", r.MaxError, "estError", r.EstError, "state", r.State)
	default:
		s.logger().Warn("kernel clock source not synced: refusing to vouch (is chrony, ntpd or systemd-timesyncd running and synced?)",
			"reason", state)
	}
}

func (s *KernelSource) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// Start starts reading on a goroutine, the first reading at once, then every
// PollInterval (after one that does not vouch, min(PollInterval, 4 s)). It does
// not wait for a reading that vouches: see Wait. Error: Start called twice.
func (s *KernelSource) Start(ctx context.Context) error {
	return s.run.start(ctx, "KernelSource", s.PollInterval, func(context.Context) error { return s.Poll() }, nil)
}

// Wait blocks until a reading has vouched once and returns nil, or until ctx
// ends and returns ctx's error.
func (s *KernelSource) Wait(ctx context.Context) error { return s.run.wait(ctx) }

// Close stops reading and waits for the goroutine. The last reading stays, aging.
func (s *KernelSource) Close() error {
	s.run.stop()
	return nil
}
