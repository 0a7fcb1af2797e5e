// Package admin serves the registry's admin web under /admin/: the admin JSON API
// under /admin/api/ (docs/api.md, "Admin API"), which the admin pages and the
// command line use. Package http mounts a Handler (http.Options.Admin); cmd/idkeeper
// builds it.
//
// The package has three layers:
//
//   - the Handler and its route table (routes.go): every route with the least role
//     it takes, whether an API key may call it, and its JSON handler;
//   - the auth layer (auth.go): a caller is a logged-in user (the session cookie) or
//     an admin API key (X-API-Key, under the IP allow-list as on /v1); roles viewer <
//     operator < admin; every route that changes state is a POST behind
//     http.CrossOriginProtection, and no GET changes anything;
//   - the JSON handlers (session.go, users.go, webhook.go, keys.go, allowlist.go,
//     leases.go, audit.go, store.go), which decode bodies strictly (internal/jsonbody), call the
//     registry and the accounts, and answer JSON (internal/wire) or problem+json
//     (internal/problem) with the codes of every IdKeeper API.
//
// Every change made through the API is in the audit log with its actor ("user:NAME"
// or "key:ID") and the client's address: the accounts and the registry record their
// own changes (logins, users, lease revocations); this package records the rest
// (API keys, the allow-list).
package admin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// APIPrefix starts every route of the admin API.
const APIPrefix = wire.AdminAPIPrefix

// Defaults of Config, the same as package http's for /v1.
const (
	DefaultMaxBodyBytes = 64 << 10
	DefaultTimeout      = 10 * time.Second
)

// RetryAfterSeconds is the Retry-After sent with every 503, as on /v1.
const RetryAfterSeconds = 5

// Config configures a Handler. Registry, Accounts and Store are required; a zero
// field of the others means its default.
type Config struct {
	Registry *idkeeper.Registry
	Accounts *account.Service
	// Store keeps the allow-list entries and the audit log (the store the
	// Accounts use).
	Store account.Store
	// AllowList is the allow-list in force for API keys, on /v1 and here; it is
	// refreshed at once after a change made here. Nil: every address may use an
	// admin key, and the allow-list routes show no floor.
	AllowList *allowlist.List
	// TrustedProxies are the peers whose X-Forwarded-For is believed
	// (internal/clientip), as on /v1.
	TrustedProxies []netip.Prefix
	// TLS tells that browsers reach the server over HTTPS (served by it, or by a
	// proxy in front): the session cookie is then Secure and named with the
	// __Host- prefix.
	TLS    bool
	Logger *slog.Logger // nil: slog.Default()
	// MaxBodyBytes limits request bodies (413 BODY_TOO_LARGE): DefaultMaxBodyBytes
	// when 0. Timeout bounds the store work of one request (503
	// STORE_UNAVAILABLE): DefaultTimeout when 0.
	MaxBodyBytes int64
	Timeout      time.Duration
	// Durability, when set, is asked by the store page and GET /admin/api/store
	// for what the store's settings guarantee now (as /readyz shows it).
	Durability func() string
	// ClockCheck, when set, is shown by the store page and GET /admin/api/store:
	// how the replicas' clocks are checked (the clock agent and Δ, or that nothing
	// checks them).
	ClockCheck string
	// Idempotency, when set, gives the creates of users, allow-list entries, API
	// keys and backups the Idempotency-Key semantics (docs/idempotency.md), scoped
	// by the caller, and consumes the admin web's one-time form tokens
	// (webform.go). Nil: the header is accepted and ignored, and a form token is
	// checked but not consumed. A key create's secret is stored nowhere in the
	// clear: its API replay is the key without it, "secretShown": false; a form's
	// record holds it sealed under the session's cookie token, which the store
	// does not hold.
	Idempotency *idempotency.Service
	// Snapshots, when set, is the registry's own store as GET /admin/api/backup
	// exports it and POST /admin/api/restore replaces it (backup.go); it must also
	// answer Status (bolt and redis do). SnapshotKind names it in a backup's header
	// ("bolt", "redis"). Nil: both routes answer 404 NOT_FOUND.
	Snapshots    snapshot.Store
	SnapshotKind string
	// MaxRestoreBytes limits a restore's upload (413 BODY_TOO_LARGE):
	// DefaultMaxRestoreBytes when 0 or less. RestoreDir is where the upload is
	// spooled while it is checked: os.TempDir() when "". BackupTimeout bounds one
	// export or restore instead of Timeout: DefaultBackupTimeout when 0 or less.
	MaxRestoreBytes int64
	RestoreDir      string
	BackupTimeout   time.Duration
	// Backups, when set, is the server's backup job and folder (--backup-dir),
	// which the backups routes and the Backups page list, fill, download and
	// delete (backups.go). Nil: the page says how to enable them.
	Backups *backup.Job
	// Discord, when set, sends the test message of a user's webhook (webhook.go;
	// the Profile page's "Send test message"). Nil: the test answers 409
	// ALERTS_NOT_CONFIGURED. Which webhook URLs a user may store is
	// account.Config.ValidWebhook's.
	Discord *discord.Client
}

