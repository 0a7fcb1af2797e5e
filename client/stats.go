package client

import "time"

// Stats is a snapshot of a session's counters and lease state: what a metrics
// exporter needs, without the client package depending on one. Package
// clientmetrics exports it to Prometheus.
type Stats struct {
	// Generators has one entry per generator whose node ID is known (once Open
	// succeeded), in generator order.
	Generators []GeneratorStats
	// TimeLeft is TimeLeft(): how long the lease stays valid on the monotonic
	// clock; zero when no valid lease is held.
	TimeLeft time.Duration
	// Healthy is Healthy(): Check passes, issuing can succeed now.
	Healthy bool
}

// GeneratorStats are one generator's counters since the session was created; they
// never decrease.
type GeneratorStats struct {
	// NodeID is the generator's node ID; -1 before Open succeeded.
	NodeID int64
	// Minted counts the IDs the generator minted, including those a refused call
	// or a failed batch dropped.
	Minted uint64
	// SequenceExhausted counts the milliseconds whose whole sequence was used; a
	// call in the same millisecond then waited for the next one.
	SequenceExhausted uint64
	// ClockBackwards counts the calls refused because the wall clock stepped back
	// past Config.MaxBackwardStep.
	ClockBackwards uint64
}

// Stats returns the generator's counters. It reads atomic counters only.
func (g *Generator) Stats() GeneratorStats {
	return GeneratorStats{
		NodeID:            g.NodeID(),
		Minted:            g.minted.Load(),
		SequenceExhausted: g.exhausted.Load(),
		ClockBackwards:    g.backwards.Load(),
	}
}

// Stats returns a snapshot of the session's counters and lease state. It reads
// atomic counters and the clock, and runs Check; safe for concurrent use.
func (s *Session) Stats() Stats {
	st := Stats{Generators: make([]GeneratorStats, 0, len(s.gens)), TimeLeft: s.TimeLeft(), Healthy: s.Healthy()}
	for _, g := range s.gens {
		if gs := g.Stats(); gs.NodeID >= 0 {
			st.Generators = append(st.Generators, gs)
		}
	}
	return st
}
