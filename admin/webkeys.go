package admin

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The API keys and IP allow-list pages.

// ---- API keys

// keyView is an API key as the pages show it.
type keyView struct {
	ID, Description, CreatedBy, Status          string
	Admin                                       bool
	CreatedAt, ExpiresAt, LastUsedAt, RevokedAt time.Time
	MaxNodes, Held                              int
	// Quota is the quota that applies (its own MaxNodes, or the server-wide
	// default when QuotaDefault); Cooling the node IDs cooling after its Removes,
	// which count against it with Held.
	Quota, Cooling int
	QuotaDefault   bool
}

func keyViewOf(k idkeeper.KeyInfo, now time.Time) keyView {
	return keyView{ID: k.Key.ID, Description: k.Key.Description, CreatedBy: createdBy(k.Key.CreatedBy),
		Status: k.Key.Status(now), Admin: k.Key.Admin, CreatedAt: k.Key.CreatedAt, ExpiresAt: k.Key.ExpiresAt,
		LastUsedAt: k.Key.LastUsedAt, RevokedAt: k.Key.RevokedAt, MaxNodes: k.Key.MaxNodes, Held: k.NodesHeld,
		Quota: k.Quota, Cooling: k.NodesCooling, QuotaDefault: k.QuotaDefault}
}

// createdBy words APIKey.CreatedBy.
func createdBy(s string) string {
	switch s {
	case "":
		return "unknown"
	case idkeeper.CreatedByCLI:
		return "command line"
	case idkeeper.CreatedByEnv:
		return "environment"
	}
	return s
}

// keysView is the data of the keys page.
type keysView struct {
	Keys           []keyView
	MaxDescription int
	MaxNodes       int
	Form           url.Values // the create form as sent, after a failure
}

func (h *Handler) keysPage(w http.ResponseWriter, r *http.Request, p *principal) {
	h.renderKeys(w, r, p, http.StatusOK, "", nil)
}

func (h *Handler) renderKeys(w http.ResponseWriter, r *http.Request, p *principal, status int, errMsg string, form url.Values) {
	keys, err := h.reg.Keys(r.Context())
	if err != nil {
		h.pageError(w, r, p, err)
		return
	}
	now := h.reg.Now()
	kv := keysView{MaxDescription: apikey.MaxDescriptionLen, MaxNodes: h.reg.Config().Nodes, Form: form}
	for _, k := range keys {
		kv.Keys = append(kv.Keys, keyViewOf(k, now))
	}
	v := h.baseView(w, r, p, "API keys", "keys")
	v.Error, v.P = errMsg, kv
	h.render(w, r, status, "keys", v)
}

// optionalInt reads an optional non-negative integer field of a form: ok is
// false when it is empty.
func optionalInt(form url.Values, field string) (n int, ok bool, err error) {
	s := strings.TrimSpace(form.Get(field))
	if s == "" {
		return 0, false, nil
	}
	n, err = strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false, protocol.Invalidf(field, "%q is not a whole number of 0 or more", s)
	}
	return n, true, nil
}

// keyCreatePost creates a key through the API and sends the browser to the
// page that shows its secret once (keyCreatedPage): the secret travels sealed
// under the session in a cookie of /admin/keys/ (webform.go), never in a URL.
func (h *Handler) keyCreatePost(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, p, err)
		return
	}
	f := r.PostForm
	req := wire.CreateAPIKeyRequest{Description: f.Get("description")}
	fail := func(err error) {
		status, msg := errorText(err)
		h.renderKeys(w, r, p, status, msg, f)
	}
	if s := strings.TrimSpace(f.Get("expiresAt")); s != "" {
		t, err := parseLocalTime("expiresAt", s)
		if err != nil {
			fail(err)
			return
		}
		req.ExpiresAt = wire.FormatTime(t)
	}
	n, _, err := optionalInt(f, "maxNodes")
	if err != nil {
		fail(err)
		return
	}
	req.MaxNodes = n
	req.Admin = f.Get("admin") != "" // offered to admins only; the API refuses it to anyone else
	out, err := h.callAPI(w, r, p, h.createKey, req)
	if err != nil {
		fail(err)
		return
	}
	res, ok := out.(wire.CreateAPIKeyResponse)
	if !ok {
		h.pageError(w, r, p, fmt.Errorf("admin: createKey answered %T", out))
		return
	}
	h.setSecretCookie(w, sealSecret(p.token, res.Key.ID, res.Secret))
	h.redirect(w, r, "/admin/keys/"+url.PathEscape(res.Key.ID)+"/created", "API key "+res.Key.ID+" was created.")
}

// keyCreatedPage shows a new key and, on the first load after its create
// only, its secret (takeSecret); a reload says that it was shown.
func (h *Handler) keyCreatedPage(w http.ResponseWriter, r *http.Request, p *principal) {
	id := r.PathValue("id")
	k, err := h.reg.Key(r.Context(), id)
	if err != nil {
		h.pageError(w, r, p, err)
		return
	}
	v := h.baseView(w, r, p, "API key created", "keys")
	v.P = struct {
		Key    keyView
		Secret string
	}{keyViewOf(k, h.reg.Now()), h.takeSecret(w, r, p, k.Key.ID)}
	h.render(w, r, http.StatusOK, "keycreated", v)
}

// keyPageView is the data of a key's page.
type keyPageView struct {
	Key          keyView
	ExpiresInput string
	MaxNodes     int
}

