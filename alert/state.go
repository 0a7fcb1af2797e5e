package alert

import (
	"context"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// The state the alert jobs (package alert, issue #11) share through the store, so
// that replicas on one store send each alert once, repeat it on one cadence, and
// send "resolved" whichever replica sees the condition end.

// The state-based alerts, by State.Name.
const (
	NameCapacity  = "capacity"   // free node IDs below the threshold
	NameClockSkew = "clock-skew" // requesters whose clock the registry warned of or refused
)

// StateAlerts are the names of the state-based alerts, in the order operators see them.
var StateAlerts = []string{NameCapacity, NameClockSkew}

// MaxNameLen bounds State.Name; MaxSummaryLen bounds its Summary,
// in bytes.
const (
	MaxNameLen    = 64
	MaxSummaryLen = 1024
)

// State is what the alert jobs remember of one state-based alert.
type State struct {
	Name string // the alert: "capacity", "clock-skew"; 1..MaxAlertNameLen bytes
	// Firing is true from the run that found the condition until the run that
	// found it cleared.
	Firing bool
	// Since is when the condition was first found (zero while not firing);
	// LastSent when the last message about it went out (zero: none yet).
	Since, LastSent time.Time
	// Checked is the last time the condition was evaluated.
	Checked time.Time
	// Summary says, in a line, what the last evaluation found ("12 of 4096 node
	// IDs remain"), for operators; at most MaxSummaryLen bytes.
	Summary string
	// Version is the store's: 0 for a state never stored; PutAlertState stores a
	// state only over the Version it was read with, and increments it.
	Version uint64
}

// Validate reports a Name or Summary out of bounds as an INVALID_REQUEST error.
func (s State) Validate() error {
	switch {
	case s.Name == "" || len(s.Name) > MaxNameLen:
		return protocol.Invalidf("name", "an alert name has 1 to %d bytes", MaxNameLen)
	case len(s.Summary) > MaxSummaryLen:
		return protocol.Invalidf("summary", "an alert summary has at most %d bytes", MaxSummaryLen)
	}
	return nil
}

// StateStore keeps the alert jobs' state. Times are kept to the millisecond.
// bolt and redis implement it; internal/harness/storetest.RunAlerts is its contract
// suite.
type StateStore interface {
	// AlertState returns the stored state of the alert name, or a state with
	// only Name set (Version 0) when none is stored.
	AlertState(ctx context.Context, name string) (State, error)
	// PutAlertState stores s with Version s.Version + 1 when the stored Version is
	// s.Version (0: none stored); ErrConflict, changing nothing, when it is not. A
	// state that fails Validate is an INVALID_REQUEST error.
	PutAlertState(ctx context.Context, s State) error
}
