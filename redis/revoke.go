package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/idkeeper/idkeeper"
)

// RevokeLease ends the lease on node whose token is token, as idkeeper.LeaseStore
// says, in one script (revoke.lua) that checks the guard first. Like Remove it does
// not wait for Options.WaitReplicas: a revocation that a failover loses leaves the
// lease in place, which reclaim frees only after ExpiresAt + grace, as the
// revocation's quarantine would; and a retry after a failed WAIT would find the
// lease gone (NOT_FOUND).
func (s *Store) RevokeLease(ctx context.Context, g idkeeper.Guard, node idkeeper.NodeID, token uint64, grace time.Duration) (idkeeper.Lease, error) {
	if err := idkeeper.CheckGrace(grace); err != nil {
		return idkeeper.Lease{}, err
	}
	v, err := s.runGuarded(ctx, scriptRevoke, "revoke", false, g, int(node), strconv.FormatUint(token, 10),
		grace.Milliseconds())
	if err != nil {
		return idkeeper.Lease{}, err
	}
	switch rec := v.(type) {
	case int64:
		if rec == 0 {
			return idkeeper.Lease{}, idkeeper.ErrNotFound
		}
	case string:
		return parseLease(strconv.Itoa(int(node)), rec)
	}
	return idkeeper.Lease{}, fmt.Errorf("redis: revoke: unexpected reply %v", v)
}
