package admin

import (
	"context"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/protocol"
)

// Who may hold power over an admin key (issue #29): an admin key may call every
// route of the admin API that a key may call, the restore excepted, so making
// one, or changing, revoking or otherwise managing one, is the admin's own.
// An operator keeps managing the /v1 keys. A key is never raised to admin after
// its create: the update takes no "admin" member (400 INVALID_REQUEST), and
// Registry.EnsureAdminKey refuses to promote one (CONFLICT).

// mayCreateKey returns nil when p may create a key with admin set as asked:
// 403 FORBIDDEN for an admin key asked by a caller below the role admin.
func (p *principal) mayCreateKey(admin bool) error {
	if admin && !p.role.AtLeast(account.RoleAdmin) {
		return protocol.Errorf(protocol.CodeForbidden, "only an admin creates an admin key; %s has the role %s: "+
			"leave out \"admin\" for a key of the /v1 API", p.actor, p.role)
	}
	return nil
}

// mayManageKey returns nil when p may change or revoke the key id: 403
// FORBIDDEN when the key is an admin key and p is below the role admin. An
// unknown key is NOT_FOUND for everyone, as the change itself would answer.
func (h *Handler) mayManageKey(ctx context.Context, p *principal, id, what string) error {
	if p.role.AtLeast(account.RoleAdmin) {
		return nil
	}
	k, err := h.reg.Key(ctx, id)
	if err != nil {
		return err
	}
	if k.Key.Admin {
		return protocol.Errorf(protocol.CodeForbidden, "the key %s is an admin key: only an admin may %s it; %s has the role %s",
			k.Key.ID, what, p.actor, p.role)
	}
	return nil
}
