package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/chaos/history"
)

// The properties the checker proves, named as in reports (docs/reliability.md).
const (
	PropRecord       = "0 history well-formed"
	PropMintedRanges = "1a no two holders of a node ID mint in overlapping timestamp ranges"
	PropWindows      = "1b no two grants of a node ID have overlapping windows"
	PropRealTime     = "1c no two holders of a node ID hold it at the same real time"
	PropUnique       = "2 no duplicate IDs"
	PropInWindow     = "3 every ID's timestamp lies in its holder's window"
	PropFencing      = "4 fencing tokens grow with every new grant of a node ID"
	PropLiveness     = "5 every live client holds a lease again within the bound after a fault heals"
)

// AllProps lists the properties in report order.
var AllProps = []string{PropRecord, PropMintedRanges, PropWindows, PropRealTime, PropUnique, PropInWindow, PropFencing, PropLiveness,
	PropOrigin, PropClockExit}

// maxExamples bounds the examples a report keeps per property.
const maxExamples = 5

// ClientRun is what the checker is told about one client process.
type ClientRun struct {
	Name   string
	Dir    string
	Start  time.Time
	Killed time.Time     // zero: it ran until the end
	Bound  time.Duration // its liveness bound; 0: CheckInput.Bound
}

// CheckInput is one run's record.
type CheckInput struct {
	Clients []ClientRun
	Faults  []Fault
	End     time.Time     // when the clients were told to stop
	Bound   time.Duration // liveness bound; 0 skips property 5
	// Origin looks IDs up in the registry's lease history (property 6); nil
	// skips it, as for a run whose store lost writes (the history with them).
	Origin OriginFunc
}

// Report is the checker's verdict on one run.
type Report struct {
	Clients, Sessions, Grants int
	IDs                       int64
	Faults                    int
	Lost, OpenFailed          int   // sessions that lost their lease; Opens that gave up
	AllocRefused              int   // Alloc answers other than 200 (pool exhausted, clock skew, …)
	Refused                   int64 // issuing calls a valid lease's generator refused (window, clock)
	LivenessChecked           bool
	LivenessPoints            int // heal points judged for property 5
	OriginChecked             bool
	OriginLookups             int // IDs property 6 looked up
	Violations                map[string]int
	Examples                  map[string][]string

	// What the servers logged (RunScenario reads their logs after the run):
	// recoveries from a store reset, leases restored from receipts and node IDs
	// contested after one.
	Resets, Restored, Contested int
	// Forged calls another API key sent for the clients' requesters, and those
	// the registry accepted with an effect (a lease removed or renewed): must be 0.
	Forged, ForgedRefused, ForgedAccepted int
	// Old backups imported while the cluster ran (restore.go); the grants such a
	// backup did not know whose holders found them valid after its import; and the
	// grants of their node IDs to other sessions after the import.
	Imports, Unknown, Regranted int
	// ClockFailures are the replicas' clock checks that failed (clock.go), and
	// ClockExits the replica processes that exited with ExitClockUnverified.
	ClockFailures, ClockExits int
}

// Failed reports whether any property was violated.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

// Violated reports whether prop was violated.
func (r *Report) Violated(prop string) bool { return r.Violations[prop] > 0 }

func (r *Report) violate(prop, format string, args ...any) {
	if r.Violations == nil {
		r.Violations, r.Examples = map[string]int{}, map[string][]string{}
	}
	r.Violations[prop]++
	if len(r.Examples[prop]) < maxExamples {
		r.Examples[prop] = append(r.Examples[prop], fmt.Sprintf(format, args...))
	}
}

// String is a short multi-line summary.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d clients, %d sessions, %d grants, %d IDs checked, %d faults, %d leases lost, "+
		"%d opens given up, %d allocs refused, %d issuing calls refused, %d liveness points judged\n",
		r.Clients, r.Sessions, r.Grants, r.IDs, r.Faults, r.Lost, r.OpenFailed, r.AllocRefused, r.Refused, r.LivenessPoints)
	if r.Resets+r.Restored+r.Contested > 0 {
		fmt.Fprintf(&b, "servers: %d store resets recovered, %d restores from receipts, %d contests\n", r.Resets, r.Restored, r.Contested)
	}
	if r.Imports > 0 {
		fmt.Fprintf(&b, "restores: %d old backups imported; %d grants they did not know minting past the import, "+
			"%d grants of those node IDs to others after it\n", r.Imports, r.Unknown, r.Regranted)
	}
	if r.ClockFailures+r.ClockExits > 0 {
		fmt.Fprintf(&b, "clock: %d replica clock checks failed, %d replica processes exited with status %d\n",
			r.ClockFailures, r.ClockExits, ExitClockUnverified)
	}
	if r.Forged > 0 {
		fmt.Fprintf(&b, "forgeries: %d calls with another key, %d refused (403), %d accepted with an effect\n",
			r.Forged, r.ForgedRefused, r.ForgedAccepted)
	}
	for _, p := range AllProps {
		if n := r.Violations[p]; n > 0 {
			fmt.Fprintf(&b, "  FAIL %s: %d violations\n", p, n)
			for _, e := range r.Examples[p] {
				fmt.Fprintf(&b, "       %s\n", e)
			}
		} else if p == PropLiveness && !r.LivenessChecked || p == PropOrigin && !r.OriginChecked {
			fmt.Fprintf(&b, "  --   %s (not checked)\n", p)
		} else {
			fmt.Fprintf(&b, "  ok   %s\n", p)
		}
	}
	return b.String()
}

