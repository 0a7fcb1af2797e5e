package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// checkPicks checks that a new grant took the best free node IDs, judged by the
// node states before it: ready ones (fenced watermark < now) before cooling ones,
// cooling ones by lowest fenced watermark, ready ones least recently freed first (among nodes whose
// free order the env knows).
func (e *env) checkPicks(g idkeeper.Grant, before map[idkeeper.NodeID]idkeeper.NodeState, now time.Time) {
	e.t.Helper()
	picked := map[idkeeper.NodeID]bool{}
	for _, l := range g.Leases {
		picked[l.NodeID] = true
	}
	for p := range picked {
		bp := before[p]
		for u, bu := range before {
			if picked[u] || bu.Lease != nil || bu.QuarantinedUntil.After(now) {
				continue
			}
			pw, uw := bp.Fenced(), bu.Fenced()
			pReady, uReady := pw.Before(now), uw.Before(now)
			switch {
			case !pReady && uReady:
				e.t.Fatalf("Alloc took cooling node %d (fenced watermark %s) and left ready node %d", p, fmtTime(pw), u)
			case !pReady && uw.Before(pw):
				e.t.Fatalf("Alloc took cooling node %d (fenced watermark %s) before node %d (fenced watermark %s)",
					p, fmtTime(pw), u, fmtTime(uw))
			case pReady && uReady && e.rank[p] > 0 && e.rank[u] > 0 && e.rank[p] > e.rank[u]:
				e.t.Fatalf("Alloc took node %d and left node %d, which was freed earlier", p, u)
			}
		}
	}
}

// check cross-checks Counts, Leases and Node at the current instant: Total =
// Remaining + Leased + InGrace + Quarantined, every count (Cooling and NextReadyAt
// included) agrees with the node states, Leases lists exactly the held nodes sorted by NodeID, and no watermark lies
// below its lease's expiry.
func (e *env) check() {
	e.t.Helper()
	now := e.now()
	c := e.counts()
	if c.Total != c.Remaining+c.Leased+c.InGrace+c.Quarantined || c.Cooling > c.Remaining {
		e.t.Fatalf("Counts %+v: Total != Remaining + Leased + InGrace + Quarantined, or Cooling > Remaining", c)
	}
	leases := e.leases()
	want := idkeeper.Counts{Total: e.nodes}
	held := 0
	for i := range e.nodes {
		id := e.first + idkeeper.NodeID(i)
		st := e.node(id)
		switch {
		case st.Lease != nil:
			if held >= len(leases) {
				e.t.Fatalf("Leases() has %d leases, but node %d is held too", len(leases), id)
			}
			wantLease(e.t, "Leases() vs Node()", leases[held], *st.Lease)
			held++
			if st.Watermark.Before(st.Lease.ExpiresAt) {
				e.t.Fatalf("node %d: watermark %s below the lease's expiry %s", id, st.Watermark, st.Lease.ExpiresAt)
			}
			if st.Lease.Expired(now) {
				want.InGrace++
			} else {
				want.Leased++
			}
		case st.QuarantinedUntil.After(now):
			want.Quarantined++
		default:
			want.Remaining++
			wantCooling(&want, st, now)
		}
	}
	if held != len(leases) {
		e.t.Fatalf("Leases() has %d leases, Node() shows %d held", len(leases), held)
	}
	e.checkHistory(leases)
	if !c.Equal(want) {
		e.t.Fatalf("Counts() = %+v, node states say %+v", c, want)
	}
	outside := []idkeeper.NodeID{e.first + idkeeper.NodeID(e.nodes)}
	if e.first > 0 {
		outside = append(outside, e.first-1)
	}
	for _, id := range outside {
		if _, err := e.s.Node(e.ctx, id); !errors.Is(err, idkeeper.ErrNotFound) {
			e.t.Fatalf("Node(%d) of the pool %d..%d: err = %v, want ErrNotFound", id, e.first, int(e.first)+e.nodes-1, err)
		}
	}
}

func (e *env) wantCounts(want idkeeper.Counts) {
	e.t.Helper()
	if c := e.counts(); !c.Equal(want) {
		e.t.Fatalf("Counts() = %+v, want %+v", c, want)
	}
}

// wantExhausted checks that allocating count to r fails with NODE_IDS_EXHAUSTED.
func (e *env) wantExhausted(r idkeeper.Requester, count, remaining int) {
	e.t.Helper()
	_, err := e.allocRaw(r, count, 10*time.Minute)
	wantCode(e.t, err, protocol.CodeNodeIDsExhausted)
	wantDetail(e.t, err, "requested", count)
	wantDetail(e.t, err, "remaining", remaining)
}

func wantCode(t *testing.T, err error, code idkeeper.Code) {
	t.Helper()
	if got := protocol.ErrorCode(err); got != code {
		t.Fatalf("error code %q (err %v), want %q", got, err, code)
	}
}

func wantDetail(t *testing.T, err error, key string, want any) {
	t.Helper()
	var e *idkeeper.Error
	if !errors.As(err, &e) {
		t.Fatalf("err %v is no *idkeeper.Error", err)
	}
	got, ok := e.Details[key]
	if !ok || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("error detail %q = %v (present %v), want %v; details %v", key, got, ok, want, e.Details)
	}
}

func wantTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Fatalf("%s = %s, want %s", what, fmtTime(got), fmtTime(want))
	}
}

func wantLease(t *testing.T, what string, got, want idkeeper.Lease) {
	t.Helper()
	if got.NodeID != want.NodeID || got.Requester.Key() != want.Requester.Key() || got.KeyID != want.KeyID ||
		!got.Requester.StartedAt.Equal(want.Requester.StartedAt) ||
		!got.NotBefore.Equal(want.NotBefore) || !got.ExpiresAt.Equal(want.ExpiresAt) ||
		got.FencingToken != want.FencingToken || !got.GrantedAt.Equal(want.GrantedAt) ||
		!got.RenewedAt.Equal(want.RenewedAt) {
		t.Fatalf("%s:\n got %s\nwant %s", what, fmtLease(got), fmtLease(want))
	}
}

// wantSameLeases checks that got and want hold the same leases in the same order.
func wantSameLeases(t *testing.T, what string, got, want []idkeeper.Lease) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d leases %v, want %d %v", what, len(got), nodeIDs(got), len(want), nodeIDs(want))
	}
	for i := range got {
		wantLease(t, what, got[i], want[i])
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000Z")
}

func fmtLease(l idkeeper.Lease) string {
	return fmt.Sprintf("{node %d req %s key %s notBefore %s expires %s token %d granted %s renewed %s}",
		l.NodeID, l.Requester, l.KeyID, fmtTime(l.NotBefore), fmtTime(l.ExpiresAt), l.FencingToken,
		fmtTime(l.GrantedAt), fmtTime(l.RenewedAt))
}

func nodeIDs(ls []idkeeper.Lease) []idkeeper.NodeID {
	ids := make([]idkeeper.NodeID, len(ls))
	for i, l := range ls {
		ids[i] = l.NodeID
	}
	return ids
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
