package admin

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/clientip"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The admin web's pages (issue #10): html/template pages rendered on the server
// from the same registry, accounts and store reads the JSON API makes, and forms
// whose POSTs go through the JSON API's own handlers (callAPI), so a page and an
// API call change state the same way, with the same checks and the same audit
// entries. Everything is embedded in the binary: the templates, one stylesheet and
// one small script (copy button, self-refresh of the leases page); nothing is
// loaded from the network. Every page works without the script.
//
// The pages' auth is the API's: the session cookie (Accounts), the role of the
// route, http.CrossOriginProtection on every POST. A GET never changes state. A
// page request without a valid session is sent to the login page.

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Where the pages live.
const (
	pagePrefix  = "/admin/"
	loginPath   = "/admin/login"
	homePath    = "/admin/leases"
	staticPath  = "/admin/static/"
	flashCookie = "idkeeper_flash"
)

// webAsset is one embedded static file, with the hash that versions its URL.
type webAsset struct {
	body  []byte
	ctype string
	hash  string // first 12 hex digits of its SHA-256
}

var webAssets = func() map[string]webAsset {
	out := map[string]webAsset{}
	err := fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := staticFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		out[strings.TrimPrefix(p, "static/")] = webAsset{body: b, ctype: ct, hash: hex.EncodeToString(sum[:6])}
		return nil
	})
	if err != nil {
		panic("admin: embedded static files: " + err.Error())
	}
	return out
}()

// assetURL is the versioned URL of a static file: it changes with the file, so
// the file may be cached for good.
func assetURL(name string) string {
	a, ok := webAssets[name]
	if !ok {
		panic("admin: no static file " + name)
	}
	return staticPath + name + "?v=" + a.hash
}

// serveStatic serves the embedded static files to anyone: they hold nothing
// secret, and the login page needs them.
func serveStatic(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, staticPath)
	a, ok := webAssets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", a.ctype)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("ETag", `"`+a.hash+`"`)
	if r.URL.Query().Get("v") == a.hash {
		hd.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		hd.Set("Cache-Control", "no-cache")
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}

// webFuncs are the templates' helpers.
var webFuncs = template.FuncMap{
	"asset":  assetURL,
	"tm":     timeHTML,
	"tmMs":   timeMsHTML,
	"tmOr":   timeOr,
	"rel":    relTime,
	"dur":    shortDuration,
	"swatch": legendSwatch,
}

// webTemplates holds one template set per page: the layout, and the page's file
// defining "content" (and any blocks of its own).
var webTemplates = func() map[string]*template.Template {
	base := template.Must(template.New("layout.html").Funcs(webFuncs).ParseFS(templateFS, "templates/layout.html"))
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(path.Base(n), ".html")
		if name == "layout" {
			continue
		}
		out[name] = template.Must(template.Must(base.Clone()).ParseFS(templateFS, n))
	}
	return out
}()

// timeFormat is how pages show a time: UTC, to the second.
const timeFormat = "2006-01-02 15:04:05Z"

// timeHTML shows t as a <time> element in UTC, "—" when it is zero.
func timeHTML(t time.Time) template.HTML { return timeElement(t, timeFormat) }

// timeElement shows t as a <time> element in UTC in layout, "—" when it is zero.
func timeElement(t time.Time, layout string) template.HTML {
	if t.IsZero() {
		return "—"
	}
	t = t.UTC()
	return template.HTML(`<time datetime="` + t.Format(wire.TimeFormat) + `">` + t.Format(layout) + `</time>`)
}

// timeOr is timeHTML, or alt when t is zero.
func timeOr(t time.Time, alt string) template.HTML {
	if t.IsZero() {
		return template.HTML(template.HTMLEscapeString(alt))
	}
	return timeHTML(t)
}