// tenure is one session of one client: from its grant to its end.
type tenure struct {
	client    string
	slot, gen int
	req       string
	acq       int64 // host ns when Open returned
	lastValid int64 // host ns of the latest call that found the lease valid
	closing   bool  // closed normally: its Remove may have lowered the watermarks
	lost      bool  // the lease was lost
	refused   int64
	grants    []*grant
	path      string // the slot's ID file
	off, end  int64  // its IDs in that file; end < 0: to the end
}

func (t *tenure) String() string { return fmt.Sprintf("%s/s%d/g%d", t.client, t.slot, t.gen) }

// grant is one node ID of a tenure.
type grant struct {
	t              *tenure
	node           int64
	token          uint64
	nb, exp        int64 // ms; exp is the latest the holder was told
	n              int64 // IDs minted
	minTs, maxTs   int64 // ms of its IDs
	lastID, lastTs int64
	firstID        int64
}

// Check reads every client's history and IDs and checks properties 0–5.
func Check(in CheckInput) (*Report, error) {
	r := &Report{Clients: len(in.Clients), Faults: len(in.Faults)}
	var tenures []*tenure
	var layout *history.Layout
	for _, c := range in.Clients {
		ts, l, err := readClient(c, r)
		if err != nil {
			return nil, err
		}
		if l != nil {
			if layout != nil && *l != *layout {
				r.violate(PropRecord, "%s: layout %+v differs from %+v", c.Name, *l, *layout)
			}
			layout = l
		}
		tenures = append(tenures, ts...)
	}
	r.Sessions = len(tenures)
	byNode := map[int64][]*grant{}
	for _, t := range tenures {
		for _, g := range t.grants {
			byNode[g.node] = append(byNode[g.node], g)
			r.Grants++
		}
	}
	if layout != nil {
		if err := checkIDs(r, tenures, byNode, *layout); err != nil {
			return nil, err
		}
	}
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		checkNode(r, node, byNode[node])
	}
	if in.Bound > 0 {
		r.LivenessChecked = true
		checkLiveness(r, in, tenures)
	}
	if in.Origin != nil {
		if err := checkOrigins(r, tenures, in.Origin); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// readClient builds the tenures of one client from its history.
func readClient(c ClientRun, r *Report) ([]*tenure, *history.Layout, error) {
	events, err := history.ReadEvents(c.Dir)
	if err != nil {
		return nil, nil, fmt.Errorf("client %s: %w", c.Name, err)
	}
	type key struct{ s, g int }
	byKey := map[key]*tenure{}
	last := map[int]*tenure{} // slot → its latest tenure
	answers := map[key][]history.Lease{}
	var out []*tenure
	var layout *history.Layout
	for _, e := range events {
		k := key{e.S, e.G}
		switch e.Ev {
		case history.EvAcquired:
			if byKey[k] != nil || len(e.Leases) == 0 || e.Layout == nil {
				r.violate(PropRecord, "%s: bad or repeated acquired event for s%d/g%d", c.Name, e.S, e.G)
				continue
			}
			t := &tenure{client: c.Name, slot: e.S, gen: e.G, req: e.Req, acq: e.T,
				path: history.IDFile(c.Dir, e.S), off: e.Off, end: -1}
			for _, l := range e.Leases {
				t.grants = append(t.grants, &grant{t: t, node: l.Node, token: l.Token, nb: l.NotBefore, exp: l.ExpiresAt})
			}
			if p := last[e.S]; p != nil {
				p.end = e.Off
			}
			last[e.S], byKey[k] = t, t
			out = append(out, t)
			layout = e.Layout
		case history.EvAllocAnswer, history.EvRenewAnswer:
			answers[k] = append(answers[k], e.Leases...)
			if e.Ev == history.EvAllocAnswer && e.Status != 0 && e.Status != 200 {
				r.AllocRefused++
			}
		case history.EvProgress, history.EvLost, history.EvFatal, history.EvClosing:
			t := byKey[k]
			if t == nil {
				r.violate(PropRecord, "%s: %s event for s%d/g%d without acquired", c.Name, e.Ev, e.S, e.G)
				continue
			}
			if e.Digest != nil {
				t.lastValid = max(t.lastValid, e.Digest.LastValid)
				t.refused = max(t.refused, e.Digest.Refused)
			}
			switch e.Ev {
			case history.EvClosing:
				t.closing = true
			case history.EvLost, history.EvFatal:
				t.lost = true
			}
		case history.EvOpenFailed:
			r.OpenFailed++
		}
	}
	for _, t := range out {
		if t.lost {
			r.Lost++
		}
		r.Refused += t.refused
	}
	// Every 200 answer the holder saw may have moved its window's end.
	for k, t := range byKey {
		for _, l := range answers[k] {
			for _, g := range t.grants {
				if g.node == l.Node && g.token == l.Token {
					g.exp = max(g.exp, l.ExpiresAt)
				}
			}
		}
	}
	return out, layout, nil
}

// checkIDs reads every ID, checks it against its tenure (record, property 3),
// fills the grants' timestamp ranges, and checks property 2 per node ID.
func checkIDs(r *Report, tenures []*tenure, byNode map[int64][]*grant, l history.Layout) error {
	seqBits := uint(l.SequenceBits)
	nodeMask := int64(1)<<l.NodeBits - 1
	shift := uint(l.NodeBits + l.SequenceBits)
	buckets := map[int64][]int64{}
	for _, t := range tenures {
		ids, err := history.ReadIDs(t.path, t.off, t.end)
		if err != nil {
			return err
		}
		of := map[int64]*grant{}
		for _, g := range t.grants {
			of[g.node] = g
			g.minTs, g.maxTs = 1<<62, -1<<62
		}
		for _, id := range ids {
			node := id >> seqBits & nodeMask
			ts := id>>shift + l.EpochMs
			g := of[node]
			if g == nil || id < 0 {
				r.violate(PropRecord, "%v minted ID %d of node %d, which it does not hold", t, id, node)
				continue
			}
			if g.n > 0 && id <= g.lastID {
				r.violate(PropRecord, "%v: ID %d after %d on node %d: not increasing", t, id, g.lastID, node)
			}
			if ts < g.nb || ts > g.exp {
				r.violate(PropInWindow, "%v minted ID %d at %s on node %d, outside its window %s..%s",
					t, id, ms(ts), node, ms(g.nb), ms(g.exp))
			}
			if g.n == 0 {
				g.firstID = id
			}
			g.n++
			g.lastID = id
			g.minTs, g.maxTs = min(g.minTs, ts), max(g.maxTs, ts)
			buckets[node] = append(buckets[node], id)
		}
		r.IDs += int64(len(ids))
	}
	for node, ids := range buckets {
		slices.Sort(ids)
		for i := 1; i < len(ids); i++ {
			if ids[i] == ids[i-1] {
				ts := ids[i]>>shift + l.EpochMs
				var owners []string
				for _, g := range byNode[node] {
					if g.n > 0 && g.minTs <= ts && ts <= g.maxTs {
						owners = append(owners, g.t.String())
					}
				}
				r.violate(PropUnique, "ID %d (node %d, %s) minted twice; holders minting then: %v", ids[i], node, ms(ts), owners)
			}
		}
		buckets[node] = nil
	}
	return nil
}

// checkNode checks properties 1 and 4 among the grants of one node ID.
func checkNode(r *Report, node int64, gs []*grant) {
	// 1a: the timestamp ranges actually minted.
	minted := slices.DeleteFunc(slices.Clone(gs), func(g *grant) bool { return g.n == 0 })
	sort.Slice(minted, func(i, j int) bool { return minted[i].minTs < minted[j].minTs })
	sweep(len(minted), func(i int) int64 { return minted[i].minTs }, func(i int) int64 { return minted[i].maxTs },
		func(a, b int) {
			r.violate(PropMintedRanges, "node %d: %v minted %s..%s, %v minted %s..%s", node,
				minted[a].t, ms(minted[a].minTs), ms(minted[a].maxTs), minted[b].t, ms(minted[b].minTs), ms(minted[b].maxTs))
		})
	// 1b: the windows granted. A holder that closed normally may have attested
	// through Remove that it minted nothing after its last ID; its window ends there.
	type win struct {
		g      *grant
		lo, hi int64
	}
	var ws []win
	for _, g := range gs {
		hi := g.exp
		if g.t.closing {
			hi = min(hi, max(g.maxTs, g.nb-1))
		}
		if hi >= g.nb {
			ws = append(ws, win{g, g.nb, hi})
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].lo < ws[j].lo })
	sweep(len(ws), func(i int) int64 { return ws[i].lo }, func(i int) int64 { return ws[i].hi },
		func(a, b int) {
			r.violate(PropWindows, "node %d: %v (token %d) window %s..%s overlaps %v (token %d) window %s..%s", node,
				ws[a].g.t, ws[a].g.token, ms(ws[a].lo), ms(ws[a].hi), ws[b].g.t, ws[b].g.token, ms(ws[b].lo), ms(ws[b].hi))
		})
	// 1c: real time. A tenure was valid from before its acq (Open checked it) to its
	// lastValid, without a gap: a lost lease never comes back.
	held := slices.DeleteFunc(slices.Clone(gs), func(g *grant) bool { return g.t.lastValid < g.t.acq })
	sort.Slice(held, func(i, j int) bool { return held[i].t.acq < held[j].t.acq })
	sweep(len(held), func(i int) int64 { return held[i].t.acq }, func(i int) int64 { return held[i].t.lastValid },
		func(a, b int) {
			r.violate(PropRealTime, "node %d: %v held it until at least %s, %v held it from %s", node,
				held[a].t, ns(held[a].t.lastValid), held[b].t, ns(held[b].t.acq))
		})
	// 4: tokens in the order of the grants (by acquisition).
	order := slices.Clone(gs)
	sort.Slice(order, func(i, j int) bool { return order[i].t.acq < order[j].t.acq })
	for i := 1; i < len(order); i++ {
		if order[i].token <= order[i-1].token {
			r.violate(PropFencing, "node %d: %v got token %d after %v had token %d", node,
				order[i].t, order[i].token, order[i-1].t, order[i-1].token)
		}
	}
}

