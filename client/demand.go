package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Node IDs on demand (issue #18). A session whose Config.MaxCount is above
// Config.Count measures, once a second on its Clock, the IDs it minted against its
// ceiling (node IDs held × the layout's IDs per second). When the share was at least
// growAbove in growHot of the last growWindow samples, it leases more node IDs —
// as many as it holds, up to MaxCount — as an extra session: a Session of its own,
// with its own requester instance (DESIGN §3), lease, windows, renewals and
// Remove. When the share stayed below shrinkBelow for shrinkAfter, it gives the
// newest extra session back (Close: drain, then Remove with mintedUpTo). It never
// holds fewer than Count node IDs nor more than MaxCount.
const (
	demandSample  = time.Second
	growAbove     = 0.8
	growHot       = 3 // samples at or above growAbove …
	growWindow    = 6 // … of the last growWindow samples: two doublings take about 6 s
	shrinkBelow   = 0.3
	shrinkAfter   = 60 * time.Second
	growOpenLimit = 30 * time.Second // one grow's Alloc retries (NODE_IDS_EXHAUSTED) at most
)

// demand is the on-demand state of a session; nil when Config.MaxCount is off.
type demand struct {
	max int

	mu       sync.Mutex
	extras   []*Session // oldest first
	growing  bool
	stopped  bool
	timer    Timer
	last     map[*Generator]uint64
	lastSrc  uint64
	lastAt   time.Duration
	hot      []bool        // the last growWindow samples: at or above growAbove
	cold     time.Duration // monotonic time since which every sample was below shrinkBelow; -1: not cold
	work     sync.WaitGroup
	grows    atomic.Uint64
	shrinks  atomic.Uint64
	utilBits atomic.Uint64 // float64 bits of the last sample's share of the ceiling

	// source replaces the generators' minted counters as the measure of issuing
	// (tests: a utilisation source on a fake clock).
	source func() uint64
}

func newDemand(cfg Config) *demand {
	if cfg.MaxCount <= cfg.Count {
		return nil
	}
	return &demand{max: cfg.MaxCount, cold: -1}
}

// pooled returns every generator the session mints with: its own, then its extra
// sessions'.
func (s *Session) pooled() []*Generator {
	if s.dem == nil {
		return s.gens
	}
	return *s.pool.Load()
}

// NumNodeIDs is the number of node IDs the session mints with now: Config.Count,
// plus those of the extra sessions it holds when it leases on demand
// (Config.MaxCount). NextID, NextIDs and NextIDsOn spread over all of them.
func (s *Session) NumNodeIDs() int { return len(s.pooled()) }

// retryable reports whether err, returned by an extra session's generator, means
// only that this extra session no longer issues (given back, or its lease lost):
// the call is then served by the session's own generators.
func retryable(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotOpen)
}

// fillOn fills dst with generator g of the pool; the caller has entered s's gate
// and checked s.valid(). alt is the session's own generator to use instead when g
// belongs to an extra session that no longer issues.
func (s *Session) fillOn(g, alt *Generator, dst []int64) error {
	if g.s == s {
		return g.fill(g.m.Load(), dst)
	}
	err := g.NextIDs(dst)
	if err != nil && retryable(err) {
		return alt.fill(alt.m.Load(), dst)
	}
	return err
}

// startDemand arms the first sample; Open calls it once the lease is held.
func (s *Session) startDemand() {
	d := s.dem
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.lastAt = s.clk.Mono()
	d.last = map[*Generator]uint64{}
	for _, g := range s.pooled() {
		d.last[g] = g.minted.Load()
	}
	if d.source != nil {
		d.lastSrc = d.source()
	}
	d.timer = s.clk.AfterFunc(demandSample, s.demandTick)
}

// idsPerSecond is what one node ID mints at most, by the layout.
func (s *Session) idsPerSecond() float64 {
	s.mu.Lock()
	l := s.layout
	s.mu.Unlock()
	return float64(l.MaxSequence()+1) * 1000
}

// demandTick takes one sample and decides.
func (s *Session) demandTick() {
	d := s.dem
	perSec := s.idsPerSecond()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	now := s.clk.Mono()
	gens := s.pooled()
	var minted uint64
	last := make(map[*Generator]uint64, len(gens))
	for _, g := range gens {
		m := g.minted.Load()
		minted += m - d.last[g] // a generator new since the last sample counts from 0
		last[g] = m
	}
	d.last = last
	if d.source != nil {
		v := d.source()
		minted, d.lastSrc = v-d.lastSrc, v
	}
	elapsed := now - d.lastAt
	d.lastAt = now
	util := 0.0
	if elapsed > 0 && perSec > 0 {
		util = float64(minted) / (float64(len(gens)) * perSec * elapsed.Seconds())
	}
	d.utilBits.Store(math.Float64bits(util))
	d.hot = append(d.hot, util >= growAbove)
	if len(d.hot) > growWindow {
		d.hot = d.hot[len(d.hot)-growWindow:]
	}
	switch {
	case util >= shrinkBelow:
		d.cold = -1
	case d.cold < 0:
		d.cold = now - elapsed // cold since the start of this sample
	}
	held := len(gens)
	hot := 0
	for _, h := range d.hot {
		if h {
			hot++
		}
	}
	switch {
	case d.growing:
	case hot >= growHot && held < d.max:
		n := min(held, d.max-held)
		d.growing = true
		d.hot = d.hot[:0] // judge the new capacity on fresh samples
		d.work.Add(1)
		reason := fmt.Sprintf("issuing was at or above %.0f %% of the ceiling in %d of the last %d samples of %v (last: %.0f %% of %d node IDs)",
			growAbove*100, hot, growWindow, demandSample, util*100, held)
		go s.grow(n, held+n, reason)
	case d.cold >= 0 && now-d.cold >= shrinkAfter && len(d.extras) > 0:
		x := d.extras[len(d.extras)-1]
		d.extras = d.extras[:len(d.extras)-1]
		s.rebuildPoolLocked()
		d.cold = now // another shrinkAfter before the next one
		d.hot = d.hot[:0]
		d.shrinks.Add(1)
		n := len(s.pooled())
		s.log.Info(fmt.Sprintf("idkeeper client: shrank to %d node IDs", n), "nodeIds", n, "released", nodeIDs(x.Leases()),
			"reason", fmt.Sprintf("issuing stayed below %.0f %% of the ceiling for %v", shrinkBelow*100, shrinkAfter))
		d.work.Add(1)
		go func() {
			defer d.work.Done()
			_ = x.Close() // drain, then Remove with mintedUpTo
		}()
	}
	d.timer = s.clk.AfterFunc(demandSample, s.demandTick)
}

