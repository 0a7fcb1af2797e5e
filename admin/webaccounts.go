package admin

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The users, profile, audit log and store pages.

// ---- users and the profile

// passwordBounds are the password lengths the forms state.
type passwordBounds struct{ MinPassword, MaxPassword int }

var pwBounds = passwordBounds{MinPassword: account.MinPasswordLen, MaxPassword: account.MaxPasswordLen}

// usersView is the data of the users page.
type usersView struct {
	Users []account.User
	Roles []account.Role
	Form  url.Values
	passwordBounds
}

var allRoles = []account.Role{account.RoleViewer, account.RoleOperator, account.RoleAdmin}

func (h *Handler) usersPage(w http.ResponseWriter, r *http.Request, p *principal) {
	h.renderUsers(w, r, p, http.StatusOK, "", nil)
}

func (h *Handler) renderUsers(w http.ResponseWriter, r *http.Request, p *principal, status int, errMsg string, form url.Values) {
	us, err := h.acct.Users(r.Context())
	if err != nil {
		h.pageError(w, r, p, err)
		return
	}
	v := h.baseView(w, r, p, "Users", "users")
	v.Error, v.P = errMsg, usersView{Users: us, Roles: allRoles, Form: form, passwordBounds: pwBounds}
	h.render(w, r, status, "users", v)
}

func (h *Handler) userCreatePost(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, p, err)
		return
	}
	f := r.PostForm
	out, err := h.callAPI(w, r, p, h.createUser, wire.CreateUserRequest{Name: f.Get("name"), Role: f.Get("role"), Password: f.Get("password")})
	if err != nil {
		status, msg := errorText(err)
		f.Del("password")
		h.renderUsers(w, r, p, status, msg, f)
		return
	}
	name := userName(f.Get("name"))
	if u, ok := out.(wire.User); ok {
		name = u.Name
	}
	h.redirect(w, r, "/admin/users/"+url.PathEscape(name), "User "+name+" was added.")
}

// userView is the data of a user's page.
type userView struct {
	Target account.User
	Self   bool
	Roles  []account.Role
	// ShowWebhook: the caller is an admin or the user; Webhook is then the
	// user's Discord webhook, masked ("" for none).
	ShowWebhook bool
	Webhook     string
	passwordBounds
}

func (h *Handler) userPage(w http.ResponseWriter, r *http.Request, p *principal) {
	h.renderUser(w, r, p, http.StatusOK, "")
}

func (h *Handler) renderUser(w http.ResponseWriter, r *http.Request, p *principal, status int, errMsg string) {
	name := r.PathValue("name")
	us, err := h.acct.Users(r.Context())
	if err != nil {
		h.pageError(w, r, p, err)
		return
	}
	i := slices.IndexFunc(us, func(u account.User) bool { return u.Name == name })
	if i < 0 {
		h.pageError(w, r, p, protocol.Errorf(protocol.CodeNotFound, "There is no user %q.", name))
		return
	}
	v := h.baseView(w, r, p, "User "+name, "users")
	v.Error = errMsg
	uv := userView{Target: us[i], Self: p.user.Name == name, Roles: allRoles, passwordBounds: pwBounds}
	if uv.ShowWebhook = uv.Self || p.role.AtLeast(account.RoleAdmin); uv.ShowWebhook {
		if m := maskedWebhook(us[i]); m != nil {
			uv.Webhook = *m
		}
	}
	v.P = uv
	h.render(w, r, status, "user", v)
}

// userActionPost changes an account: role, disable, enable, password.
func (h *Handler) userActionPost(w http.ResponseWriter, r *http.Request, p *principal) {
	name := r.PathValue("name")
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, p, err)
		return
	}
	var (
		fn   handlerFunc
		body any
		msg  string
	)
	switch r.PathValue("action") {
	case "role":
		role := r.PostForm.Get("role")
		fn, body, msg = h.updateUser, map[string]any{"role": role}, "User "+name+" now has the role "+role+"."
	case "disable":
		fn, body, msg = h.updateUser, map[string]any{"disabled": true}, "User "+name+" was disabled and its sessions ended."
	case "enable":
		fn, body, msg = h.updateUser, map[string]any{"disabled": false}, "User "+name+" was enabled."
	case "password":
		fn, body, msg = h.resetPassword, wire.ResetPasswordRequest{Password: r.PostForm.Get("password")},
			"The password of "+name+" was reset and its sessions ended."
	default:
		h.pageError(w, r, p, protocol.Errorf(protocol.CodeNotFound, "There is no such change of an account."))
		return
	}
	if _, err := h.callAPI(w, r, p, fn, body, "name", name); err != nil {
		status, emsg := errorText(err)
		h.renderUser(w, r, p, status, emsg)
		return
	}
	h.redirect(w, r, "/admin/users/"+url.PathEscape(name), msg)
}

