package admin

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The pool and lease routes: the map of the pool, the lease list with the clock
// skew the registry stored for each requester, and revoking a live lease.

var revokeLeaseMembers = wire.Members(wire.RevokeLeaseRequest{})

// query returns r's query after checking it names no parameter outside known
// (INVALID_REQUEST naming the first other) and none twice.
func query(r *http.Request, known ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, protocol.Invalidf("query", "the query string is malformed")
	}
	for name, vs := range q {
		switch {
		case !slices.Contains(known, name):
			return nil, protocol.Invalidf(name, "unknown query parameter %q; expected %s", name, strings.Join(known, ", "))
		case len(vs) > 1:
			return nil, protocol.Invalidf(name, "query parameter %q appears more than once", name)
		}
	}
	return q, nil
}

func (h *Handler) pool(_ http.ResponseWriter, r *http.Request, _ *principal) (any, error) {
	m, err := h.reg.PoolMap(r.Context())
	if err != nil {
		return nil, err
	}
	c := m.Counts
	first := int64(m.First)
	out := wire.Pool{RemainingResponse: wire.RemainingResponse{First: first, Last: first + int64(c.Total) - 1, Total: c.Total, Remaining: c.Remaining, Leased: c.Leased,
		InGrace: c.InGrace, Quarantined: c.Quarantined, Cooling: c.Cooling}, At: wire.FormatTime(m.Now),
		Nodes: make([]string, len(m.Nodes))}
	if !c.NextReadyAt.IsZero() {
		out.NextReadyAt = wire.FormatTime(c.NextReadyAt)
	}
	for i, s := range m.Nodes {
		out.Nodes[i] = string(s)
	}
	return out, nil
}

// leaseJSON is l as the admin API shows it at now, with the requester's stored
// skew observation, if any.
func leaseJSON(l idkeeper.Lease, now time.Time, skew *idkeeper.SkewObservation) wire.AdminLease {
	out := wire.AdminLease{NodeID: int64(l.NodeID), KeyID: l.KeyID, FencingToken: l.FencingToken,
		Requester: wire.Requester{MachineID: l.Requester.MachineID, PID: l.Requester.PID,
			StartedAt: wire.FormatTime(l.Requester.StartedAt), Instance: l.Requester.Instance},
		NotBefore: wire.FormatTime(l.NotBefore), ExpiresAt: wire.FormatTime(l.ExpiresAt),
		GrantedAt: wire.FormatTime(l.GrantedAt), RenewedAt: optTime(l.RenewedAt), Status: string(idkeeper.NodeLeased)}
	if l.Expired(now) {
		out.Status = string(idkeeper.NodeGrace)
	}
	if skew != nil {
		out.Skew = &wire.Skew{SkewMs: skew.Skew.Milliseconds(), ThresholdMs: skew.Threshold.Milliseconds(),
			Level: string(skew.Level), ObservedAt: wire.FormatTime(skew.ObservedAt)}
	}
	return out
}

// leases lists the leases, filtered by ?requester= (the machine ID contains it,
// or it is the instance), ?key= (the owning key's ID) and ?status= (leased or
// grace, judged by the registry's clock). The skew shown is the observation the registry stored when the
// requester last sent its clock, with its level as judged then: never recomputed.
func (h *Handler) leases(_ http.ResponseWriter, r *http.Request, _ *principal) (any, error) {
	q, err := query(r, "requester", "key", "status")
	if err != nil {
		return nil, err
	}
	who, key, status := q.Get("requester"), q.Get("key"), q.Get("status")
	if status != "" && status != string(idkeeper.NodeLeased) && status != string(idkeeper.NodeGrace) {
		return nil, protocol.Invalidf("status", "status is %s or %s", idkeeper.NodeLeased, idkeeper.NodeGrace)
	}
	ctx := r.Context()
	ls, err := h.reg.Leases(ctx)
	if err != nil {
		return nil, err
	}
	now := h.reg.Now()
	obs, err := h.reg.SkewObservations(ctx)
	if err != nil {
		return nil, err
	}
	skews := make(map[string]*idkeeper.SkewObservation, len(obs))
	for i := range obs {
		skews[obs[i].Requester.Key()] = &obs[i]
	}
	out := wire.LeaseList{At: wire.FormatTime(now), Leases: []wire.AdminLease{}}
	for _, l := range ls {
		switch {
		case key != "" && l.KeyID != key:
			continue
		case who != "" && !strings.Contains(l.Requester.MachineID, who) && l.Requester.Instance != who:
			continue
		}
		wl := leaseJSON(l, now, skews[l.Requester.Key()])
		if status != "" && wl.Status != status {
			continue
		}
		out.Leases = append(out.Leases, wl)
	}
	return out, nil
}

// nodeParam reads the node ID of the path ({node}).
func nodeParam(r *http.Request) (idkeeper.NodeID, error) {
	node, err := strconv.ParseUint(r.PathValue("node"), 10, 32)
	if err != nil {
		return 0, protocol.Invalidf("node", "the node ID in the path must be a non-negative integer")
	}
	return idkeeper.NodeID(node), nil
}

// nodeJSON is st as GET /admin/api/nodes/{node} shows it at now.
func nodeJSON(st idkeeper.NodeState, now time.Time) wire.AdminNode {
	out := wire.AdminNode{NodeID: int64(st.NodeID), Status: string(st.StatusAt(now)), At: wire.FormatTime(now),
		Watermark: optTime(st.Watermark), Floor: optTime(st.Floor), Fenced: optTime(st.Fenced()),
		QuarantinedUntil: optTime(st.QuarantinedUntil), LastToken: st.LastToken, Restorable: st.Restorable}
	if st.Lease != nil {
		l := leaseJSON(*st.Lease, now, nil)
		out.Lease = &l
	}
	return out
}

// node answers one node ID's state (Registry.Node): 404 NOT_FOUND outside the
// pool. Its lease, if any, carries no skew: GET /admin/api/leases has it.
func (h *Handler) node(_ http.ResponseWriter, r *http.Request, _ *principal) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	id, err := nodeParam(r)
	if err != nil {
		return nil, err
	}
	st, err := h.reg.Node(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return nodeJSON(st, h.reg.Now()), nil
}

// revokeLease ends a live lease for an operator (Registry.RevokeLease, which
// audits it as the caller): its node ID is quarantined until the lease's expiry +
// grace, and its holder learns at its next Renew.
func (h *Handler) revokeLease(w http.ResponseWriter, r *http.Request, _ *principal) (any, error) {
	node, err := nodeParam(r)
	if err != nil {
		return nil, err
	}
	m, err := h.body(w, r, revokeLeaseMembers)
	if err != nil {
		return nil, err
	}
	token, ok, err := m.Int("", "fencingToken", 1, idkeeper.MaxFencingToken)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, protocol.Invalidf("fencingToken", "fencingToken is required: the token of the lease to revoke")
	}
	l, err := h.reg.RevokeLease(r.Context(), node, uint64(token))
	if err != nil {
		return nil, err
	}
	now := h.reg.Now()
	return wire.RevokeLeaseResponse{Lease: leaseJSON(l, now, nil),
		QuarantinedUntil: wire.FormatTime(l.ExpiresAt.Add(h.reg.Config().Grace))}, nil
}