// Handler serves everything under /admin/. It is safe for concurrent use.
type Handler struct {
	cfg    Config
	reg    *idkeeper.Registry
	keys   *apikey.Admin // the registry's keys, administered
	acct   *account.Service
	store  account.Store
	allow  *allowlist.List
	log    *slog.Logger
	mux    *http.ServeMux
	csrf   *http.CrossOriginProtection
	cookie string // the session cookie's name
	// restores: one at a time, and the last one (backup.go).
	restores restoreState
	// webhookTests spaces each user's test messages (webhook.go).
	webhookTests testLimiter
}

// New returns the Handler of cfg. It does no I/O. Errors: a missing Registry,
// Accounts or Store, a negative MaxBodyBytes or Timeout.
func New(cfg Config) (*Handler, error) {
	switch {
	case cfg.Registry == nil:
		return nil, errors.New("admin: Config.Registry is required")
	case cfg.Accounts == nil:
		return nil, errors.New("admin: Config.Accounts is required")
	case cfg.Store == nil:
		return nil, errors.New("admin: Config.Store is required")
	case cfg.MaxBodyBytes < 0:
		return nil, errors.New("admin: Config.MaxBodyBytes is negative")
	case cfg.Timeout < 0:
		return nil, errors.New("admin: Config.Timeout is negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	cfg.TrustedProxies = slices.Clone(cfg.TrustedProxies)
	h := &Handler{cfg: cfg, reg: cfg.Registry, keys: apikey.NewAdmin(cfg.Registry), acct: cfg.Accounts, store: cfg.Store, allow: cfg.AllowList,
		log: cfg.Logger, mux: http.NewServeMux(), csrf: http.NewCrossOriginProtection(), cookie: CookieName(cfg.TLS)}
	if h.allow == nil {
		h.allow = allowlist.New(nil, nil)
	}
	h.csrf.SetDenyHandler(http.HandlerFunc(h.crossOrigin))
	for _, rt := range h.apiRoutes() {
		h.mux.Handle(rt.method+" "+APIPrefix+rt.path, h.wrap(rt))
	}
	h.webRoutes() // the pages (web*.go)
	return h, nil
}

// CookieName is the name of the session cookie: "__Host-idkeeper_session" over
// TLS (the prefix makes browsers insist on Secure, Path=/ and no Domain),
// "idkeeper_session" otherwise.
func CookieName(tls bool) string {
	if tls {
		return "__Host-idkeeper_session"
	}
	return "idkeeper_session"
}

// ServeHTTP serves every path under /admin/; a path without a route answers 404
// NOT_FOUND, a route called with another method 405 METHOD_NOT_ALLOWED with Allow,
// both problem+json, except that a path without a route outside APIPrefix is a
// page: its 404 is an HTML page in the admin's layout (notFoundPage).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := h.mux.Handler(r); pattern != "" {
		h.mux.ServeHTTP(w, r)
		return
	}
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut} {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, p := h.mux.Handler(probe); p != "" {
			allowed = append(allowed, m)
			if m == http.MethodGet {
				allowed = append(allowed, http.MethodHead)
			}
		}
	}
	if len(allowed) == 0 && !isAPIPath(r.URL.Path) {
		h.notFoundPage(w, r)
		return
	}
	if len(allowed) == 0 {
		h.writeProblem(w, r, protocol.Errorf(protocol.CodeNotFound, "no route for %s %s", r.Method, r.URL.Path))
		return
	}
	allow := strings.Join(allowed, ", ")
	w.Header().Set("Allow", allow)
	h.writeProblem(w, r, protocol.Errorf(protocol.CodeMethodNotAllowed, "%s is not allowed on %s; allowed: %s",
		r.Method, r.URL.Path, allow))
}