// relTime says how far t is from now: "in 9m 30s", "3m ago".
func relTime(t, now time.Time) string {
	if t.IsZero() || now.IsZero() {
		return ""
	}
	d := t.Sub(now)
	if d >= 0 {
		return "in " + roughDuration(d)
	}
	return roughDuration(-d) + " ago"
}

// roughDuration is d to the second, in at most two units.
func roughDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

// shortDuration writes d without zero units: "48h", "10m", "1m30s", "0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// navItem is one link of the main navigation.
type navItem struct {
	Href, Label string
	Current     bool
}

// view is what every page template gets: the page's title, its navigation entry,
// the signed-in user, a message, and the page's own data in P.
type view struct {
	Title    string
	Nav      string // the navigation entry that is the current page
	User     account.User
	SignedIn bool
	Flash    string // a success message (role=status)
	Error    string // a failure message (role=alert)
	// FormToken is the one-time token of the page's forms (webform.go); "" for
	// nobody signed in.
	FormToken string
	P         any
}

// CanOperate reports whether the user may change keys, the allow-list and leases.
func (v view) CanOperate() bool { return v.SignedIn && v.User.Role.AtLeast(account.RoleOperator) }

// IsAdmin reports whether the user may manage accounts.
func (v view) IsAdmin() bool { return v.SignedIn && v.User.Role.AtLeast(account.RoleAdmin) }

// NavItems is the main navigation, the current page marked.
func (v view) NavItems() []navItem {
	items := []navItem{
		{Href: "/admin/leases", Label: "Leases"},
		{Href: originPath, Label: "Find an ID"},
		{Href: "/admin/keys", Label: "API keys"},
		{Href: "/admin/allowlist", Label: "IP allow-list"},
		{Href: "/admin/users", Label: "Users"},
		{Href: "/admin/audit", Label: "Audit log"},
		{Href: "/admin/store", Label: "Store"},
		{Href: "/admin/profile", Label: "Profile"},
	}
	if v.CanOperate() { // the Backups page takes the role operator
		items = slices.Insert(items, len(items)-1, navItem{Href: "/admin/backups", Label: "Backups"})
	}
	for i := range items {
		items[i].Current = items[i].Href == "/admin/"+v.Nav
	}
	return items
}

// pageHeaders are sent with every page: no caching (pages show live state, and
// one shows a secret), no framing, no sniffing, and a policy that lets the page
// load nothing but this server's own stylesheet and script.
func pageHeaders(h http.Header) {
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
}

// render writes the page tmpl (a file of templates/) with v, as status.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, tmpl string, v view) {
	h.renderBlock(w, r, status, tmpl, "layout", v)
}

// renderBlock writes the block name of the page tmpl with v, as status. It renders
// into a buffer first, so a template error becomes a clean 500.
func (h *Handler) renderBlock(w http.ResponseWriter, r *http.Request, status int, tmpl, name string, v view) {
	t, ok := webTemplates[tmpl]
	if !ok {
		panic("admin: no page template " + tmpl)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, v); err != nil {
		h.log.Error("render admin page", "page", tmpl, "block", name, "err", err)
		pageHeaders(w.Header())
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "<!doctype html><title>Error · IdKeeper admin</title><main><h1>Internal error</h1>"+
			"<p>The page could not be drawn; the server log says why.</p></main>")
		return
	}
	pageHeaders(w.Header())
	w.Header().Add("Vary", "Accept-Encoding")
	if buf.Len() >= gzipFrom && acceptsGzip(r) {
		// The leases page and its live parts carry a map of up to 4096 links:
		// some 500 kB that gzip shrinks about fifteenfold.
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(status)
		zw := gzip.NewWriter(w)
		_, _ = zw.Write(buf.Bytes())
		_ = zw.Close()
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// gzipFrom is the size from which a page is sent gzipped to a browser that
// takes it.
const gzipFrom = 16 << 10

// acceptsGzip reports whether r's Accept-Encoding takes gzip (and not with q=0).
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(enc), "gzip") {
			continue
		}
		for _, p := range strings.Split(params, ";") {
			if k, v, _ := strings.Cut(strings.TrimSpace(p), "="); k == "q" {
				q, err := strconv.ParseFloat(v, 64)
				return err == nil && q > 0
			}
		}
		return true
	}
	return false
}

