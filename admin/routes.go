package admin

import (
	"context"
	"net/http"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/clientip"
)

// handlerFunc handles one request that passed the auth layer: p is its caller. It
// returns the answer (a body for 200, created, noContent) or an error sent as
// problem+json.
type handlerFunc func(w http.ResponseWriter, r *http.Request, p *principal) (any, error)

// route is one route of the table: what it takes and who may call it.
type route struct {
	method string
	path   string       // after APIPrefix, in http.ServeMux syntax
	role   account.Role // the least role; "" for the public login and logout
	// userOnly: only a logged-in user, never an API key (accounts are changed by
	// people, whose own record Accounts checks again).
	userOnly bool
	// idem names the operation of a create in the Idempotency-Key scope; "" when
	// the route takes none.
	idem   string
	handle handlerFunc
}

// keyCreateOp and backupCreateOp name the creates of an API key and of a backup
// in the Idempotency-Key scope.
const (
	keyCreateOp    = "admin.keys.create"
	backupCreateOp = "admin.backups.create"
)

// apiRoutes is the admin API's route table. Every route that changes state is a
// POST, or the PUT of a whole record (the backup schedule), behind
// http.CrossOriginProtection; no GET changes anything.
func (h *Handler) apiRoutes() []route {
	const get, post, put = http.MethodGet, http.MethodPost, http.MethodPut
	const viewer, operator, admin = account.RoleViewer, account.RoleOperator, account.RoleAdmin
	return []route{
		{post, "login", "", false, "", h.login},
		{post, "logout", "", false, "", h.logout},
		{get, "me", viewer, false, "", h.me},
		{post, "me/password", viewer, true, "", h.changePassword},
		{post, "me/webhook", viewer, true, "", h.setWebhook},
		{post, "me/webhook/remove", viewer, true, "", h.removeWebhook},
		{post, "me/webhook/test", viewer, true, "", h.testWebhook},

		{get, "users", viewer, false, "", h.listUsers},
		{post, "users", admin, true, "admin.users.create", h.createUser},
		{post, "users/{name}", admin, true, "", h.updateUser},
		{post, "users/{name}/password", admin, true, "", h.resetPassword},

		{get, "keys", viewer, false, "", h.listKeys},
		{post, "keys", operator, false, keyCreateOp, h.createKey},
		{get, "keys/{id}", viewer, false, "", h.getKey},
		{post, "keys/{id}", operator, false, "", h.updateKey},
		{post, "keys/{id}/revoke", operator, false, "", h.revokeKey},

		{get, "allowlist", viewer, false, "", h.getAllowList},
		{post, "allowlist", operator, false, "admin.allowlist.add", h.addAllowEntry},
		{post, "allowlist/remove", operator, false, "", h.removeAllowEntry},

		{get, "pool", viewer, false, "", h.pool},
		{get, "leases", viewer, false, "", h.leases},
		{get, "nodes/{node}", viewer, false, "", h.node},
		{post, "leases/{node}/revoke", operator, false, "", h.revokeLease},
		{get, "ids/{id}/origin", viewer, false, "", h.origin},

		{get, "audit", viewer, false, "", h.auditLog},
		{get, "store", viewer, false, "", h.storeHealth},

		// A full backup is an admin's; ?redacted=1 an operator's too (exportBackup).
		{get, "backup", operator, false, "", h.exportBackup},
		// A restore: an admin's session and password, never a key (restore.go).
		{post, "restore/preview", admin, true, "", h.previewRestore},
		{post, "restore", admin, true, "", h.restoreBackup},

		// The folder holds full backups: only listing them is an operator's.
		{get, "backups", operator, false, "", h.listBackups},
		{post, "backups", admin, false, backupCreateOp, h.createBackup},
		// The schedule: shown as the folder, changed as a backup is made (backupschedule.go).
		{get, "backups/schedule", operator, false, "", h.getSchedule},
		{put, "backups/schedule", admin, false, "", h.putSchedule},
		{get, "backups/{name}", admin, false, "", h.downloadBackup},
		{post, "backups/{name}/delete", admin, false, "", h.deleteBackup},
	}
}

// RouteInfo is one route of the admin API's table, as APIRoutes lists it: the
// method, the path (with APIPrefix, in http.ServeMux syntax), the least role it
// takes ("" for the public login and logout), whether only a logged-in user may
// call it (never an API key), and whether it honours an Idempotency-Key (when
// Config.Idempotency is set).
type RouteInfo struct {
	Method, Path string
	Role         account.Role
	UserOnly     bool
	Idempotent   bool
}

// APIRoutes returns the admin API's route table, the same for every Handler:
// what the OpenAPI document (package api) must describe.
func APIRoutes() []RouteInfo {
	var h *Handler // the table holds method values of h, never called here
	var out []RouteInfo
	for _, rt := range h.apiRoutes() {
		out = append(out, RouteInfo{rt.method, APIPrefix + rt.path, rt.role, rt.userOnly, rt.idem != ""})
	}
	return out
}

type principalKey struct{}

// principalFrom returns the caller the auth layer put in ctx.
func principalFrom(ctx context.Context) *principal {
	p, _ := ctx.Value(principalKey{}).(*principal)
	return p
}

// wrap is rt behind the auth layer, in this order: the cross-origin check of a
// POST (403 FORBIDDEN), the request timeout, the caller (auth.go: 401, or 403 for
// a key off the allow-list or no admin key), the route's role (403 FORBIDDEN),
// the Idempotency-Key of a create (Config.Idempotency), then the handler.
func (h *Handler) wrap(rt route) http.Handler {
	var inner http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := rt.handle(w, r, principalFrom(r.Context()))
		if err != nil {
			h.writeProblem(w, r, err)
			return
		}
		h.write(w, body)
	})
	if rt.idem != "" && h.cfg.Idempotency != nil {
		opts := []idempotency.Option{idempotency.MaxBody(h.cfg.MaxBodyBytes)}
		switch rt.idem {
		case keyCreateOp:
			opts = append(opts, idempotency.WithCodec(keyCreateCodec)) // never store the secret
		case backupCreateOp:
			opts = append(opts, idempotency.LockFor(h.backupLock())) // a backup may run for an hour
		}
		inner = h.cfg.Idempotency.Wrap(rt.idem, func(r *http.Request) string { return principalFrom(r.Context()).actor },
			inner, opts...)
	}
	authed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
		defer cancel()
		p := &principal{}
		p.ip, p.ipErr = clientip.Of(r, h.cfg.TrustedProxies)
		p.remote = p.ip.String()
		if p.ipErr != nil {
			p.remote = r.RemoteAddr
		}
		ctx = audit.WithRemoteIP(ctx, p.remote)
		r = r.WithContext(context.WithValue(ctx, principalKey{}, p))
		if rt.role != "" {
			if err := h.authenticate(w, r, p); err != nil {
				h.writeProblem(w, r, err)
				return
			}
			if err := p.may(rt); err != nil {
				h.writeProblem(w, r, err)
				return
			}
			r = r.WithContext(audit.WithActor(r.Context(), p.actor))
		}
		inner.ServeHTTP(w, r)
	})
	if rt.method == http.MethodGet {
		return authed
	}
	return h.csrf.Handler(authed)
}