// grow leases n more node IDs as an extra session; total is the count it grows to.
func (s *Session) grow(n, total int, reason string) {
	d := s.dem
	defer d.work.Done()
	done := func() {
		d.mu.Lock()
		d.growing = false
		d.mu.Unlock()
	}
	cfg := s.cfg
	cfg.Count, cfg.MaxCount = n, 0
	var x *Session
	cfg.OnFatal = func(err error) { s.dropExtra(x, err) }
	x, err := New(cfg)
	if err == nil {
		x.api.reps = s.api.reps // one view of the replicas: which answers, the counters
	}
	if err != nil {
		done()
		s.log.Error("idkeeper client: could not lease more node IDs", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, growOpenLimit)
	defer cancel()
	if err := x.Open(ctx); err != nil {
		done()
		if s.ctx.Err() == nil {
			s.log.Warn("idkeeper client: could not lease more node IDs; trying again when issuing stays high", "want", total, "err", err)
		}
		return
	}
	if xl, l := x.Layout(), s.Layout(); xl != l {
		done()
		s.log.Error("idkeeper client: the registry answered another ID layout for more node IDs; giving them back", "layout", xl, "want", l)
		_ = x.Close()
		return
	}
	if err := x.Check(); err != nil {
		// A node ID still cooling would refuse the requests spread onto it.
		done()
		s.log.Warn("idkeeper client: more node IDs leased, but they cannot issue yet; giving them back", "err", err)
		_ = x.Close()
		return
	}
	d.mu.Lock()
	d.growing = false
	if d.stopped {
		d.mu.Unlock()
		_ = x.Close()
		return
	}
	d.extras = append(d.extras, x)
	s.rebuildPoolLocked()
	held := len(s.pooled())
	d.mu.Unlock()
	d.grows.Add(1)
	s.log.Info(fmt.Sprintf("idkeeper client: grew to %d node IDs", held), "nodeIds", held, "added", nodeIDs(x.Leases()),
		"requester", x.Requester().Key(), "reason", reason)
	if err := x.Err(); err != nil { // lost before it was added
		s.dropExtra(x, err)
	}
}

// dropExtra removes an extra session that lost its lease; the others go on.
func (s *Session) dropExtra(x *Session, cause error) {
	d := s.dem
	d.mu.Lock()
	i := slices.Index(d.extras, x)
	if i < 0 {
		d.mu.Unlock()
		return
	}
	d.extras = slices.Delete(d.extras, i, i+1)
	s.rebuildPoolLocked()
	held := len(s.pooled())
	d.mu.Unlock()
	d.shrinks.Add(1)
	s.log.Warn(fmt.Sprintf("idkeeper client: shrank to %d node IDs", held), "nodeIds", held, "dropped", nodeIDs(x.Leases()),
		"reason", "an extra session lost its lease", "err", cause)
	_ = x.Close() // sends nothing: its lease is no longer valid
}

// rebuildPoolLocked publishes the session's generators and its extras'. Callers
// hold d.mu.
func (s *Session) rebuildPoolLocked() {
	all := slices.Clone(s.gens)
	for _, x := range s.dem.extras {
		all = append(all, x.gens...)
	}
	s.pool.Store(&all)
}

// stopDemand stops sampling and closes every extra session (drain, then Remove
// with mintedUpTo), in parallel; it returns when they are closed. Idempotent.
func (s *Session) stopDemand() {
	d := s.dem
	if d == nil {
		return
	}
	d.mu.Lock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	extras := d.extras
	d.extras = nil
	s.rebuildPoolLocked()
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, x := range extras {
		wg.Go(func() { _ = x.Close() })
	}
	wg.Wait()
	d.work.Wait()
}

// DemandStats is the on-demand part of Stats.
type DemandStats struct {
	// NodeIDs is NumNodeIDs(): the node IDs held now.
	NodeIDs int
	// Grows and Shrinks count the times the session leased more node IDs, and gave
	// some back (idle, or an extra session's lease lost).
	Grows, Shrinks uint64
	// Utilization is the last sample's share of the ceiling (IDs minted per second
	// / (node IDs held × the layout's IDs per second)); 0 when not leasing on
	// demand.
	Utilization float64
}

func (s *Session) demandStats() DemandStats {
	st := DemandStats{NodeIDs: s.NumNodeIDs()}
	if d := s.dem; d != nil {
		st.Grows, st.Shrinks = d.grows.Load(), d.shrinks.Load()
		st.Utilization = math.Float64frombits(d.utilBits.Load())
	}
	return st
}