// profileView is the data of the profile page.
type profileView struct {
	passwordBounds
	Webhook    string // the user's Discord webhook, masked; "" for none
	MaxWebhook int
	AlertsOn   bool             // the server sends Discord messages (Config.Discord)
	Test       *webhookTestJSON // Discord's answer to the test message just sent
}

// StatusText is the text of the test answer's status ("Not Found").
func (v profileView) StatusText() string {
	if v.Test == nil {
		return ""
	}
	return http.StatusText(v.Test.Status)
}

func (h *Handler) profilePage(w http.ResponseWriter, r *http.Request, p *principal) {
	h.renderProfile(w, r, p, http.StatusOK, "")
}

func (h *Handler) renderProfile(w http.ResponseWriter, r *http.Request, p *principal, status int, errMsg string) {
	h.renderProfileTest(w, r, p, status, "", errMsg, nil)
}

// renderProfileTest renders the profile page with a message and, when test is
// set, Discord's answer to a test message.
func (h *Handler) renderProfileTest(w http.ResponseWriter, r *http.Request, p *principal, status int, flash, errMsg string,
	test *webhookTestJSON) {
	v := h.baseView(w, r, p, "Profile", "profile")
	pv := profileView{passwordBounds: pwBounds, MaxWebhook: account.MaxWebhookLen, AlertsOn: h.cfg.Discord != nil, Test: test}
	if m := maskedWebhook(*p.user); m != nil {
		pv.Webhook = *m
	}
	if flash != "" {
		v.Flash = flash
	}
	v.Error, v.P = errMsg, pv
	h.render(w, r, status, "profile", v)
}

// webhookPost sets the user's Discord webhook through the API. The URL typed is
// never shown again, not even in the form after a mistake: it holds the token.
func (h *Handler) webhookPost(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, p, err)
		return
	}
	out, err := h.callAPI(w, r, p, h.setWebhook, map[string]string{"url": r.PostForm.Get("url")})
	if err != nil {
		status, msg := errorText(err)
		h.renderProfile(w, r, p, status, msg)
		return
	}
	if wh, ok := out.(webhookJSON); ok && wh.Webhook != nil {
		h.redirect(w, r, "/admin/profile", "Your Discord webhook was saved: "+*wh.Webhook+". Send a test message to check it.")
		return
	}
	h.redirect(w, r, "/admin/profile", "Your Discord webhook was removed: you get no alerts.")
}

// webhookRemovePost removes the user's Discord webhook through the API.
func (h *Handler) webhookRemovePost(w http.ResponseWriter, r *http.Request, p *principal) {
	if _, err := h.callAPI(w, r, p, h.removeWebhook, struct{}{}); err != nil {
		status, msg := errorText(err)
		h.renderProfile(w, r, p, status, msg)
		return
	}
	h.redirect(w, r, "/admin/profile", "Your Discord webhook was removed: you get no alerts.")
}

// webhookTestPost sends a test message through the API and shows Discord's
// answer on the profile page, delivered or not (no redirect: the answer is
// shown once).
func (h *Handler) webhookTestPost(w http.ResponseWriter, r *http.Request, p *principal) {
	out, err := h.callAPI(w, r, p, h.testWebhook, struct{}{})
	if t, ok := webhookTestOf(err); ok {
		_, msg := errorText(err)
		h.renderProfileTest(w, r, p, http.StatusOK, "", msg, &t)
		return
	}
	if err != nil {
		status, msg := errorText(err)
		h.renderProfile(w, r, p, status, msg)
		return
	}
	a, _ := out.(webhookTestAnswer)
	h.renderProfileTest(w, r, p, http.StatusOK, "Discord took the test message: look for it in the channel.", "", &a.Discord)
}