func (h *Handler) keyPage(w http.ResponseWriter, r *http.Request, p *principal) {
	h.renderKey(w, r, p, http.StatusOK, "")
}

func (h *Handler) renderKey(w http.ResponseWriter, r *http.Request, p *principal, status int, errMsg string) {
	k, err := h.reg.Key(r.Context(), r.PathValue("id"))
	if err != nil {
		h.pageError(w, r, p, err)
		return
	}
	kv := keyViewOf(k, h.reg.Now())
	v := h.baseView(w, r, p, "API key "+kv.ID, "keys")
	v.Error = errMsg
	v.P = keyPageView{Key: kv, ExpiresInput: localTimeValue(kv.ExpiresAt), MaxNodes: h.reg.Config().Nodes}
	h.render(w, r, status, "key", v)
}

// keyUpdatePost sets a key's expiry (empty: never) and quota through the API.
func (h *Handler) keyUpdatePost(w http.ResponseWriter, r *http.Request, p *principal) {
	id := r.PathValue("id")
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, p, err)
		return
	}
	fail := func(err error) {
		status, msg := errorText(err)
		h.renderKey(w, r, p, status, msg)
	}
	req := map[string]any{"expiresAt": nil}
	if s := strings.TrimSpace(r.PostForm.Get("expiresAt")); s != "" {
		t, err := parseLocalTime("expiresAt", s)
		if err != nil {
			fail(err)
			return
		}
		req["expiresAt"] = wire.FormatTime(t)
	}
	if n, ok, err := optionalInt(r.PostForm, "maxNodes"); err != nil {
		fail(err)
		return
	} else if ok {
		req["maxNodes"] = n
	} else {
		req["maxNodes"] = 0
	}
	if _, err := h.callAPI(w, r, p, h.updateKey, req, "id", id); err != nil {
		fail(err)
		return
	}
	h.redirect(w, r, "/admin/keys/"+url.PathEscape(id), "The expiry and the quota of key "+id+" were saved.")
}

// keyRevokePost revokes a key through the API and says what becomes of its
// leases.
func (h *Handler) keyRevokePost(w http.ResponseWriter, r *http.Request, p *principal) {
	id := r.PathValue("id")
	out, err := h.callAPI(w, r, p, h.revokeKey, struct{}{}, "id", id)
	if err != nil {
		status, msg := errorText(err)
		h.renderKey(w, r, p, status, msg)
		return
	}
	msg := "Key " + id + " was revoked."
	if res, ok := out.(wire.RevokeAPIKeyResponse); ok && res.Leases != "" {
		msg = "Key " + id + " was revoked: " + res.Leases + "."
	}
	h.redirect(w, r, "/admin/keys/"+url.PathEscape(id), msg)
}

// ---- IP allow-list

// allowView is the data of the allow-list page.
type allowView struct {
	Floor, Proxies []netip.Prefix
	Entries        []allowlist.Entry
	AllowsAll      bool
	LastOpens      bool // one entry, no floor: removing it allows every address
	Refresh        time.Duration
	MaxNote        int
	Form           url.Values
}

func (h *Handler) allowPage(w http.ResponseWriter, r *http.Request, p *principal) {
	h.renderAllow(w, r, p, http.StatusOK, "", nil)
}

func (h *Handler) renderAllow(w http.ResponseWriter, r *http.Request, p *principal, status int, errMsg string, form url.Values) {
	es, err := h.store.AllowEntries(r.Context())
	if err != nil {
		h.pageError(w, r, p, storeErr(err))
		return
	}
	av := allowView{Floor: h.allow.Floor(), Proxies: slices.Clone(h.cfg.TrustedProxies), Entries: es,
		AllowsAll: len(es) == 0 && len(h.allow.Floor()) == 0, LastOpens: len(es) == 1 && len(h.allow.Floor()) == 0, Refresh: allowlist.DefaultRefresh,
		MaxNote: allowlist.MaxNoteLen, Form: form}
	v := h.baseView(w, r, p, "IP allow-list", "allowlist")
	v.Error, v.P = errMsg, av
	h.render(w, r, status, "allowlist", v)
}

func (h *Handler) allowAddPost(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, p, err)
		return
	}
	out, err := h.callAPI(w, r, p, h.addAllowEntry, wire.AddAllowEntryRequest{Prefix: r.PostForm.Get("prefix"), Note: r.PostForm.Get("note")})
	if err != nil {
		status, msg := errorText(err)
		h.renderAllow(w, r, p, status, msg, r.PostForm)
		return
	}
	msg := "The entry was added."
	if e, ok := out.(wire.AllowEntry); ok {
		msg = e.Prefix + " was added to the allow-list."
	}
	h.redirect(w, r, "/admin/allowlist", msg)
}

func (h *Handler) allowRemovePost(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, p, err)
		return
	}
	prefix := r.PostForm.Get("prefix")
	req := map[string]any{"prefix": prefix}
	if r.PostForm.Get("allowAll") == "true" {
		req["allowAll"] = true
	}
	if _, err := h.callAPI(w, r, p, h.removeAllowEntry, req); err != nil {
		status, msg := errorText(err)
		h.renderAllow(w, r, p, status, msg, nil)
		return
	}
	h.redirect(w, r, "/admin/allowlist", prefix+" was removed from the allow-list.")
}
