package idkeeper

import (
	"fmt"
	"strings"
	"time"
)

// maxWaitsLogged bounds the "node=wait" pairs of one cooling-grant log line.
const maxWaitsLogged = 8

// noteCooling reports the node IDs of a new grant that are cooling (LeaseStore):
// their NotBefore lies after the grant's now, so their holder mints nothing with
// them until then, up to a whole lease later. Each is counted once
// (Observer.CoolingGrants), and the grant gets one warning log line naming the node
// IDs and how long each waits. The leases an idempotent repeat of an Alloc returns
// (GrantedAt before the grant's now) were reported when they were granted; only a
// repeat within the grant's own millisecond is reported twice.
func (r *Registry) noteCooling(req AllocRequest, g Grant) {
	var ids []NodeID
	var waits strings.Builder
	var first, last time.Duration
	for _, l := range g.Leases {
		if !l.GrantedAt.Equal(g.Now) || !l.NotBefore.After(g.Now) {
			continue
		}
		wait := l.NotBefore.Sub(g.Now)
		if len(ids) == 0 || wait < first {
			first = wait
		}
		last = max(last, wait)
		if len(ids) < maxWaitsLogged {
			if len(ids) > 0 {
				waits.WriteByte(',')
			}
			fmt.Fprintf(&waits, "%d=%s", l.NodeID, wait)
		}
		ids = append(ids, l.NodeID)
	}
	if len(ids) == 0 {
		return
	}
	if len(ids) > maxWaitsLogged {
		fmt.Fprintf(&waits, ",… %d more", len(ids)-maxWaitsLogged)
	}
	r.obs.CoolingGrants(len(ids))
	r.log.Warn("alloc granted cooling node IDs: the holder mints nothing with them until their window opens "+
		"(a previous holder ended without mintedUpTo, crashed, or a store reset raised the watermark)",
		"requester", req.Requester, "keyId", req.Key.ID, "cooling", len(ids), "of", len(g.Leases),
		"nodes", nodeRanges(ids), "waits", waits.String(), "firstOpensIn", first, "lastOpensIn", last)
}