// pageFunc handles one page request that passed the auth layer; p is its caller,
// always a logged-in user.
type pageFunc func(w http.ResponseWriter, r *http.Request, p *principal)

// page wraps fn in the auth layer of the pages, in this order: the cross-origin
// check of a POST, the request timeout, the session (none or an ended one: a GET
// is sent to the login page, a POST too with a message), the role (403 page).
// Pages take no API key: an X-API-Key header is ignored.
func (h *Handler) page(method string, role account.Role, fn pageFunc) http.Handler {
	authed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
		defer cancel()
		p := h.newPrincipal(r)
		r = r.WithContext(context.WithValue(audit.WithRemoteIP(ctx, p.remote), principalKey{}, p))
		r.Header.Del(APIKeyHeader)
		if err := h.authenticate(w, r, p); err != nil || p.user == nil {
			code := protocol.ErrorCode(err)
			if err != nil && code != protocol.CodeSessionExpired {
				h.pageError(w, r, nil, err)
				return
			}
			next := r.URL.RequestURI()
			if r.Method != http.MethodGet {
				next = r.URL.Path
			}
			if c, cerr := r.Cookie(h.cookie); cerr == nil && c.Value != "" || r.Method != http.MethodGet {
				h.setFlash(w, "Your session has ended: log in again.")
			}
			http.Redirect(w, r, loginPath+"?next="+url.QueryEscape(next), http.StatusSeeOther)
			return
		}
		if !p.role.AtLeast(role) {
			h.pageError(w, r, p, protocol.Errorf(protocol.CodeForbidden,
				"This needs the role %s or above; you have the role %s.", role, p.role))
			return
		}
		r = r.WithContext(audit.WithActor(r.Context(), p.actor))
		fn(w, r, p)
	})
	if method == http.MethodGet {
		return authed
	}
	return h.csrf.Handler(authed)
}

// newPrincipal starts the caller of r: its address, as the API's auth layer
// records it.
func (h *Handler) newPrincipal(r *http.Request) *principal {
	p := &principal{}
	p.ip, p.ipErr = clientip.Of(r, h.cfg.TrustedProxies)
	p.remote = p.ip.String()
	if p.ipErr != nil {
		p.remote = r.RemoteAddr
	}
	return p
}

// baseView is the view of a page for the caller p (nil: nobody signed in), with
// the flash message of the request, if any.
func (h *Handler) baseView(w http.ResponseWriter, r *http.Request, p *principal, title, nav string) view {
	v := view{Title: title, Nav: nav, Flash: h.takeFlash(w, r)}
	if p != nil && p.user != nil {
		v.User, v.SignedIn = *p.user, true
		v.FormToken = newFormToken(p.token)
	}
	return v
}

// pageError answers with an error page for err: its status and message.
func (h *Handler) pageError(w http.ResponseWriter, r *http.Request, p *principal, err error) {
	status, msg := errorText(err)
	if status >= 500 {
		h.log.Error("admin page failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	title := http.StatusText(status)
	switch status {
	case http.StatusForbidden:
		title = "Not allowed"
	case http.StatusNotFound:
		title = "Not found"
	case http.StatusServiceUnavailable:
		title = "Store unavailable"
	}
	v := h.baseView(w, r, p, title, "")
	v.P = struct{ Message string }{msg}
	h.render(w, r, status, "error", v)
}

// errorText is the status and the message a page shows for err: the API's
// status for its code, and the Error's own message (never the text of an error
// that is not an *idkeeper.Error: that is "internal error").
func errorText(err error) (int, string) {
	p := problem.From(err)
	var e *idkeeper.Error
	if errors.As(err, &e) && e.Message != "" {
		return p.Status, e.Message
	}
	return p.Status, "An internal error occurred; the server log says more."
}

// setFlash keeps msg for the next page the browser loads (post/redirect/get).
func (h *Handler) setFlash(w http.ResponseWriter, msg string) {
	if len(msg) > maxFlash {
		msg = strings.ToValidUTF8(msg[:maxFlash-len("…")], "") + "…"
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: base64.RawURLEncoding.EncodeToString([]byte(msg)),
		Path: pagePrefix, MaxAge: 60, HttpOnly: true, Secure: h.cfg.TLS, SameSite: http.SameSiteStrictMode})
}

// takeFlash returns the flash message of r, if any, and clears it.
func (h *Handler) takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil || c.Value == "" {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: pagePrefix, MaxAge: -1, HttpOnly: true,
		Secure: h.cfg.TLS, SameSite: http.SameSiteStrictMode})
	return decodeFlash(c.Value)
}

