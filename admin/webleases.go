package admin

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The leases page: the pool's counts, the node map, the list of leases with
// filters, a node's detail, and the revocation of a lease with its confirm step.

// refreshEvery is how often the leases page fetches its live parts.
const refreshEvery = 5 * time.Second

// leaseFilter is the list's filter, from the query: requester (a substring of the
// machine ID, PID or instance), key (an API key ID), status ("leased", "grace")
// and node (a node ID, which also opens its detail).
type leaseFilter struct {
	Requester, Key, Status, Node string
	node                         int // -1: none
}

// Any reports whether the filter selects anything.
func (f leaseFilter) Any() bool {
	return f.Requester != "" || f.Key != "" || f.Status != "" || f.Node != ""
}

func (f leaseFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"requester": f.Requester, "key": f.Key, "status": f.Status, "node": f.Node} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

func parseLeaseFilter(q url.Values) leaseFilter {
	f := leaseFilter{node: -1}
	f.Requester, _ = idkeeper.CleanText(q.Get("requester"), 200)
	f.Key = strings.TrimSpace(q.Get("key"))
	if len(f.Key) > 200 {
		f.Key = f.Key[:200]
	}
	switch s := q.Get("status"); s {
	case string(cellLeased), string(cellGrace):
		f.Status = s
	}
	if n, err := strconv.Atoi(strings.TrimSpace(q.Get("node"))); err == nil && n >= 0 && int64(n) <= int64(idkeeper.MaxPoolNodes) {
		f.node, f.Node = n, strconv.Itoa(n)
	}
	return f
}

// match reports whether l, of status s, passes the filter.
func (f leaseFilter) match(l idkeeper.Lease, s cellStatus) bool {
	if f.node >= 0 && int(l.NodeID) != f.node || f.Key != "" && l.KeyID != f.Key || f.Status != "" && string(s) != f.Status {
		return false
	}
	if f.Requester == "" {
		return true
	}
	needle := strings.ToLower(f.Requester)
	for _, hay := range []string{l.Requester.MachineID, strconv.Itoa(l.Requester.PID), l.Requester.Instance} {
		if strings.Contains(strings.ToLower(hay), needle) {
			return true
		}
	}
	return false
}

// skewView is a stored clock-skew observation as the list shows it.
type skewView struct {
	Level      idkeeper.SkewLevel
	Skew       string // "+1.2s (client behind)"
	ObservedAt time.Time
}

// leaseRow is one lease of the list.
type leaseRow struct {
	Node         int
	Status       cellStatus
	Machine      string
	PID          int
	StartedAt    time.Time
	Instance     string
	KeyID        string
	KeyDesc      string
	Token        uint64
	NotBefore    time.Time
	ExpiresAt    time.Time
	GrantedAt    time.Time
	RenewedAt    time.Time
	Skew         *skewView
	QuarantineTo time.Time // the end of the quarantine a revocation now would set
}

// nodeDetail is the detail of one node ID (the ?node= query).
type nodeDetail struct {
	ID     int
	Found  bool // inside the pool
	Status cellStatus
	Lease  *leaseRow
	// State is the node ID's state as the store keeps it (Registry.Node); nil
	// when it could not be read (StateErr).
	State    *idkeeper.NodeState
	StateErr string
}

// legendItem is one state of the map's legend.
type legendItem struct {
	Label, Cue string
	Count      int
	Swatch     template.HTML
}

// keyOption is one API key of the filter's list.
type keyOption struct{ ID, Label string }

// leasesPage is the data of the leases page.
type leasesPage struct {
	Counts        idkeeper.Counts
	Now           time.Time
	Map           template.HTML
	Legend        []legendItem
	Rows          []leaseRow
	AllLeases     int
	Filter        leaseFilter
	KeyOptions    []keyOption
	Node          *nodeDetail
	MinNode       int // the pool's node range, MinNode..MaxNode (issue #22)
	MaxNode       int
	SelfURL       string
	LiveURL       string
	RefreshMillis int64
}

// formatSkew shows a stored skew (server now − client now) with its sign and
// meaning.
func formatSkew(d time.Duration) string {
	switch {
	case d > 0:
		return "+" + d.Round(time.Millisecond).String() + " (client behind)"
	case d < 0:
		return d.Round(time.Millisecond).String() + " (client ahead)"
	}
	return "0s"
}

