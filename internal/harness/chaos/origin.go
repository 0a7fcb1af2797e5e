package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// Property 6 (issue #16): the lease history maps every minted ID back to the
// session that minted it. After a run, while the replicas still serve, the
// checker asks a replica's GET /admin/api/ids/{id}/origin for IDs of every
// grant; the answer must be exactly one lease: that grant's node ID, token and
// requester.

// PropOrigin is property 6's name in reports.
const PropOrigin = "6 every minted ID maps back to exactly the session that minted it"

// maxOriginLookups bounds the lookups of one run.
const maxOriginLookups = 4000

// OriginLease is what property 6 needs of one lease of an origin answer.
type OriginLease struct {
	Node   int64
	Token  uint64
	ReqKey string // idkeeper.Requester.Key()
}

// OriginFunc looks up the leases whose window holds id.
type OriginFunc func(ctx context.Context, id int64) ([]OriginLease, error)

// checkOrigins asks origin about each grant's first and last IDs (a bounded
// sample over the run) and checks each answer names exactly that grant.
func checkOrigins(r *Report, tenures []*tenure, origin OriginFunc) error {
	var gs []*grant
	for _, t := range tenures {
		for _, g := range t.grants {
			if g.n > 0 {
				gs = append(gs, g)
			}
		}
	}
	step := max(1, 2*len(gs)/maxOriginLookups)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < len(gs); i += step {
		g := gs[i]
		for _, id := range []int64{g.firstID, g.lastID} {
			ls, err := origin(ctx, id)
			if err != nil {
				return fmt.Errorf("origin of ID %d: %w", id, err)
			}
			r.OriginLookups++
			if len(ls) != 1 || ls[0].Node != g.node || ls[0].Token != g.token || g.t.req != "" && ls[0].ReqKey != g.t.req {
				r.violate(PropOrigin, "ID %d minted by %v (node %d, token %d, requester %s) maps to %+v",
					id, g.t, g.node, g.token, g.t.req, ls)
			}
		}
	}
	r.OriginChecked = true
	return nil
}

// origin returns the lookup of property 6 against the first replica that
// answers, with the cluster's admin key.
func (c *Cluster) origin() OriginFunc {
	hc := &http.Client{Timeout: 10 * time.Second}
	return func(ctx context.Context, id int64) ([]OriginLease, error) {
		c.mu.Lock()
		servers := append([]*serverProc(nil), c.servers...)
		c.mu.Unlock()
		var last error
		for _, s := range servers {
			ls, err := c.originAt(ctx, hc, s.port, id)
			if err == nil {
				return ls, nil
			}
			last = err
		}
		return nil, last
	}
}

func (c *Cluster) originAt(ctx context.Context, hc *http.Client, port int, id int64) ([]OriginLease, error) {
	u := "http://127.0.0.1:" + strconv.Itoa(port) + "/admin/api/ids/" + strconv.FormatInt(id, 10) + "/origin"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", c.adminKey)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var o wire.IDOrigin
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		return nil, err
	}
	out := make([]OriginLease, 0, len(o.Leases))
	for _, l := range o.Leases {
		started, err := wire.ParseTime(l.Requester.StartedAt)
		if err != nil {
			return nil, fmt.Errorf("origin of %d: requester.startedAt: %w", id, err)
		}
		r := idkeeper.Requester{MachineID: l.Requester.MachineID, PID: l.Requester.PID, StartedAt: started, Instance: l.Requester.Instance}
		out = append(out, OriginLease{Node: l.NodeID, Token: l.FencingToken, ReqKey: r.Key()})
	}
	return out, nil
}
