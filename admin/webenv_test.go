package admin_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/discord/discordtest"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/password"
)

// The environment of the page tests (webpages_test.go, browser_test.go): a bolt
// store on a temporary file, a registry on the real clock, accounts with the
// first admin, and package http's server with the admin handler as Options.Admin,
// served by a real http.Server on loopback.

// webAdminPW is the password of the first admin, "admin", and of every account
// the page tests add.
const webAdminPW = "admin-password-0123"

// webEnv is a running server for the page tests.
type webEnv struct {
	t     *testing.T
	store *bolt.Store
	reg   *idkeeper.Registry
	acct  *account.Service
	url   string // http://127.0.0.1:PORT
	admin account.User
	// started is the start time of the requesters the tests lease with.
	started time.Time
	// backups is the admin handler's backup job (backups_test.go).
	backups *backup.Job
	// discord is the fake Discord the admin handler sends test messages to.
	discord *discordtest.Server
}

// newWebEnv starts a server on a pool of 4096 node IDs, 0-4095, on DefaultLayout.
func newWebEnv(t *testing.T) *webEnv {
	t.Helper()
	return newWebEnvPool(t, idkeeper.PoolSpec{Nodes: 4096})
}

// newWebEnvPool starts a server whose store is initialised with pool, and whose
// registry is configured for it (Config.First, Nodes, Layout).
func newWebEnvPool(t *testing.T, pool idkeeper.PoolSpec) *webEnv {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Init(ctx, pool); err != nil {
		t.Fatal(err)
	}
	acct, err := account.New(st, password.Hasher{Params: password.Params{Memory: 64, Time: 1, Threads: 1,
		SaltLen: 16, KeyLen: 32}}, account.Config{Logger: quiet, ValidWebhook: discord.ValidWebhookURL})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := idkeeper.NewRegistry(st, idkeeper.Config{Logger: quiet, Audit: acct, First: pool.First, Nodes: pool.Nodes,
		Layout: pool.Layout})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if _, err := acct.EnsureFirstAdmin(ctx, "admin", webAdminPW); err != nil {
		t.Fatal(err)
	}
	allow := allowlist.New(nil, st)
	if err := allow.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	backups := testBackups(t, st, acct, nil)
	fd := discordtest.New(t)
	idem, err := idempotency.New(st.Idempotency(), idempotency.Config{Logger: quiet, MaxRecords: 1000})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(admin.Config{Registry: reg, Accounts: acct, Store: st, AllowList: allow, Logger: quiet, Idempotency: idem,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}, Durability: func() string { return "bolt: fsync on every commit" },
		Backups: backups, Discord: &discord.Client{HTTP: fd.HTTPClient()}, Snapshots: st, SnapshotKind: "bolt"})
	if err != nil {
		t.Fatal(err)
	}
	api, err := idkhttp.NewServer(reg, idkhttp.Options{Logger: quiet, Gatherer: prometheus.NewRegistry(), AllowList: allow,
		Admin: h})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(quiet.Handler(), slog.LevelError)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	e := &webEnv{t: t, store: st, reg: reg, acct: acct, url: "http://" + ln.Addr().String(),
		started: time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond), backups: backups, discord: fd}
	if e.admin, err = st.User(ctx, "admin"); err != nil {
		t.Fatal(err)
	}
	return e
}

// addUser adds an account with webAdminPW.
func (e *webEnv) addUser(name string, role account.Role) {
	e.t.Helper()
	if _, err := e.acct.CreateUser(context.Background(), e.admin, name, role, webAdminPW); err != nil {
		e.t.Fatal(err)
	}
}

// webClient is a browser-like HTTP client of the pages: it keeps cookies and
// does not follow redirects, so the tests see them.
type webClient struct {
	e *webEnv
	c *http.Client
}

func (e *webEnv) client() *webClient {
	jar, err := cookiejar.New(nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return &webClient{e: e, c: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// page is one answer of the server.
type page struct {
	status int
	header http.Header
	body   string
}

// location is the path and query the answer redirects to.
func (p page) location() string {
	u, err := url.Parse(p.header.Get("Location"))
	if err != nil {
		return "!" + err.Error()
	}
	return u.RequestURI()
}

// get loads path; hdr adds headers in pairs.
func (c *webClient) get(path string, hdr ...string) page {
	c.e.t.Helper()
	return c.do(http.MethodGet, path, nil, hdr...)
}

// post sends form as a same-origin browser would (Sec-Fetch-Site: same-origin),
// with a fresh one-time form token (formToken) unless form has one: that of the
// profile page, as a logged-in browser would have drawn it. Login and logout
// take none.
func (c *webClient) post(path string, form url.Values, hdr ...string) page {
	c.e.t.Helper()
	if path != "/admin/login" && path != "/admin/logout" && !form.Has("formToken") {
		if tok := c.formToken(); tok != "" {
			f := url.Values{"formToken": {tok}}
			for k, v := range form {
				f[k] = v
			}
			form = f
		}
	}
	return c.postRaw(path, form, hdr...)
}

// postRaw sends form as it is, as post does.
func (c *webClient) postRaw(path string, form url.Values, hdr ...string) page {
	c.e.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	return c.do(http.MethodPost, path, form, append([]string{"Sec-Fetch-Site", "same-origin"}, hdr...)...)
}

// formTokenRE finds a page's form token.
var formTokenRE = regexp.MustCompile(`name="formToken" value="([^"]+)"`)

// formToken draws a form token as the profile page shows it; "" when the
// client is not logged in.
func (c *webClient) formToken() string {
	c.e.t.Helper()
	p := c.get("/admin/profile")
	if m := formTokenRE.FindStringSubmatch(p.body); m != nil {
		return m[1]
	}
	return ""
}

func (c *webClient) do(method, path string, form url.Values, hdr ...string) page {
	c.e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.e.url+path, body)
	if err != nil {
		c.e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.e.t.Fatal(err)
	}
	return page{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// login logs in through the login form and checks it lands on the leases page.
func (c *webClient) login(name string) {
	c.e.t.Helper()
	p := c.post("/admin/login", url.Values{"name": {name}, "password": {webAdminPW}})
	if p.status != http.StatusSeeOther || p.location() != "/admin/leases" {
		c.e.t.Fatalf("login %s: %d to %q: %s", name, p.status, p.location(), p.body)
	}
}
