package clockcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
)

// Reason classifies why a clock check failed, so that a server can report and
// count failures by kind. The values are stable: they appear in logs, metrics
// labels and problem details.
type Reason string

// The reasons of a Failure.
const (
	ReasonTimeout      Reason = "timeout"        // the agent did not answer within the deadline
	ReasonIO           Reason = "io"             // dial, write or read failed, or the connection closed early
	ReasonVersion      Reason = "version"        // the line is TCKCLK but not version 2
	ReasonNonce        Reason = "nonce"          // the answer echoes another nonce (a replay, or a confused agent)
	ReasonMAC          Reason = "mac"            // the MAC does not verify under the secret
	ReasonFormat       Reason = "format"         // not one strict line: fields, spaces, decimals, base64
	ReasonSize         Reason = "size"           // more than MaxLine bytes before the LF
	ReasonUnsynced     Reason = "unsynced"       // the agent answered synced = 0
	ReasonStale        Reason = "stale"          // the agent's time-source sample is older than allowed
	ReasonBound        Reason = "bound"          // an error bound (local or store clock) is over Δ/2
	ReasonStep         Reason = "step"           // the local wall clock stepped back or jumped between samples
	ReasonNoGoodSample Reason = "no-good-sample" // no good sample for longer than MonitorConfig.MaxNoGood
)

// Reasons lists every Reason, for metrics that pre-declare their label values.
var Reasons = []Reason{
	ReasonTimeout, ReasonIO, ReasonVersion, ReasonNonce, ReasonMAC, ReasonFormat, ReasonSize,
	ReasonUnsynced, ReasonStale, ReasonBound, ReasonStep, ReasonNoGoodSample,
}

// Failure is the error of every check in this package: the codec, the Verifier
// and the Monitor. Err says what exactly went wrong; it never holds the secret.
type Failure struct {
	Reason Reason
	Err    error

	transient bool
}

// Transient reports whether the failure may clear by itself: a store clock that
// could not be read or judged this round (the Monitor retries it). Every other
// Failure of a Monitor is latched until the process restarts.
func (f *Failure) Transient() bool { return f != nil && f.transient }

func (f *Failure) Error() string {
	if f.Err == nil {
		return "clock check failed: " + string(f.Reason)
	}
	return fmt.Sprintf("clock check failed (%s): %v", f.Reason, f.Err)
}

func (f *Failure) Unwrap() error { return f.Err }

// ReasonOf returns the Reason of the *Failure in err's chain, or "" when there is
// none.
func ReasonOf(err error) Reason {
	var f *Failure
	if errors.As(err, &f) && f != nil {
		return f.Reason
	}
	return ""
}

func fail(r Reason, format string, args ...any) *Failure {
	return &Failure{Reason: r, Err: fmt.Errorf(format, args...)}
}

// netFailure classifies a network error: a deadline (the connection's or the
// context's) is ReasonTimeout, anything else ReasonIO.
func netFailure(op string, err error) *Failure {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &Failure{Reason: ReasonTimeout, Err: fmt.Errorf("%s: %w", op, err)}
	}
	return &Failure{Reason: ReasonIO, Err: fmt.Errorf("%s: %w", op, err)}
}