// leasesData reads what the leases page shows: the pool map, the leases and the
// stored clock-skew observations, the keys (for the filter and the descriptions).
func (h *Handler) leasesData(r *http.Request) (leasesPage, error) {
	ctx := r.Context()
	f := parseLeaseFilter(r.URL.Query())
	pm, err := h.reg.PoolMap(ctx)
	if err != nil {
		return leasesPage{}, err
	}
	leases, err := h.reg.Leases(ctx)
	if err != nil {
		return leasesPage{}, err
	}
	skews := map[idkeeper.Requester]idkeeper.SkewObservation{}
	if obs, err := h.reg.SkewObservations(ctx); err == nil {
		for _, o := range obs {
			skews[o.Requester] = o
		}
	} else {
		h.log.Warn("read clock-skew observations for the leases page", "err", err)
	}
	keys, err := h.reg.Keys(ctx)
	if err != nil {
		return leasesPage{}, err
	}
	desc := map[string]string{}
	out := leasesPage{Counts: pm.Counts, Now: pm.Now, Filter: f, MinNode: int(pm.First),
		MaxNode:       int(pm.First) + max(pm.Counts.Total-1, 0),
		RefreshMillis: refreshEvery.Milliseconds()}
	for _, k := range keys {
		desc[k.Key.ID] = k.Key.Description
		label := k.Key.ID
		if k.Key.Description != "" {
			label += " · " + k.Key.Description
		}
		out.KeyOptions = append(out.KeyOptions, keyOption{ID: k.Key.ID, Label: label})
	}
	grace, epoch := h.reg.Config().Grace, h.reg.Layout().Epoch
	byNode := map[int]*leaseRow{}
	cells := make([]mapCell, len(pm.Nodes))
	for i, s := range pm.Nodes {
		cells[i] = mapCell{Status: cellStatus(s)}
	}
	for _, l := range leases {
		st := cellLeased
		if l.Expired(pm.Now) {
			st = cellGrace
		}
		row := leaseRow{Node: int(l.NodeID), Status: st, Machine: l.Requester.MachineID, PID: l.Requester.PID,
			StartedAt: l.Requester.StartedAt, Instance: l.Requester.Instance, KeyID: l.KeyID, KeyDesc: desc[l.KeyID],
			Token: l.FencingToken, NotBefore: l.NotBefore, ExpiresAt: l.ExpiresAt, GrantedAt: l.GrantedAt,
			RenewedAt: l.RenewedAt, QuarantineTo: l.ExpiresAt.Add(grace)}
		if row.NotBefore.Before(epoch) {
			row.NotBefore = time.Time{} // a node's first lease: its window opens at the epoch
		}
		if o, ok := skews[l.Requester]; ok {
			row.Skew = &skewView{Level: o.Level, Skew: formatSkew(o.Skew), ObservedAt: o.ObservedAt}
		}
		byNode[row.Node] = &row
		if i := row.Node - int(pm.First); i >= 0 && i < len(cells) { // cell i is node ID First+i
			cells[i] = mapCell{Status: st, Tip: fmt.Sprintf("Node %d: %s, %s pid %d, key %s, expires %s",
				row.Node, st.Label(), row.Machine, row.PID, row.KeyID, row.ExpiresAt.UTC().Format(timeFormat))}
		}
		out.AllLeases++
		if f.match(l, st) {
			out.Rows = append(out.Rows, row)
		}
	}
	counts := map[cellStatus]int{}
	for _, c := range cells {
		counts[c.Status]++
	}
	for _, s := range cellStatuses {
		out.Legend = append(out.Legend, legendItem{Label: s.Label(), Cue: s.Cue(), Count: counts[s], Swatch: legendSwatch(s)})
	}
	out.Map = renderNodeMap(cells, int(pm.First), func(i int) string { return "?node=" + strconv.Itoa(int(pm.First)+i) }, "map-h")
	if f.node >= 0 {
		ci := f.node - int(pm.First)
		d := &nodeDetail{ID: f.node, Found: ci >= 0 && ci < len(cells)}
		if d.Found {
			d.Status = cells[ci].Status
			d.Lease = byNode[f.node]
			if st, err := h.reg.Node(ctx, idkeeper.NodeID(f.node)); err == nil {
				d.State, d.Status = &st, cellStatus(st.StatusAt(pm.Now))
			} else {
				_, d.StateErr = errorText(err)
			}
		}
		out.Node = d
	}
	q := f.query().Encode()
	out.SelfURL, out.LiveURL = "/admin/leases", "/admin/leases/live"
	if q != "" {
		out.SelfURL += "?" + q
		out.LiveURL += "?" + q
	}
	return out, nil
}

