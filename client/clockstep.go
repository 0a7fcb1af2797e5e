package client

import (
	"fmt"

	"github.com/idkeeper/idkeeper/snowflake"
)

// clockStepLogger returns the snowflake.Options.OnClockStep of node ID node's
// generator: one warning when the generator finds the wall clock behind its last
// minted timestamp, with the step's width, and one when the clock has caught up,
// with how long it was behind. The generator calls it twice per episode, not per
// call, so a clock that stays behind for seconds logs two lines.
func (s *Session) clockStepLogger(node int64) func(snowflake.ClockStep) {
	return func(c snowflake.ClockStep) {
		attrs := []any{"nodeId", node, "episode", c.Episode, "width", c.Width, "lastMinted", c.LastMinted,
			"maxBackwardStep", c.Max}
		switch {
		case c.CaughtUp:
			s.log.Warn(fmt.Sprintf("idkeeper client: node ID %d: the wall clock caught up after %v behind (stepped back by up to %v; %d calls refused)",
				node, c.Duration, c.Width, c.Refused), append(attrs, "duration", c.Duration, "refused", c.Refused)...)
		case c.Width > c.Max:
			s.log.Warn(fmt.Sprintf("idkeeper client: node ID %d: the wall clock stepped back by %v, more than MaxBackwardStep (%v): "+
				"issuing fails with ErrClockBackwards until the clock is back within it; check NTP", node, c.Width, c.Max), attrs...)
		default:
			s.log.Warn(fmt.Sprintf("idkeeper client: node ID %d: the wall clock stepped back by %v: minting at the last timestamp "+
				"(logical time) until it catches up; check NTP", node, c.Width), attrs...)
		}
	}
}
