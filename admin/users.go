package admin

import (
	"net/http"
	"net/url"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The account routes. Accounts decides who may change which account (an enabled
// admin; not their own role or state, not the last admin) and audits each change.

var (
	createUserMembers    = wire.Members(wire.CreateUserRequest{})
	updateUserMembers    = wire.Members(wire.UpdateUserRequest{})
	resetPasswordMembers = wire.Members(wire.ResetPasswordRequest{})
)

// userListJSON is the 200 body of GET /admin/api/users: wire.UserList, each
// account with its Discord webhook masked when an admin asks and it has one.
type userListJSON struct {
	Users []userWebhookJSON `json:"users"`
}

type userWebhookJSON struct {
	wire.User
	Webhook *string `json:"webhook,omitempty"`
}

// listUsers answers the accounts, sorted by name. Only an admin learns which
// have a webhook, and then only masked.
func (h *Handler) listUsers(_ http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	us, err := h.acct.Users(r.Context())
	if err != nil {
		return nil, err
	}
	admin := p.role.AtLeast(account.RoleAdmin)
	out := userListJSON{Users: make([]userWebhookJSON, len(us))}
	for i, u := range us {
		out.Users[i].User = userJSON(u)
		if admin {
			out.Users[i].Webhook = maskedWebhook(u)
		}
	}
	return out, nil
}

// createUser adds an account; the name is trimmed and lower-cased, as at login.
func (h *Handler) createUser(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	m, err := h.body(w, r, createUserMembers)
	if err != nil {
		return nil, err
	}
	var name, role, pw string
	for _, f := range []struct {
		dst  *string
		name string
	}{{&name, "name"}, {&role, "role"}, {&pw, "password"}} {
		if *f.dst, err = m.String("", f.name); err != nil {
			return nil, err
		}
	}
	u, err := h.acct.CreateUser(r.Context(), *p.user, userName(name), account.Role(role), pw)
	if err != nil {
		return nil, err
	}
	return created{location: APIPrefix + "users/" + url.PathEscape(u.Name), body: userJSON(u)}, nil
}

// updateUser changes an account's role and whether it is disabled, in that order;
// either change ends the account's sessions. The same value is no change.
func (h *Handler) updateUser(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	m, err := h.body(w, r, updateUserMembers)
	if err != nil {
		return nil, err
	}
	role, err := m.String("", "role")
	if err != nil {
		return nil, err
	}
	disabled, setDisabled, err := m.Bool("", "disabled")
	if err != nil {
		return nil, err
	}
	switch {
	case role == "" && !setDisabled:
		return nil, protocol.Invalidf("body", "give role, disabled or both")
	case role != "" && !account.Role(role).Valid():
		return nil, protocol.Invalidf("role", "the role is one of %s, %s, %s", account.RoleViewer, account.RoleOperator, account.RoleAdmin)
	}
	ctx, name := r.Context(), r.PathValue("name")
	var u account.User
	if role != "" {
		if u, err = h.acct.SetRole(ctx, *p.user, name, account.Role(role)); err != nil {
			return nil, err
		}
	}
	if setDisabled {
		if u, err = h.acct.SetDisabled(ctx, *p.user, name, disabled); err != nil {
			return nil, err
		}
	}
	u.PasswordHash = ""
	return userJSON(u), nil
}

// resetPassword gives another account a new password, ending its sessions.
func (h *Handler) resetPassword(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	m, err := h.body(w, r, resetPasswordMembers)
	if err != nil {
		return nil, err
	}
	pw, err := m.String("", "password")
	if err != nil {
		return nil, err
	}
	if _, err := h.acct.ResetPassword(r.Context(), *p.user, r.PathValue("name"), pw); err != nil {
		return nil, err
	}
	return noContent{}, nil
}
