package client

import (
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/snowflake"
)

// CoolingError is what Check returns while a generator's node ID is cooling: the
// registry granted it with a window that opens at NotBefore, later than the local
// clock's now, because the node ID's previous window (a holder that ended without
// mintedUpTo, a crash, or a store reset) runs until then. Issuing with it fails with
// snowflake.ErrBeforeWindow until NotBefore. It unwraps to the generator's
// *snowflake.WindowError, so errors.Is(err, snowflake.ErrBeforeWindow) holds.
type CoolingError struct {
	NodeID    int64
	NotBefore time.Time     // the window's first millisecond
	Wait      time.Duration // NotBefore − now, by the local clock
	Window    *snowflake.WindowError
}

func (e *CoolingError) Error() string {
	return fmt.Sprintf("idkeeper client: node ID %d is cooling: the generator waits until %s (in %s) to mint",
		e.NodeID, wire.FormatTime(e.NotBefore), roundWait(e.Wait))
}

func (e *CoolingError) Unwrap() error { return e.Window }

// roundWait rounds a wait for people: to the second from a minute on, else to the
// millisecond.
func roundWait(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// noteCooling logs, once per lease (node ID and fencing token), that the lease's
// window opens later than the local clock's now: the program holds the node ID but
// cannot mint with it, and Check stays red, until then.
func (s *Session) noteCooling(leases []Lease) {
	now := s.clk.Now()
	for _, l := range leases {
		if !l.NotBefore.After(now) {
			continue
		}
		if _, seen := s.cooled.LoadOrStore(coolingKey{l.NodeID, l.FencingToken}, struct{}{}); seen {
			continue
		}
		wait := roundWait(l.NotBefore.Sub(now))
		s.log.Warn(fmt.Sprintf("idkeeper client: node ID %d is cooling: minting from %s (in %s), because the registry's "+
			"previous window for it runs until then (its last holder ended without mintedUpTo, crashed, or a store reset "+
			"raised it); issuing with it fails and health is red until then", l.NodeID, wire.FormatTime(l.NotBefore), wait),
			"nodeId", l.NodeID, "notBefore", l.NotBefore, "wait", wait, "expiresAt", l.ExpiresAt, "fencingToken", l.FencingToken)
	}
}

// coolingKey identifies one lease for noteCooling.
type coolingKey struct {
	node  int64
	token uint64
}
