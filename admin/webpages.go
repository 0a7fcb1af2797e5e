package admin

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The pages but the leases page: login and logout, API keys, the IP allow-list,
// users, the profile, the audit log and the store's health.

// webRoutes adds the pages to h's mux: every GET a page that changes nothing,
// every POST a form behind the pages' auth layer (page) and, but for the few
// webform.go names, its one-time token (once).
func (h *Handler) webRoutes() {
	const get, post = http.MethodGet, http.MethodPost
	const viewer, operator, admin = account.RoleViewer, account.RoleOperator, account.RoleAdmin
	m := h.mux
	m.HandleFunc("GET "+staticPath+"{file}", serveStatic)
	m.HandleFunc("GET /admin/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, homePath, http.StatusSeeOther)
	})
	m.HandleFunc("GET "+loginPath, h.loginPage)
	m.Handle("POST "+loginPath, h.csrf.Handler(http.HandlerFunc(h.loginPost)))
	m.Handle("POST /admin/logout", h.csrf.Handler(http.HandlerFunc(h.logoutPost)))

	m.Handle("GET /admin/leases", h.page(get, viewer, h.leasesPage))
	m.Handle("GET /admin/leases/live", h.page(get, viewer, h.leasesLive))
	m.Handle("GET /admin/leases/revoke", h.page(get, operator, h.revokeConfirm))
	m.Handle("POST /admin/leases/revoke", h.page(post, operator, h.once(0, h.revokePost)))

	m.Handle("GET "+originPath, h.page(get, viewer, h.originFind))

	m.Handle("GET /admin/keys", h.page(get, viewer, h.keysPage))
	m.Handle("POST /admin/keys", h.page(post, operator, h.once(0, h.keyCreatePost)))
	m.Handle("GET /admin/keys/{id}", h.page(get, viewer, h.keyPage))
	m.Handle("GET /admin/keys/{id}/created", h.page(get, operator, h.keyCreatedPage))
	m.Handle("POST /admin/keys/{id}", h.page(post, operator, h.once(0, h.keyUpdatePost)))
	m.Handle("POST /admin/keys/{id}/revoke", h.page(post, operator, h.once(0, h.keyRevokePost)))

	m.Handle("GET /admin/allowlist", h.page(get, viewer, h.allowPage))
	m.Handle("POST /admin/allowlist", h.page(post, operator, h.once(0, h.allowAddPost)))
	m.Handle("POST /admin/allowlist/remove", h.page(post, operator, h.once(0, h.allowRemovePost)))

	m.Handle("GET /admin/users", h.page(get, viewer, h.usersPage))
	m.Handle("POST /admin/users", h.page(post, admin, h.once(0, h.userCreatePost)))
	m.Handle("GET /admin/users/{name}", h.page(get, viewer, h.userPage))
	m.Handle("POST /admin/users/{name}/{action}", h.page(post, admin, h.once(0, h.userActionPost)))

	m.Handle("GET /admin/profile", h.page(get, viewer, h.profilePage))
	m.Handle("POST /admin/profile/password", h.page(post, viewer, h.once(0, h.passwordPost)))
	m.Handle("POST /admin/profile/webhook", h.page(post, viewer, h.once(0, h.webhookPost)))
	m.Handle("POST /admin/profile/webhook/remove", h.page(post, viewer, h.once(0, h.webhookRemovePost)))
	m.Handle("POST /admin/profile/webhook/test", h.page(post, viewer, h.webhookTestPost))

	m.Handle("GET /admin/audit", h.page(get, viewer, h.auditPage))
	m.Handle("GET /admin/store", h.page(get, viewer, h.storePage))

	m.Handle("GET /admin/backups", h.page(get, operator, h.backupsPage))
	// The folder's backups are full: making, downloading and deleting one is an
	// admin's; so is a restore (webrestore.go).
	m.Handle("POST /admin/backups", h.page(post, admin, h.once(h.backupLock(), h.backupCreatePost)))
	m.Handle("POST /admin/backups/schedule", h.page(post, admin, h.once(0, h.backupSchedulePost)))
	m.Handle("GET /admin/backups/delete", h.page(get, admin, h.backupDeleteConfirm))
	m.Handle("POST /admin/backups/delete", h.page(post, admin, h.once(0, h.backupDeletePost)))
	m.Handle("POST /admin/restore", h.page(post, admin, h.restoreUploadPost))
	m.Handle("POST /admin/restore/confirm", h.page(post, admin, h.once(0, h.restoreConfirmPost)))
}

// ---- login and logout

// loginView is the data of the login page.
type loginView struct{ Name, Next string }

// safeNext is next when it is a page of the admin web (never another site, never
// the API), else the leases page.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || next == "" || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(u.Path, pagePrefix) ||
		strings.HasPrefix(u.Path, APIPrefix) || strings.HasPrefix(u.Path, staticPath) || u.Path == loginPath ||
		strings.Contains(next, "\\") || strings.HasPrefix(next, "//") {
		return homePath
	}
	return u.RequestURI()
}

// loginPage shows the login form; a browser with a valid session goes on to the
// page it asked for.
func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if c, err := r.Cookie(h.cookie); err == nil && c.Value != "" {
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
		_, _, err := h.acct.Authenticate(ctx, c.Value)
		cancel()
		if err == nil {
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
	}
	v := h.baseView(w, r, nil, "Log in", "")
	lv := loginView{}
	if next != homePath {
		lv.Next = next
	}
	v.P = lv
	h.render(w, r, http.StatusOK, "login", v)
}

// loginPost logs in through the API's login (throttling, audit, the cookie) and
// goes on to the page asked for, the leases page by default.
func (h *Handler) loginPost(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	p := h.newPrincipal(r)
	r = r.WithContext(audit.WithRemoteIP(ctx, p.remote))
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, nil, err)
		return
	}
	name, next := r.PostForm.Get("name"), safeNext(r.PostForm.Get("next"))
	_, err := h.callAPI(w, r, p, h.login, wire.LoginRequest{Name: name, Password: r.PostForm.Get("password")})
	if err != nil {
		status, msg := errorText(err)
		if protocol.ErrorCode(err) == protocol.CodeLoginFailed {
			msg = "The user name or the password is wrong, or the account is disabled or locked for a while."
		}
		v := h.baseView(w, r, nil, "Log in", "")
		v.Error = msg
		lv := loginView{Name: userName(name)}
		if next != homePath {
			lv.Next = next
		}
		v.P = lv
		h.render(w, r, status, "login", v)
		return
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logoutPost ends the session (the API's logout) and shows the login page.
func (h *Handler) logoutPost(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	p := h.newPrincipal(r)
	r = r.WithContext(audit.WithRemoteIP(ctx, p.remote))
	if c, err := r.Cookie(h.cookie); err == nil && c.Value != "" {
		if u, _, err := h.acct.Authenticate(r.Context(), c.Value); err == nil {
			r = r.WithContext(audit.WithActor(r.Context(), idkeeper.CreatedByUser(u.Name)))
		}
	}
	if _, err := h.callAPI(w, r, p, h.logout, struct{}{}); err != nil {
		h.pageError(w, r, nil, err)
		return
	}
	h.redirect(w, r, loginPath, "You have logged out.")
}