// passwordPost changes the user's own password through the API, which ends every
// session of the account: the user logs in again with the new password.
func (h *Handler) passwordPost(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, p, err)
		return
	}
	f := r.PostForm
	if f.Get("password") != f.Get("again") {
		h.renderProfile(w, r, p, http.StatusBadRequest, "The two new passwords differ: type the same one twice.")
		return
	}
	if _, err := h.callAPI(w, r, p, h.changePassword, wire.ChangePasswordRequest{OldPassword: f.Get("current"),
		NewPassword: f.Get("password")}); err != nil {
		status, msg := errorText(err)
		if protocol.ErrorCode(err) == protocol.CodeLoginFailed {
			msg = "The current password is wrong."
		}
		h.renderProfile(w, r, p, status, msg)
		return
	}
	h.redirect(w, r, loginPath, "Your password was changed: log in with the new one.")
}

// ---- audit log

// auditFilter is the audit page's filter, from the query.
type auditFilter struct{ Action, Actor string }

// Any reports whether the filter selects anything.
func (f auditFilter) Any() bool { return f.Action != "" || f.Actor != "" }

// auditPageSize is how many entries the audit page shows at once.
const auditPageSize = 50

// auditOption is one choice of the audit page's action filter.
type auditOption struct{ Value, Label string }

// auditActions are the choices of the action filter: each family, then each
// action.
var auditActions = func() []auditOption {
	var out []auditOption
	for _, f := range []string{"user", "apikey", "allowlist", "lease", "skew", "backup"} {
		out = append(out, auditOption{f, "every " + f + ".… action"})
	}
	for _, a := range []string{audit.Login, audit.LoginFailed, audit.Logout,
		audit.UserCreate, audit.UserUpdate, audit.PasswordChange, audit.UserWebhook,
		audit.WebhookTest, audit.KeyCreate,
		audit.KeyUpdate, audit.KeyRevoke, audit.AllowAdd, audit.AllowRemove,
		audit.LeaseGrant, audit.LeaseRemove, audit.LeaseReclaim, audit.LeaseRevoke,
		audit.LeaseRestore, audit.SkewReject} {
		out = append(out, auditOption{a, a})
	}
	for _, a := range []string{backup.AuditCreate, backup.AuditCreateFailed, backup.AuditDelete, audit.BackupSchedule, AuditRestorePreview,
		audit.BackupRestore, AuditRestoreRefused} {
		out = append(out, auditOption{a, a})
	}
	return out
}()

// auditView is the data of the audit page.
type auditView struct {
	Entries             []wire.AuditEntry
	Filter              auditFilter
	Actions             []auditOption
	Before              uint64
	Scanned             int
	NewestURL, OlderURL string
}

// auditRow is an entry with its time parsed, for the template.
func (v auditView) Rows() []auditRow {
	out := make([]auditRow, len(v.Entries))
	for i, e := range v.Entries {
		at, _ := wire.ParseTime(e.At)
		out[i] = auditRow{AuditEntry: e, Time: at}
	}
	return out
}

type auditRow struct {
	wire.AuditEntry
	Time time.Time
}

// auditPage shows a page of the audit log through the API's own reader
// (filters and paging as GET /admin/api/audit).
func (h *Handler) auditPage(w http.ResponseWriter, r *http.Request, p *principal) {
	q := r.URL.Query()
	f := auditFilter{Action: strings.TrimSpace(q.Get("action")), Actor: strings.TrimSpace(q.Get("actor"))}
	api := url.Values{"limit": {strconv.Itoa(auditPageSize)}}
	if f.Action != "" {
		api.Set("action", f.Action)
	}
	if f.Actor != "" {
		api.Set("actor", f.Actor)
	}
	var before uint64
	if s := q.Get("before"); s != "" {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil && n > 0 {
			before = n
			api.Set("before", s)
		}
	}
	r2 := r.Clone(r.Context())
	r2.URL.RawQuery = api.Encode()
	out, err := h.auditLog(w, r2, p)
	if err != nil {
		h.pageError(w, r, p, err)
		return
	}
	pg, _ := out.(wire.AuditPage)
	av := auditView{Entries: pg.Entries, Filter: f, Actions: auditActions, Before: before}
	keep := url.Values{}
	if f.Action != "" {
		keep.Set("action", f.Action)
	}
	if f.Actor != "" {
		keep.Set("actor", f.Actor)
	}
	av.NewestURL = "/admin/audit"
	if len(keep) > 0 {
		av.NewestURL += "?" + keep.Encode()
	}
	if pg.Next != nil {
		keep.Set("before", strconv.FormatUint(*pg.Next, 10))
		av.OlderURL = "/admin/audit?" + keep.Encode()
	}
	v := h.baseView(w, r, p, "Audit log", "audit")
	v.P = av
	h.render(w, r, http.StatusOK, "audit", v)
}