// leasesPage shows the leases page.
func (h *Handler) leasesPage(w http.ResponseWriter, r *http.Request, p *principal) {
	d, err := h.leasesData(r)
	if err != nil {
		h.pageError(w, r, p, err)
		return
	}
	v := h.baseView(w, r, p, "Leases", "leases")
	v.P = d
	h.render(w, r, http.StatusOK, "leases", v)
}

// leasesLive is the leases page's live parts alone (the "live" block): what its
// script fetches every few seconds to refresh itself without a reload.
func (h *Handler) leasesLive(w http.ResponseWriter, r *http.Request, p *principal) {
	d, err := h.leasesData(r)
	if err != nil {
		status, msg := errorText(err)
		pageHeaders(w.Header())
		w.WriteHeader(status)
		_, _ = w.Write([]byte(template.HTMLEscapeString(msg)))
		return
	}
	v := view{User: *p.user, SignedIn: true, P: d}
	h.renderBlock(w, r, http.StatusOK, "leases", "live", v)
}

// revokeView is the data of the revocation's confirm page.
type revokeView struct {
	Node             int
	Token            uint64
	Found            bool
	Machine          string
	PID              int
	StartedAt        time.Time
	KeyID            string
	ExpiresAt        time.Time
	QuarantinedUntil time.Time
	Grace            time.Duration
}

// revokeConfirm is the confirm step of a revocation (GET: changes nothing): what
// will happen, and the button that does it.
func (h *Handler) revokeConfirm(w http.ResponseWriter, r *http.Request, p *principal) {
	q := r.URL.Query()
	node, err1 := strconv.Atoi(q.Get("node"))
	token, err2 := strconv.ParseUint(q.Get("token"), 10, 64)
	if err1 != nil || err2 != nil || node < 0 {
		h.pageError(w, r, p, protocol.Invalidf("node", "give the node ID and the fencing token of the lease to revoke"))
		return
	}
	leases, err := h.reg.Leases(r.Context())
	if err != nil {
		h.pageError(w, r, p, err)
		return
	}
	rv := revokeView{Node: node, Token: token, Grace: h.reg.Config().Grace}
	for _, l := range leases {
		if int(l.NodeID) == node && l.FencingToken == token {
			rv.Found, rv.Machine, rv.PID, rv.StartedAt = true, l.Requester.MachineID, l.Requester.PID, l.Requester.StartedAt
			rv.KeyID, rv.ExpiresAt, rv.QuarantinedUntil = l.KeyID, l.ExpiresAt, l.ExpiresAt.Add(rv.Grace)
		}
	}
	v := h.baseView(w, r, p, fmt.Sprintf("Revoke the lease on node %d", node), "leases")
	v.P = rv
	h.render(w, r, http.StatusOK, "revoke", v)
}

// revokePost revokes the lease (POST /admin/api/leases/{node}/revoke's handler).
func (h *Handler) revokePost(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, p, err)
		return
	}
	node := strings.TrimSpace(r.PostForm.Get("node"))
	token, err := strconv.ParseUint(strings.TrimSpace(r.PostForm.Get("token")), 10, 64)
	if err != nil {
		h.pageError(w, r, p, protocol.Invalidf("token", "the fencing token %q is not a number", r.PostForm.Get("token")))
		return
	}
	out, err := h.callAPI(w, r, p, h.revokeLease, wire.RevokeLeaseRequest{FencingToken: token}, "node", node)
	if err != nil {
		h.pageError(w, r, p, err)
		return
	}
	msg := fmt.Sprintf("The lease on node %s was revoked.", node)
	if res, ok := out.(wire.RevokeLeaseResponse); ok {
		if t, err := wire.ParseTime(res.QuarantinedUntil); err == nil {
			msg = fmt.Sprintf("The lease on node %s was revoked: the node ID is quarantined until %s; the holder learns at its next Renew.",
				node, t.UTC().Format(timeFormat))
		}
	}
	h.redirect(w, r, "/admin/leases?node="+url.QueryEscape(node), msg)
}
