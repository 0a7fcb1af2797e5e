package admin

import (
	"net/http"
	"net/netip"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// APIKeyHeader carries an admin API key, as on /v1.
const APIKeyHeader = "X-API-Key"

// principal is the caller of one request: a logged-in user or an admin API key.
type principal struct {
	remote string     // the client's address, as the audit log records it
	ip     netip.Addr // the same, parsed; invalid when ipErr is set
	ipErr  error

	user    *account.User // a logged-in user; nil for a key
	session account.Session
	token   string           // the session cookie's token
	key     *idkeeper.APIKey // an admin API key; nil for a user
	role    account.Role
	actor   string // "user:NAME" or "key:ID", as the audit log names it
}

var errNoCredentials = protocol.Errorf(protocol.CodeSessionExpired,
	"not logged in: log in (POST "+APIPrefix+"login) or send an admin API key in "+APIKeyHeader)

// authenticate finds the caller of r and fills in p. A request that carries an
// X-API-Key header (even an empty one) is a key caller, checked as on /v1 in this
// order: the client's address against the allow-list (403 IP_NOT_ALLOWED; 503
// while the allow-list has not been read), that the registry serves (503), the
// key (401 API_KEY_MISSING, API_KEY_INVALID, API_KEY_EXPIRED), then that it is an
// admin key (403 ADMIN_KEY_REQUIRED); an expiring key gets the Warning header.
// Any other request is a session caller: its cookie's session must be valid
// (Accounts.Authenticate: 401 SESSION_EXPIRED, and the cookie is cleared).
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request, p *principal) error {
	ctx := r.Context()
	if _, ok := r.Header[http.CanonicalHeaderKey(APIKeyHeader)]; ok {
		if al := h.allow; p.ipErr != nil && !al.AllowsAll() || p.ipErr == nil && !al.Allows(p.ip) {
			if p.ipErr == nil && !al.Loaded() {
				return protocol.Errorf(protocol.CodeStoreUnavailable, "the IP allow-list has not been read from the store yet")
			}
			if p.ipErr != nil {
				h.log.Warn("cannot tell the client's address", "err", p.ipErr)
			}
			return protocol.Errorf(protocol.CodeIPNotAllowed, "requests with an API key from %s are not allowed", p.remote)
		}
		if err := h.reg.Serving(); err != nil {
			return err
		}
		k, err := h.reg.Authenticate(ctx, r.Header.Get(APIKeyHeader))
		if err != nil {
			return err
		}
		if at, soon := h.reg.KeyNotice(k); soon {
			w.Header().Add(wire.WarningHeader, wire.KeyExpiryWarning(k.ID, at))
		}
		if !k.Admin {
			return protocol.Errorf(protocol.CodeAdminKeyRequired, "the API key %s is not an admin key; the admin API "+
				"needs one (idkeeper apikey create --admin, or IDKEEPER_ADMIN_API_KEY on the server), or a login", k.ID)
		}
		p.key, p.role, p.actor = &k, account.RoleAdmin, idkeeper.CreatedByKey(k.ID)
		return nil
	}
	c, err := r.Cookie(h.cookie)
	if err != nil || c.Value == "" {
		return errNoCredentials
	}
	u, s, err := h.acct.Authenticate(ctx, c.Value)
	if err != nil {
		if protocol.ErrorCode(err) == protocol.CodeSessionExpired {
			h.clearCookie(w)
		}
		return err
	}
	p.user, p.session, p.token, p.role, p.actor = &u, s, c.Value, u.Role, idkeeper.CreatedByUser(u.Name)
	return nil
}

// may returns nil when p may call rt, else FORBIDDEN saying why.
func (p *principal) may(rt route) error {
	if rt.userOnly && p.user == nil {
		return protocol.Errorf(protocol.CodeForbidden, "%s %s%s is for a logged-in user; an API key cannot call it",
			rt.method, APIPrefix, rt.path)
	}
	if !p.role.AtLeast(rt.role) {
		return protocol.Errorf(protocol.CodeForbidden, "%s %s%s needs the role %s or above; %s has the role %s",
			rt.method, APIPrefix, rt.path, rt.role, p.actor, p.role)
	}
	return nil
}

// setCookie sends the session cookie with token: HttpOnly, SameSite=Strict, Path=/,
// Secure over TLS, no Max-Age (the browser drops it when it closes; the server
// ends the session at its idle or absolute timeout anyway).
func (h *Handler) setCookie(w http.ResponseWriter, token string) {
	http.SetCookie(w, &http.Cookie{Name: h.cookie, Value: token, Path: "/", HttpOnly: true, Secure: h.cfg.TLS,
		SameSite: http.SameSiteStrictMode})
}

// clearCookie tells the browser to drop the session cookie.
func (h *Handler) clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: h.cookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: h.cfg.TLS,
		SameSite: http.SameSiteStrictMode})
}

// crossOrigin answers a state-changing request that http.CrossOriginProtection
// found to come from another site: 403 FORBIDDEN, nothing done.
func (h *Handler) crossOrigin(w http.ResponseWriter, r *http.Request) {
	h.log.Warn("cross-origin request refused", "method", r.Method, "path", r.URL.Path,
		"origin", r.Header.Get("Origin"), "secFetchSite", r.Header.Get("Sec-Fetch-Site"), "remote", r.RemoteAddr)
	h.writeProblem(w, r, protocol.Errorf(protocol.CodeForbidden,
		"cross-origin request refused: the admin API changes state only for requests from its own origin"))
}
