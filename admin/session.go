package admin

import (
	"net/http"
	"strings"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/internal/jsonbody"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// The session routes: login, logout, and the caller's own account.

var (
	loginMembers    = wire.Members(wire.LoginRequest{})
	passwordMembers = wire.Members(wire.ChangePasswordRequest{})
)

// body reads and strictly decodes a request body with the members known.
func (h *Handler) body(w http.ResponseWriter, r *http.Request, known []string) (jsonbody.Members, error) {
	b, err := jsonbody.Read(w, r, h.cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	return jsonbody.Decode(b, known)
}

// userName is a typed account name as accounts are named: trimmed, in lower case.
func userName(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// login checks the name and password (Accounts.Login, throttled per account and
// address and per address, slowed per account; one LOGIN_FAILED for every cause,
// Retry-After while throttled; LOGIN_THROTTLE_FULL, 429, while the throttle has
// no room for a new address) and
// opens a new session, whose token goes in the cookie. A session the request's
// cookie held before is ended: each login gets a session of its own.
func (h *Handler) login(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	m, err := h.body(w, r, loginMembers)
	if err != nil {
		return nil, err
	}
	name, err := m.String("", "name")
	if err != nil {
		return nil, err
	}
	pw, err := m.String("", "password")
	if err != nil {
		return nil, err
	}
	ctx := r.Context()
	token, _, err := h.acct.Login(ctx, userName(name), pw, p.remote, r.UserAgent())
	if err != nil {
		return nil, err
	}
	if old, err := r.Cookie(h.cookie); err == nil && old.Value != "" && old.Value != token {
		if err := h.acct.Logout(ctx, old.Value); err != nil {
			h.log.Warn("end the session a login replaces", "err", err)
		}
	}
	u, _, err := h.acct.Authenticate(ctx, token)
	if err != nil {
		return nil, err
	}
	h.setCookie(w, token)
	return wire.LoginResponse{User: wire.UserRef{Name: u.Name, Role: string(u.Role)}}, nil
}

// logout ends the session of the request's cookie, if any, and clears the
// cookie: 204 whatever the session's state.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request, _ *principal) (any, error) {
	if c, err := r.Cookie(h.cookie); err == nil && c.Value != "" {
		if err := h.acct.Logout(r.Context(), c.Value); err != nil {
			return nil, err
		}
	}
	h.clearCookie(w)
	return noContent{}, nil
}

// meJSON is the 200 body of GET /admin/api/me: wire.Me and the user's Discord
// webhook, masked (null for none, and for a key).
type meJSON struct {
	wire.Me
	webhookJSON
}

// me tells who the caller is.
func (h *Handler) me(_ http.ResponseWriter, _ *http.Request, p *principal) (any, error) {
	if p.user == nil {
		return meJSON{Me: wire.Me{Name: p.actor, Role: string(p.role), Kind: "key", CreatedAt: wire.FormatTime(p.key.CreatedAt)}}, nil
	}
	u := p.user
	return meJSON{Me: wire.Me{Name: u.Name, Role: string(u.Role), Kind: "user", CreatedAt: wire.FormatTime(u.CreatedAt),
		LastLoginAt: optTime(u.LastLoginAt), PasswordChangedAt: optTime(u.PasswordChangedAt)},
		webhookJSON: webhookJSON{Webhook: maskedWebhook(*u)}}, nil
}

// changePassword changes the caller's own password, given the current one
// (Accounts.ChangePassword: a wrong one counts as a failed login of the account).
// Every session of the account ends, this one too: the cookie is cleared, and the
// user logs in again with the new password.
func (h *Handler) changePassword(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	m, err := h.body(w, r, passwordMembers)
	if err != nil {
		return nil, err
	}
	old, err := m.String("", "oldPassword")
	if err != nil {
		return nil, err
	}
	pw, err := m.String("", "newPassword")
	if err != nil {
		return nil, err
	}
	if _, err := h.acct.ChangePassword(r.Context(), *p.user, old, pw); err != nil {
		return nil, err
	}
	h.clearCookie(w)
	return noContent{}, nil
}

// userJSON is u as the API shows it: never its password hash.
func userJSON(u account.User) wire.User {
	return wire.User{Name: u.Name, Role: string(u.Role), Disabled: u.Disabled, CreatedAt: wire.FormatTime(u.CreatedAt),
		CreatedBy: u.CreatedBy, LastLoginAt: optTime(u.LastLoginAt), PasswordChangedAt: optTime(u.PasswordChangedAt)}
}
