package idkeeper

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// The machine watch (issue #20): a process that crash-loops holds the node IDs of
// every session it started until their leases run out, a whole lease duration after
// each session's first Renew. The watch makes that visible per machine ID.

// Settings of the machine watch.
const (
	// machineWatchTop is the most machine IDs Observer.Machines reports: those whose
	// leases hold the most node IDs. It bounds the label cardinality of the gauges.
	machineWatchTop = 10
	// machineOverdueWarn is the number of overdue sessions (Overdue) at which a
	// machine ID gets a warning log line.
	machineOverdueWarn = 8
	// machineWarnEvery is the least time between two warnings about one machine ID.
	machineWarnEvery = time.Hour
)

// MachineLeases is what the sessions (requesters) of one machine ID hold at one
// instant.
type MachineLeases struct {
	MachineID string
	Sessions  int // requesters of this machine ID that hold leases
	// Overdue are the Sessions that missed a renewal (Overdue): crashed, killed
	// without Close, or cut off from the registry. Sessions − Overdue renew.
	Overdue        int
	NodeIDs        int // node IDs the Sessions' leases hold
	OverdueNodeIDs int // node IDs the Overdue sessions' leases hold
	// OverdueUntil is the latest ExpiresAt of the overdue sessions' leases (zero when
	// none): cleanup frees their node IDs after it + grace, and a node ID freed so
	// cools until it (Counts.Cooling).
	OverdueUntil time.Time
}

// Overdue reports whether the holder of l missed a renewal at now. A client renews
// at half the time its last Alloc or Renew granted (DESIGN §4): from its last
// contact, seen = max(GrantedAt, RenewedAt), the next Renew is due after
// (ExpiresAt − seen) / 2. A lease is overdue when now is more than slack past that
// instant. With the default 48 h lease a session that crashed is overdue 24 h +
// slack after its last Renew, and keeps its node IDs for 24 h more (+ grace).
func Overdue(l Lease, now time.Time, slack time.Duration) bool {
	seen := l.GrantedAt
	if l.RenewedAt.After(seen) {
		seen = l.RenewedAt
	}
	return now.Sub(seen) > l.ExpiresAt.Sub(seen)/2+slack
}

// summariseMachines groups leases by the machine ID of their requester. A session
// (one requester) is overdue when every one of its leases is Overdue. The result
// is sorted by NodeIDs, then Sessions, both descending, then by MachineID.
func summariseMachines(leases []Lease, now time.Time, slack time.Duration) []MachineLeases {
	type session struct {
		machine string
		nodes   int
		overdue bool
		until   time.Time
	}
	sessions := map[string]*session{}
	for _, l := range leases {
		k := l.Requester.Key()
		s := sessions[k]
		if s == nil {
			s = &session{machine: l.Requester.MachineID, overdue: true}
			sessions[k] = s
		}
		s.nodes++
		s.overdue = s.overdue && Overdue(l, now, slack)
		if l.ExpiresAt.After(s.until) {
			s.until = l.ExpiresAt
		}
	}
	byMachine := map[string]*MachineLeases{}
	for _, s := range sessions {
		m := byMachine[s.machine]
		if m == nil {
			m = &MachineLeases{MachineID: s.machine}
			byMachine[s.machine] = m
		}
		m.Sessions++
		m.NodeIDs += s.nodes
		if s.overdue {
			m.Overdue++
			m.OverdueNodeIDs += s.nodes
			if s.until.After(m.OverdueUntil) {
				m.OverdueUntil = s.until
			}
		}
	}
	out := make([]MachineLeases, 0, len(byMachine))
	for _, m := range byMachine {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b MachineLeases) int {
		return cmp.Or(cmp.Compare(b.NodeIDs, a.NodeIDs), cmp.Compare(b.Sessions, a.Sessions), cmp.Compare(a.MachineID, b.MachineID))
	})
	return out
}

// machineWatch remembers when each machine ID was last warned about.
type machineWatch struct {
	mu     sync.Mutex
	warned map[string]time.Time
}

// watchMachines runs at every cleanup tick, on every replica: it reads every lease
// (Store.Leases: O(leases), at most the pool size, once per cleanup interval),
// reports the machineWatchTop machine IDs holding the most node IDs
// (Observer.Machines), and, when warn is set (the replica that ran the cleanup job),
// logs a warning for each machine ID with at least machineOverdueWarn overdue
// sessions, at most once per machine ID per machineWarnEvery. A session is overdue
// when it missed a renewal by more than the cleanup interval (Overdue).
func (r *Registry) watchMachines(ctx context.Context, warn bool) {
	leases, err := r.store.Leases(ctx)
	if err != nil {
		r.log.Warn("machine watch: cannot read the leases", "err", err)
		return
	}
	now, err := r.store.Now(ctx)
	if err != nil {
		r.log.Warn("machine watch: cannot read the store's clock", "err", err)
		return
	}
	all := summariseMachines(leases, now, r.cfg.CleanupInterval)
	r.obs.Machines(all[:min(len(all), machineWatchTop)], len(all))
	if !warn {
		return
	}
	w := &r.machines
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, at := range w.warned {
		if now.Sub(at) >= machineWarnEvery {
			delete(w.warned, id)
		}
	}
	for _, m := range all {
		if m.Overdue < machineOverdueWarn {
			continue
		}
		if _, ok := w.warned[m.MachineID]; ok {
			continue
		}
		if w.warned == nil {
			w.warned = map[string]time.Time{}
		}
		w.warned[m.MachineID] = now
		r.log.Warn("a machine ID holds node IDs for many sessions that stopped renewing (a crash loop, or processes "+
			"killed without Close): their node IDs stay held until their leases end, see docs/operations.md",
			"machineId", m.MachineID, "sessions", m.Sessions, "renewing", m.Sessions-m.Overdue, "overdue", m.Overdue,
			"nodeIds", m.NodeIDs, "overdueNodeIds", m.OverdueNodeIDs, "heldUntil", m.OverdueUntil.Add(r.cfg.Grace),
			"leaseDuration", r.cfg.LeaseDuration)
	}
}