// checkLiveness checks property 5: after every fault that concerns a client heals
// (and after it starts), it holds a lease again within its bound. A point is judged
// only when the client stays undisturbed for the whole bound after it (no fault that
// concerns it is active meanwhile), it was not killed first, and the run lasted long
// enough to tell.
func checkLiveness(r *Report, in CheckInput, tenures []*tenure) {
	by := map[string][]*tenure{}
	for _, t := range tenures {
		by[t.client] = append(by[t.client], t)
	}
	for _, c := range in.Clients {
		var mine []Fault
		for _, f := range in.Faults {
			if f.Global || f.Target == c.Name {
				mine = append(mine, f)
			}
		}
		bound := in.Bound
		if c.Bound > 0 {
			bound = c.Bound
		}
		points := []time.Time{c.Start}
		for _, f := range mine {
			points = append(points, f.Heal)
		}
		for _, h := range points {
			due := h.Add(bound)
			if h.Before(c.Start) || due.After(in.End) || (!c.Killed.IsZero() && due.After(c.Killed)) || disturbed(mine, h, due) {
				continue
			}
			r.LivenessPoints++
			if !liveAfter(by[c.Name], h.UnixNano(), due.UnixNano()) {
				r.violate(PropLiveness, "%s held no lease within %v after %s", c.Name, bound, h.UTC().Format("15:04:05.000"))
			}
		}
	}
}

