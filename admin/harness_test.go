package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/discord"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/password"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/redis"
	"github.com/idkeeper/idkeeper/snapshot"
)

// start is the fake clock's start in every test.
var start = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// The credentials every env stores.
const (
	plainKey = "idk_plain-key-for-the-admin-tests-0123456789"
	adminKey = "idk_admin-key-for-the-admin-tests-0123456789"
	rootPW   = "root-password-0123"
	userPW   = "user-password-0123"
)

// cheap are password-hash parameters that keep the tests fast.
var cheap = password.Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

// env is a registry with accounts and the admin API, served by package http over
// real HTTP on loopback, on a bolt file and a fake clock.
type env struct {
	t      *testing.T
	clk    *fakeclock.Clock
	store  fullStore
	reg    *idkeeper.Registry
	acct   *account.Service
	allow  *allowlist.List
	h      *admin.Handler
	srv    *httptest.Server
	client *http.Client
	root   account.User // the first admin, "root"
	redis  string       // the redis-server's URL; "" on bolt
	// backups is the admin handler's backup job (backups_test.go).
	backups *backup.Job
}

// fullStore is a store of leases and admin records: bolt's or redis's.
type fullStore interface {
	idkeeper.Store
	account.Store
}

// setup adjusts an env before it starts.
type setup struct {
	redis   bool // the store is a private redis-server's, not a bolt file
	floor   []netip.Prefix
	trusted []netip.Prefix
	tls     bool
	idem    bool
	nodes   int
	first   idkeeper.NodeID // the pool's first node ID: the pool is first..first+nodes−1
	layout  idkeeper.Layout // the pool's layout; zero: DefaultLayout
	receipt bool            // the registry signs receipts, so that a holder may restore its lease after a reset
	// maxRestore is Config.MaxRestoreBytes (backup_test.go).
	maxRestore int64
	// discord is Config.Discord (webhook_test.go); nil: alerts not configured.
	discord *discord.Client
	// noBackups leaves Config.Backups nil: a replica without --backup-dir
	// (backupschedule_test.go).
	noBackups bool
}

// stores runs f on an env of each store, as subtests named after it.
func stores(t *testing.T, f func(t *testing.T, e *env), opts ...func(*setup)) {
	t.Run("bolt", func(t *testing.T) { f(t, newEnv(t, opts...)) })
	t.Run("redis", func(t *testing.T) { f(t, newEnv(t, append(opts, func(s *setup) { s.redis = true })...)) })
}

