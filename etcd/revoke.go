package etcd

import (
	"context"
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// RevokeLease implements idkeeper.LeaseStore: one transaction that checks the
// guard, deletes the lease, raises the node's watermark and quarantine and frees
// it into the quarantine index (or ready or cooling, when ExpiresAt + grace has
// passed already).
func (s *Store) RevokeLease(ctx context.Context, g idkeeper.Guard, node idkeeper.NodeID, token uint64, grace time.Duration) (idkeeper.Lease, error) {
	if err := idkeeper.CheckGrace(grace); err != nil {
		return idkeeper.Lease{}, err
	}
	return ruled(s, ctx, "revoke lease", &g, nil, func(t leasetx.Tx) (idkeeper.Lease, error) {
		return leasetx.Revoke(t, node, token, grace)
	})
}

// errNoLease is the error of a node that an index says is held but whose record
// holds no lease: a store that was written by something else.
func errNoLease(id uint32) error {
	return fmt.Errorf("node %d is indexed as held but its record holds no lease", id)
}