// ---- store health

// storeView is the data of the store page.
type storeView struct {
	Health     idkeeper.StoreHealth
	Reset      *resetReport // nil: the store was never reset
	Restore    *lastRestore // nil: no restore through this server since it started
	Durability string
	ClockCheck string
	StatusErr  string
	LocksErr   string // the job locks could not be read
	Config     idkeeper.Config
	Counts     *idkeeper.Counts
	Pool       *storePool // nil: the store did not answer or holds no pool
	Now        time.Time
	Alerts     *alertsView // nil: the store keeps no alert state, or AlertsErr
	AlertsErr  string
}

// jobAbout says what each periodic job does, for the store page.
var jobAbout = map[string]string{
	idkeeper.CleanupJob:   "reclaims the leases past their expiry + grace",
	idkeeper.RetentionJob: "deletes audit entries past the retention and ended sessions",
	idkeeper.KeyExpiryJob: "warns in the log of API keys in use that expire soon (a lock per key spaces the warnings)",
	backup.JobName:        "writes a backup into the backup folder, on its schedule or on demand (Backups page)",
	"alerts":              "checks the capacity and clock-skew alerts and sends them to the users' Discord webhooks",
	"alert":               "spaces the messages of one alert event (a reset, the clock guard, …) to one per 10 minutes",
}

// JobAbout says what the job named (or whose lock is named) name does.
func (storeView) JobAbout(name string) string {
	if i := strings.IndexByte(name, ':'); i > 0 {
		name = name[:i]
	}
	return jobAbout[name]
}

// PoolMismatch reports a registry that does not serve because the store's pool has
// another first node ID or layout than its own (PhasePoolMismatch).
func (v storeView) PoolMismatch() bool { return v.Health.Phase == idkeeper.PhasePoolMismatch }

// ClockUnsafe reports a shared store served without a clock agent.
func (v storeView) ClockUnsafe() bool { return strings.HasPrefix(v.ClockCheck, "UNSAFE") }

// RunBadge is the badge class of a run's outcome.
func (storeView) RunBadge(o idkeeper.JobOutcome) string {
	switch o {
	case idkeeper.JobRan:
		return "ok"
	case idkeeper.JobFailed:
		return "reject"
	}
	return "none"
}

func (h *Handler) storePage(w http.ResponseWriter, r *http.Request, p *principal) {
	s := h.reg.StoreHealth(r.Context())
	sv := storeView{Health: s, Reset: h.resetReport(r.Context(), s), Durability: h.cfg.durability(), ClockCheck: h.cfg.ClockCheck, Config: h.reg.Config(),
		Now: h.reg.Now(), Restore: h.restores.last.Load()}
	if s.LocksErr != nil {
		_, sv.LocksErr = errorText(s.LocksErr)
	}
	if s.StatusErr != nil {
		_, sv.StatusErr = errorText(s.StatusErr)
	} else {
		sv.Pool = newStorePool(s.Status)
		if c, err := h.reg.Remaining(r.Context()); err == nil {
			sv.Counts = &c
		}
	}
	if av, err := h.alerts(r.Context()); err != nil {
		_, sv.AlertsErr = errorText(err)
	} else {
		sv.Alerts = av
	}
	v := h.baseView(w, r, p, "Store", "store")
	v.P = sv
	h.render(w, r, http.StatusOK, "store", v)
}
