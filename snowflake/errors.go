package snowflake

import (
	"errors"
	"fmt"
	"time"
)

// ErrBeforeWindow is wrapped by the *WindowError a Generator returns while the
// timestamp it would mint lies before the window's start (NotBefore), for instance
// while a newly granted node ID is still cooling. Wait until WindowError.NotBefore.
var ErrBeforeWindow = errors.New("snowflake: before the lease window")

// ErrWindowEnded is wrapped by the *WindowError a Generator returns when the
// timestamp it would mint lies after the window's end (ExpiresAt). Only a renewed
// lease (SetWindow with a later expiresAt) lets it mint again.
var ErrWindowEnded = errors.New("snowflake: lease window has ended")

// ErrClockBackwards is wrapped by the *ClockBackwardsError a Generator returns when
// the wall clock is behind its last minted timestamp by more than the allowed
// backward step (Options.MaxBackwardStep).
var ErrClockBackwards = errors.New("snowflake: clock moved backwards")

// ErrClockStalled is returned, wrapped, when a Generator waited for the wall clock to
// reach the next millisecond for longer than its wait bound (MaxBackwardStep +
// ClockStallSlack of real, monotonic time) and the clock did not get there: a frozen
// or continually slewed-back clock. No ID is ever minted ahead of the clock.
var ErrClockStalled = errors.New("snowflake: clock did not advance")

// WindowError reports a timestamp outside the lease window. Err is ErrBeforeWindow
// or ErrWindowEnded, and errors.Is matches it. NotBefore and ExpiresAt are the window
// as last set; a zero value is an unbounded side.
type WindowError struct {
	Err       error
	NotBefore time.Time
	ExpiresAt time.Time
}

func (e *WindowError) Error() string {
	if e.Err == ErrBeforeWindow {
		return fmt.Sprintf("%v: cannot mint before %s", e.Err, e.NotBefore.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("%v: cannot mint after %s", e.Err, e.ExpiresAt.UTC().Format(time.RFC3339Nano))
}

func (e *WindowError) Unwrap() error { return e.Err }

// ClockBackwardsError reports a wall clock behind the generator's last minted
// timestamp by more than Max. Step is how far the clock read was behind the start of
// that millisecond. errors.Is(err, ErrClockBackwards) holds.
type ClockBackwardsError struct {
	Step time.Duration
	Max  time.Duration
}

func (e *ClockBackwardsError) Error() string {
	return fmt.Sprintf("%v by %v (tolerated: %v)", ErrClockBackwards, e.Step, e.Max)
}

func (e *ClockBackwardsError) Unwrap() error { return ErrClockBackwards }