// decodeFlash is the message of a flash cookie's value; "" for one that is not.
func decodeFlash(v string) string {
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(b) > maxFlash {
		return ""
	}
	msg, ok := idkeeper.CleanText(string(b), maxFlash)
	if !ok {
		return ""
	}
	return msg
}

// maxFlash bounds a flash message, in bytes.
const maxFlash = 512

// redirect sends the browser to target (a path of the admin web) with a flash
// message: the end of every successful form POST.
func (h *Handler) redirect(w http.ResponseWriter, r *http.Request, target, flash string) {
	if flash != "" {
		h.setFlash(w, flash)
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// callAPI runs the JSON API's handler fn for a page's form: the same request
// (caller, context, address) with body as its JSON body and the path values
// given (name, value pairs), so the change is made, checked and audited exactly as
// through the API. It returns fn's answer, unwrapped from created.
func (h *Handler) callAPI(w http.ResponseWriter, r *http.Request, p *principal, fn handlerFunc, body any, pathValues ...string) (any, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(b))
	r2.ContentLength = int64(len(b))
	r2.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(pathValues); i += 2 {
		r2.SetPathValue(pathValues[i], pathValues[i+1])
	}
	out, err := fn(w, r2, p)
	if c, ok := out.(created); ok {
		out = c.body
	}
	return out, err
}

// parseForm reads a urlencoded form of at most MaxBodyBytes.
func (h *Handler) parseForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes)
	if err := r.ParseForm(); err != nil {
		return protocol.Invalidf("body", "the form could not be read: %v", err)
	}
	return nil
}

// localTimeLayouts are the values of an <input type="datetime-local">.
var localTimeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02T15:04:05.000"}

// parseLocalTime reads a datetime-local value as UTC (the pages say so).
func parseLocalTime(field, s string) (time.Time, error) {
	for _, l := range localTimeLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, protocol.Invalidf(field, "%q is not a date and time such as 2030-01-31T12:00", s)
}

// localTimeValue is t as the value of a datetime-local input, in UTC; "" for
// the zero time.
func localTimeValue(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04")
}

// notFoundPage answers a page path without a route: 404, an HTML page in the
// layout, with the navigation when the request's session is valid (it is not
// sent to the login page: there is nothing there to log in for).
func (h *Handler) notFoundPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	p := h.newPrincipal(r)
	r = r.WithContext(ctx)
	if c, err := r.Cookie(h.cookie); err == nil && c.Value != "" {
		if u, s, err := h.acct.Authenticate(ctx, c.Value); err == nil {
			p.user, p.session, p.token, p.role, p.actor = &u, s, c.Value, u.Role, idkeeper.CreatedByUser(u.Name)
		} else {
			p = nil
		}
	} else {
		p = nil
	}
	path := r.URL.Path
	if len(path) > 200 {
		path = strings.ToValidUTF8(path[:200], "") + "…"
	}
	h.pageError(w, r, p, protocol.Errorf(protocol.CodeNotFound, "There is no page %s in the admin web.", path))
}