// isAPIPath reports whether p is, or cleans to, a path of the admin API or
// its prefix without the slash.
func isAPIPath(p string) bool {
	c := path.Clean(p)
	return strings.HasPrefix(p, APIPrefix) || strings.HasPrefix(c, APIPrefix) || c == strings.TrimSuffix(APIPrefix, "/")
}

// created is a handler's answer sent as 201 Created with a Location header.
type created struct {
	location string
	body     any
}

// noContent is a handler's answer sent as 204 No Content.
type noContent struct{}

// write sends a handler's answer: 201 for created, 204 for noContent, else 200
// with body as JSON.
func (h *Handler) write(w http.ResponseWriter, body any) {
	status := http.StatusOK
	switch b := body.(type) {
	case streamed:
		return // the handler wrote the answer itself (backup.go)
	case noContent:
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
		return
	case created:
		w.Header().Set("Location", b.location)
		status, body = http.StatusCreated, b.body
	}
	if err := problem.WriteJSON(w, status, "application/json", body); err != nil {
		h.log.Error("encode response", "err", err)
	}
}

// writeProblem sends err as problem+json (internal/problem): with Retry-After on
// a 503, and on any error whose Details carry "retryAfterSeconds" (a throttled
// login or password change); server-side failures are logged with their cause.
func (h *Handler) writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	p := problem.From(err)
	retryAfter := 0
	var e *idkeeper.Error
	if errors.As(err, &e) {
		if s, ok := e.Details["retryAfterSeconds"].(int); ok && s > 0 {
			retryAfter = s
		}
	}
	switch {
	case p.Code == CodeWebhookTestFailed: // a user's webhook, not the server, failed
		h.log.Info("webhook test message not delivered", "path", r.URL.Path, "err", err)
	case p.Status == http.StatusServiceUnavailable:
		retryAfter = max(retryAfter, RetryAfterSeconds)
		h.log.Warn("admin request failed", "method", r.Method, "path", r.URL.Path, "code", string(p.Code), "err", err)
	case p.Status >= 500:
		h.log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "code", string(p.Code), "err", err)
	}
	if err := p.Write(w, retryAfter); err != nil {
		h.log.Error("encode response", "err", err)
	}
}

// audit appends e to the audit log (Accounts.Audit: the actor's address from the
// context). A failure is logged at error level; the change it records stands.
func (h *Handler) audit(ctx context.Context, e audit.Entry) {
	if err := h.acct.Audit(ctx, e); err != nil {
		h.log.Error("append to the audit log", "action", e.Action, "actor", e.Actor, "target", e.Target, "err", err)
	}
}

// storeErr is err of an account.Store call as the API answers it: an *idkeeper.Error
// as it is, anything else STORE_UNAVAILABLE.
func storeErr(err error) error {
	var e *idkeeper.Error
	if err == nil || errors.As(err, &e) {
		return err
	}
	return idkeeper.Unavailable(err)
}

// optTime is t in the wire format, or nil for the zero time.
func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := wire.FormatTime(t)
	return &s
}

// durability is what Config.Durability says now, "" without it.
func (c *Config) durability() string {
	if c.Durability == nil {
		return ""
	}
	return c.Durability()
}