func newEnv(t *testing.T, opts ...func(*setup)) *env {
	t.Helper()
	s := setup{nodes: 128}
	for _, o := range opts {
		o(&s)
	}
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	clk := fakeclock.New(start)
	var err error
	var (
		st       fullStore
		idem     idempotency.Store
		redisURL string
	)
	if s.redis {
		redisURL = redistest.Start(t).URL()
		rs, err := redis.Open(redisURL, redis.Options{Clock: clk.Now, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		st, idem = rs, rs.Idempotency()
	} else {
		bs, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Clock: clk.Now, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		st, idem = bs, bs.Idempotency()
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Init(ctx, idkeeper.PoolSpec{First: s.first, Nodes: s.nodes, Layout: s.layout}); err != nil {
		t.Fatal(err)
	}
	acct, err := account.New(st, password.Hasher{Params: cheap}, account.Config{Clock: clk.Now, Logger: quiet,
		ValidWebhook: discord.ValidWebhookURL})
	if err != nil {
		t.Fatal(err)
	}
	rc := idkeeper.Config{Clock: clk.Now, Logger: quiet, First: s.first, Nodes: s.nodes, Layout: s.layout, Audit: acct}
	if s.receipt {
		rc.ReceiptSecret = []byte("receipt-secret-of-the-admin-tests-0123456789")
	}
	reg, err := idkeeper.NewRegistry(st, rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if _, err := reg.EnsureAPIKey(ctx, plainKey, "plain"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.EnsureAdminKey(ctx, adminKey); err != nil {
		t.Fatal(err)
	}
	if _, err := acct.EnsureFirstAdmin(ctx, "root", rootPW); err != nil {
		t.Fatal(err)
	}
	allow := allowlist.New(s.floor, st)
	if err := allow.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := admin.Config{Registry: reg, Accounts: acct, Store: st, AllowList: allow, TrustedProxies: s.trusted,
		TLS: s.tls, Logger: quiet, Durability: func() string { return "fsync on every write" }, ClockCheck: "verified by the clock agent 127.0.0.1:1"}
	cfg.Snapshots, cfg.SnapshotKind = st.(snapshot.Store), map[bool]string{false: "bolt", true: "redis"}[s.redis] // backup_test.go
	cfg.MaxRestoreBytes = s.maxRestore
	cfg.Discord = s.discord
	if !s.noBackups {
		cfg.Backups = testBackups(t, st, acct, func() time.Time { return clk.Now() }) // backups_test.go
	}
	if s.idem {
		if cfg.Idempotency, err = idempotency.New(idem, idempotency.Config{Logger: quiet}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	api, err := idkhttp.NewServer(reg, idkhttp.Options{Logger: quiet, Gatherer: prometheus.NewRegistry(), AllowList: allow,
		TrustedProxies: s.trusted, Admin: h})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(api.Handler())
	if s.tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	e := &env{t: t, clk: clk, store: st, reg: reg, acct: acct, allow: allow, h: h, srv: srv, client: srv.Client(), redis: redisURL}
	e.backups = cfg.Backups
	if e.root, err = st.User(ctx, "root"); err != nil {
		t.Fatal(err)
	}
	return e
}

// user creates an account with userPW.
func (e *env) user(name string, role account.Role) {
	e.t.Helper()
	if _, err := e.acct.CreateUser(context.Background(), e.root, name, role, userPW); err != nil {
		e.t.Fatal(err)
	}
}

// response is one HTTP answer, its JSON body decoded.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// do sends a request; a non-empty body goes as application/json. hdr adds
// headers in pairs; "Cookie" with a bare token sends it as the session cookie.
func (e *env) do(method, path, body string, hdr ...string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Cookie" && !strings.Contains(hdr[i+1], "=") {
			req.AddCookie(&http.Cookie{Name: admin.CookieName(e.srv.TLS != nil), Value: hdr[i+1]})
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	r := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 && method != http.MethodHead && strings.Contains(resp.Header.Get("Content-Type"), "json") {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&r.body); err != nil {
			e.t.Fatalf("%s %s: body is not a JSON object: %v: %q", method, path, err, raw)
		}
	}
	return r
}

// login logs name in and returns the session cookie's token.
func (e *env) login(name, pw string, hdr ...string) string {
	e.t.Helper()
	r := e.do("POST", "/admin/api/login", `{"name":"`+name+`","password":"`+pw+`"}`, hdr...)
	if r.status != 200 {
		e.t.Fatalf("login %s: %d %s", name, r.status, r.raw)
	}
	c := sessionCookie(e.t, r, e.srv.TLS != nil)
	return c.Value
}

// sessionCookie returns the session cookie r sets.
func sessionCookie(t *testing.T, r response, tls bool) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == admin.CookieName(tls) {
			return c
		}
	}
	t.Fatalf("no session cookie in %q", r.header.Values("Set-Cookie"))
	return nil
}

// status asserts the status of r.
func (r response) status1(t *testing.T, want int) response {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d: %s", r.status, want, r.raw)
	}
	return r
}

// ok asserts a 200 application/json answer.
func (r response) ok(t *testing.T) response {
	t.Helper()
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d (%s), want 200 JSON: %s", r.status, r.header.Get("Content-Type"), r.raw)
	}
	return r
}

// codeStatus is the HTTP status each code the admin tests expect must come with,
// written out here rather than read from the problem table under test: a code
// moved to another status in that table fails these tests.
var codeStatus = map[idkeeper.Code]int{
	protocol.CodeInvalidRequest:       400,
	protocol.CodePasswordTooCommon:    400,
	protocol.CodeCountTooLarge:        400,
	protocol.CodeAPIKeyExpired:        401,
	protocol.CodeAPIKeyMissing:        401,
	protocol.CodeAPIKeyInvalid:        401,
	protocol.CodeLoginFailed:          401,
	protocol.CodeSessionExpired:       401,
	protocol.CodeIPNotAllowed:         403,
	protocol.CodeAdminKeyRequired:     403,
	protocol.CodeForbidden:            403,
	protocol.CodeLeaseNotOwned:        403,
	protocol.CodeNotFound:             404,
	protocol.CodeMethodNotAllowed:     405,
	protocol.CodeConflict:             409,
	protocol.CodeNodeIDsExhausted:     409,
	protocol.CodeAPIKeyQuotaExceeded:  409,
	protocol.CodeBodyTooLarge:         413,
	protocol.CodeUnsupportedMediaType: 415,
	admin.CodeAlertsNotConfigured:     409,
	admin.CodeWebhookNotSet:           409,
	idempotency.CodeKeyReused:         422,
	protocol.CodeLoginThrottleFull:    429,
	admin.CodeWebhookTestRateLimited:  429,
	protocol.CodeInternal:             500,
	admin.CodeWebhookTestFailed:       502,
	protocol.CodeStoreUnavailable:     503,
	protocol.CodeNotReady:             503,
	protocol.CodeClockUnverified:      503,
}

// problem asserts a problem+json answer with the code's status (codeStatus) and
// returns it.
func (r response) problem(t *testing.T, code idkeeper.Code) response {
	t.Helper()
	want, ok := codeStatus[code]
	if !ok {
		t.Fatalf("the test expects code %s, which codeStatus does not list: add it with its status", code)
	}
	if r.status != want || r.header.Get("Content-Type") != problem.ContentType || r.str("code") != string(code) {
		t.Fatalf("status %d code %q, want %d %s: %s", r.status, r.str("code"), want, code, r.raw)
	}
	if r.str("detail") == "" || r.str("title") == "" {
		t.Fatalf("incomplete problem: %s", r.raw)
	}
	return r
}

func (r response) str(name string) string {
	s, _ := r.body[name].(string)
	return s
}

// decode decodes r's body into v.
func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.raw, v); err != nil {
		t.Fatalf("%v: %s", err, r.raw)
	}
}

// ts renders t the way the API does.
func ts(t time.Time) string { return wire.FormatTime(t) }

// auditAll returns every audit entry, newest first, through the API.
func (e *env) auditAll(hdr ...string) []wire.AuditEntry {
	e.t.Helper()
	var page wire.AuditPage
	e.do("GET", "/admin/api/audit?limit=1000", "", hdr...).ok(e.t).decode(e.t, &page)
	return page.Entries
}

// waitAudit waits until the audit log holds an entry with action and target: the
// registry appends its entries in the background.
func (e *env) waitAudit(action, target string) audit.Entry {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		es, err := e.store.AuditEntriesBefore(context.Background(), 0, 1000)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, x := range es {
			if x.Action == action && x.Target == target {
				return x
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no audit entry %s %s in %+v", action, target, es)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
