package idkeeper

import (
	"context"
	"errors"
	"fmt"

	"github.com/idkeeper/idkeeper/protocol"
)

// RevokeLease ends, at once and for an operator, the lease on node whose fencing
// token is token, whoever holds it (LeaseStore.RevokeLease, with the cleanup grace),
// and returns the lease as it was. Its holder may still mint until the lease's
// ExpiresAt, so the node ID is quarantined until ExpiresAt + grace and its next
// holder's window starts after ExpiresAt. The holder learns it at its next Renew,
// whose answer lacks the node ID: the client library then stops issuing and reports
// the session lost. Receipts of the revoked lease restore nothing, also after a store
// reset that kept the revocation (one that lost it undoes it, which costs no safety:
// the lease was real). Errors: NOT_FOUND when the node ID holds no lease with that
// token (another lease, none, outside the pool), and the 503s of Serving and
// STORE_UNAVAILABLE. The revocation is audited as ctx's actor (audit.WithActor; "system"
// without one) from ctx's address (audit.WithRemoteIP).
func (r *Registry) RevokeLease(ctx context.Context, node NodeID, token uint64) (l Lease, err error) {
	if err := r.Serving(); err != nil {
		return Lease{}, err
	}
	err = r.mutate(ctx, "revoke", false, func(ctx context.Context, gd Guard) error {
		l, err = r.store.RevokeLease(ctx, gd, node, token, r.cfg.Grace)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return Lease{}, &Error{Code: protocol.CodeNotFound, Err: err,
			Message: fmt.Sprintf("node ID %d holds no lease with fencing token %d", node, token)}
	}
	if err != nil {
		return Lease{}, err
	}
	r.log.Warn("lease revoked by an operator: its node ID is quarantined until the lease's expiry + grace",
		"node", node, "token", token, "requester", l.Requester, "keyId", l.KeyID,
		"expiresAt", l.ExpiresAt, "quarantinedUntil", l.ExpiresAt.Add(r.cfg.Grace))
	r.auditRevoke(ctx, l)
	return l, nil
}