// disturbed reports whether one of faults is active at some time in (h, due].
func disturbed(faults []Fault, h, due time.Time) bool {
	for _, f := range faults {
		if f.At.Before(due) && f.Heal.After(h) {
			return true
		}
	}
	return false
}

// liveAfter reports whether a tenure was acquired in [h, due], or was held from
// before h through due.
func liveAfter(ts []*tenure, h, due int64) bool {
	for _, t := range ts {
		if t.lastValid < t.acq {
			continue
		}
		if (t.acq >= h && t.acq <= due) || (t.acq < h && t.lastValid >= due) {
			return true
		}
	}
	return false
}

// sweep walks n closed intervals sorted by lo and calls overlap(a, b) for every
// interval b that starts at or before the end of an earlier one; a is the earlier
// interval that reaches furthest.
func sweep(n int, lo, hi func(int) int64, overlap func(a, b int)) {
	far := -1
	for i := range n {
		if far >= 0 && hi(far) >= lo(i) {
			overlap(far, i)
		}
		if far < 0 || hi(i) > hi(far) {
			far = i
		}
	}
}

func ms(v int64) string { return time.UnixMilli(v).UTC().Format("15:04:05.000") }
func ns(v int64) string { return time.Unix(0, v).UTC().Format("15:04:05.000000") }

// sortFaults orders faults by time, for reports.
func sortFaults(fs []Fault) {
	slices.SortFunc(fs, func(a, b Fault) int { return cmp.Compare(a.At.UnixNano(), b.At.UnixNano()) })
}
