package client

import (
	"time"

	"github.com/idkeeper/idkeeper/snowflake"
)

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
	// Demand is the node-ID count and its changes (Config.MaxCount). Generators
	// include the extra sessions' generators.
	Demand DemandStats
	// Replicas has one entry per registry URL (Config.ServerURL, or each of
	// Config.ServerURLs in order), extra sessions' requests included.
	Replicas []ReplicaStats
	// Failovers counts the moves from a replica that failed (transport error, 5xx)
	// to the next one within one Alloc, Renew or Remove.
	Failovers uint64
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
	// call in the same millisecond then had to wait for the next one. An upper
	// bound of the waits: SequenceWaits counts those that happened.
	SequenceExhausted uint64
	// ClockBackwards counts the calls refused because the wall clock stepped back
	// past Config.MaxBackwardStep (snowflake.Stats.ClockRefusals).
	ClockBackwards uint64
	// ClockRollbacks has one observation per backward step of the wall clock the
	// generator found (absorbed with logical time or refused): its width when
	// found. ClockRollbackDurations has one per step the clock has recovered
	// from: how long it stayed behind. InRollback: one has not ended yet.
	ClockRollbacks         snowflake.Histogram
	ClockRollbackDurations snowflake.Histogram
	InRollback             bool
	// SequenceWaits has one observation per wait for a later millisecond (the
	// sequence was used up, or the clock was behind): how long, in real time.
	SequenceWaits snowflake.Histogram
}

// Stats returns the generator's counters. It reads atomic counters only.
func (g *Generator) Stats() GeneratorStats {
	st := GeneratorStats{
		NodeID:            g.NodeID(),
		Minted:            g.minted.Load(),
		SequenceExhausted: g.exhausted.Load(),
	}
	if m := g.m.Load(); m != nil {
		gs := m.gen.Stats()
		st.ClockBackwards, st.InRollback = gs.ClockRefusals, gs.InRollback
		st.ClockRollbacks, st.ClockRollbackDurations, st.SequenceWaits = gs.ClockRollbacks, gs.ClockRollbackDurations, gs.SequenceWaits
	}
	return st
}

// Stats returns a snapshot of the session's counters and lease state. It reads
// atomic counters and the clock, and runs Check; safe for concurrent use.
func (s *Session) Stats() Stats {
	gens := s.pooled()
	st := Stats{Generators: make([]GeneratorStats, 0, len(gens)), TimeLeft: s.TimeLeft(), Healthy: s.Healthy(), Demand: s.demandStats()}
	st.Replicas, st.Failovers = s.api.reps.snapshot()
	for _, g := range gens {
		if gs := g.Stats(); gs.NodeID >= 0 {
			st.Generators = append(st.Generators, gs)
		}
	}
	return st
}
