package server

import (
	"context"
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper/clockcheck"
	"github.com/idkeeper/idkeeper/internal/httpserve"
)

// A replica whose clock check failed (DESIGN §8, amended in wave 3; issue #29)
// never serves again: it stops granting at once (the registry asks the latched
// monitor), hands back its job locks, drains briefly and Serve returns a
// *ClockLatchedError: the process exits with ExitClockUnverified, so that its supervisor (systemd, Compose, Kubernetes)
// starts a fresh process, which must verify its clock before it listens. Nothing
// turns it off: "replace, do not heal" (brief 001).

// ExitClockUnverified is the exit status of a server process whose clock check
// failed while it served: EX_TEMPFAIL of sysexits.h, "try again later". A supervisor
// restarts it; the fresh process starts only once the agent vouches for its clock.
const ExitClockUnverified = 75

// latchDrainTimeout bounds the drain of a server whose clock check failed: every
// grant it is asked for is refused at once, so what is still in flight after this
// long is cut (at most --shutdown-timeout, when that is shorter).
const latchDrainTimeout = 5 * time.Second

// latchReleaseTimeout bounds the last hand-back of the job locks on the way out.
const latchReleaseTimeout = 5 * time.Second

// ClockLatchedError is what Serve returns after the clock check failed: the
// process exits with ExitClockUnverified and prints nothing more, the server
// having logged why. It wraps the *clockcheck.Failure.
type ClockLatchedError struct{ f *clockcheck.Failure }

func (e *ClockLatchedError) Error() string {
	return fmt.Sprintf("the clock check failed (%s): exit status %d, for the supervisor to start a fresh process", e.f.Reason, ExitClockUnverified)
}

func (e *ClockLatchedError) Unwrap() error { return e.f }

// exitLatched shuts a server whose clock check failed down: one error line naming
// the reason, a drain of at most latchDrainTimeout, its jobs stopped, the job
// locks handed back once more (a job may have taken one again since the
// registry released them), the state file flushed and unlocked, the store
// closed. It returns the *ClockLatchedError in every case.
func (s *Server) exitLatched() error {
	f := s.clock.latchedFailure()
	drain := min(s.cfg.ShutdownTimeout, latchDrainTimeout)
	s.log.Error("the clock check failed: this replica has stopped granting and handed back its job locks; it exits with status "+
		fmt.Sprint(ExitClockUnverified)+" for its supervisor to start a fresh process, which must verify its clock before it serves",
		"reason", string(f.Reason), "err", f.Err, "exitStatus", ExitClockUnverified, "drain", drain)
	release := httpserve.Step{What: "hand back the job locks", Close: func() error {
		ctx, cancel := context.WithTimeout(context.Background(), latchReleaseTimeout)
		defer cancel()
		_, err := s.reg.ReleaseJobLocks(ctx)
		return err
	}}
	if err := s.stop(drain, &release); err != nil {
		s.log.Error("shut down after the clock check failed", "err", err)
	}
	return &ClockLatchedError{f}
}
