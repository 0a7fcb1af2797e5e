package admin

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/protocol"
)

// One-time form tokens (issue #30): every state-changing form of the pages
// carries a hidden field formToken, drawn for the page's session, and its POST
// follows post/redirect/get. The token is a random nonce and its HMAC under the
// session's cookie token, so no replica needs to have issued it: any replica that
// sees the session's cookie can check it, and a token of another session is
// refused. Its first POST with a valid token runs the form's handler through the
// idempotency.Service of the admin API (Config.Idempotency), keyed by the caller
// and the nonce, so it is consumed atomically in the store the replicas share:
//
//   - the first POST runs; when the handler answers 303 (done), the redirect and
//     its one-shot flash message are stored under the token; any other answer (the
//     page again with what was wrong) stores nothing, and the token stays usable;
//   - the same token again with the same form (a double click, a resubmit) runs
//     nothing: it is sent to the same result, its message saying the form was
//     sent twice and the change made once; while the first still runs it waits for
//     it (up to half of Config.Timeout), then says the first is still being
//     carried out;
//   - the same token with other values (an old page edited and sent again): 409,
//     "reload the page", nothing done.
//
// Login, logout, the restore upload (its preview changes nothing; its
// confirmation has a token) and the webhook test message (a user's test messages
// are spaced 10 s apart) take no token. Without Config.Idempotency a token is
// checked but not consumed.

// formTokenField is the hidden field of the token.
const formTokenField = "formToken"

// formOp names the forms' records in the Idempotency-Key scope; secretOp the
// one-shot display of a new key's secret.
const (
	formOp   = "admin.web.form"
	secretOp = "admin.web.secret"
)

// secretCookie carries a new key's secret, sealed (sealSecret), from the create
// form's redirect to the page that shows it once.
const secretCookie = "idkeeper_secret"

// sessionKey derives a key of purpose from the session's cookie token: the store
// holds only the token's hash (account.SessionID), so it cannot derive it.
func sessionKey(session, purpose string) []byte {
	m := hmac.New(sha256.New, []byte(session))
	m.Write([]byte("idkeeper admin " + purpose + " v1"))
	return m.Sum(nil)
}

// newFormToken returns a fresh token for the forms of a page drawn for session:
// 32 hex digits of nonce, a dot, and 22 base64url characters of its HMAC.
func newFormToken(session string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	n := hex.EncodeToString(b[:])
	return n + "." + formMAC(session, n)
}

func formMAC(session, nonce string) string {
	m := hmac.New(sha256.New, sessionKey(session, "form token"))
	m.Write([]byte(nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// checkFormToken returns the nonce of tok when it was drawn for session.
func checkFormToken(session, tok string) (string, bool) {
	n, mac, ok := strings.Cut(tok, ".")
	if !ok || len(n) != 32 || len(mac) != 22 || session == "" {
		return "", false
	}
	if _, err := hex.DecodeString(n); err != nil {
		return "", false
	}
	return n, hmac.Equal([]byte(mac), []byte(formMAC(session, n)))
}

// formDone is what the store keeps of a form's POST that was carried out: where
// it redirected, its flash message and, for a key create, the sealed secret.
type formDone struct {
	Location string `json:"location"`
	Flash    string `json:"flash,omitempty"`
	Secret   string `json:"secret,omitempty"` // secretCookie's value, sealed under the session
}

// sentTwice ends the flash message of a form sent again with its token.
const sentTwice = " (This form was sent twice: the change was made once.)"

// errFormToken is the answer to a form POST without a valid token.
var errFormToken = protocol.Errorf(protocol.CodeInvalidRequest,
	"This form has no valid form token (it was drawn for another session, or is older than your login): "+
		"reload the page and send the form again.")

// errFormReused is the answer to a token sent again with other values.
var errFormReused = protocol.Errorf(protocol.CodeConflict,
	"This form was already sent, with other values: its change was made once. Reload the page to send new values.")

// formPollEvery is how often a form sent again asks whether its first submit is done.
const formPollEvery = 50 * time.Millisecond

// once wraps a form's handler fn in its one-time token (see above); lockFor is
// how long the first submit holds the token (0: the Service's LockFor).
func (h *Handler) once(lockFor time.Duration, fn pageFunc) pageFunc {
	return func(w http.ResponseWriter, r *http.Request, p *principal) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
		if err != nil {
			h.pageError(w, r, p, protocol.Errorf(protocol.CodeBodyTooLarge, "The form is larger than %d bytes.", h.cfg.MaxBodyBytes))
			return
		}
		form, err := url.ParseQuery(string(body))
		if err != nil {
			h.pageError(w, r, p, protocol.Invalidf("body", "The form could not be read: %v", err))
			return
		}
		nonce, ok := checkFormToken(p.token, form.Get(formTokenField))
		if !ok {
			h.pageError(w, r, p, errFormToken)
			return
		}
		restore := func(r *http.Request) *http.Request {
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			return r
		}
		svc := h.cfg.Idempotency
		if svc == nil {
			fn(w, restore(r), p)
			return
		}
		// The change is made even if the browser gives up on this answer (a
		// double click does): its record is what the second submit gets.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.Timeout)
		defer cancel()
		var fresh *pageRecorder
		run := func(context.Context) idempotency.Response {
			rec := &pageRecorder{w: w, header: http.Header{}}
			fn(rec, restore(r.WithContext(ctx)), p)
			fresh = rec
			if rec.status != http.StatusSeeOther {
				return idempotency.Response{Status: http.StatusBadRequest} // not done: the token stays usable
			}
			b, _ := json.Marshal(rec.done())
			return idempotency.Response{Status: http.StatusSeeOther, Body: b}
		}
		scope := idempotency.Scope(p.actor, formOp, nonce)
		fp := idempotency.Fingerprint(r.Method, idempotency.Target(r.URL), body)
		opts := []idempotency.Option{idempotency.OwnedBy(idempotency.Owner(p.actor, formOp)), idempotency.LockFor(lockFor)}
		// Half the request timeout: the answer must go out before the page's own
		// deadline (page) ends the request.
		waitUntil := time.Now().Add(h.cfg.Timeout / 2)
		for {
			res, err := svc.Do(ctx, scope, fp, run, opts...)
			switch {
			case err == nil && res.Replayed:
				h.replayForm(w, r, p, res.Body)
			case err == nil:
				fresh.send(w)
			case protocol.ErrorCode(err) == idempotency.CodeInProgress && time.Now().Before(waitUntil):
				t := time.NewTimer(formPollEvery)
				select {
				case <-r.Context().Done():
					t.Stop()
					waitUntil = time.Time{}
				case <-t.C:
				}
				continue
			case protocol.ErrorCode(err) == idempotency.CodeInProgress:
				h.redirect(w, r, formBack(r), "Your first submit of this form is still being carried out: it makes "+
					"the change once. Reload this page in a while to see its result.")
			case protocol.ErrorCode(err) == idempotency.CodeKeyReused:
				h.pageError(w, r, p, errFormReused)
			default:
				h.pageError(w, r, p, err)
			}
			return
		}
	}
}

// replayForm answers a form sent again: the first submit's redirect, with its
// message and a note, and the sealed secret of a key create again (not yet
// shown when the browser gave up on the first answer).
func (h *Handler) replayForm(w http.ResponseWriter, r *http.Request, p *principal, stored []byte) {
	var d formDone
	if err := json.Unmarshal(stored, &d); err != nil || !strings.HasPrefix(d.Location, pagePrefix) {
		h.pageError(w, r, p, idkeeper.Unavailable(errors.New("admin: unreadable form record")))
		return
	}
	if d.Secret != "" {
		h.setSecretCookie(w, d.Secret)
	}
	h.redirect(w, r, d.Location, d.Flash+sentTwice)
}

// formBack is the page a form was sent from (its Referer, when it is a page of
// this admin web), else the leases page.
func formBack(r *http.Request) string {
	u, err := url.Parse(r.Referer())
	if err != nil || u.Host != r.Host {
		return homePath
	}
	return safeNext(u.RequestURI())
}

// pageRecorder buffers a form handler's answer, so that once decides what is
// stored before anything is sent.
type pageRecorder struct {
	w      http.ResponseWriter // the real one: deadlines (backupContext) go to it
	header http.Header
	status int
	body   bytes.Buffer
}

func (rec *pageRecorder) Header() http.Header { return rec.header }

func (rec *pageRecorder) WriteHeader(code int) {
	if rec.status == 0 {
		rec.status = code
	}
}

func (rec *pageRecorder) Write(b []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.body.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (rec *pageRecorder) Unwrap() http.ResponseWriter { return rec.w }

// send writes the buffered answer to w.
func (rec *pageRecorder) send(w http.ResponseWriter) {
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}

// done is the record of a 303: its Location and the flash and secret cookies it set.
func (rec *pageRecorder) done() formDone {
	d := formDone{Location: rec.header.Get("Location")}
	for _, line := range rec.header.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err != nil || c.MaxAge < 0 {
			continue
		}
		switch c.Name {
		case flashCookie:
			d.Flash = decodeFlash(c.Value)
		case secretCookie:
			d.Secret = c.Value
		}
	}
	return d
}

// ---- a new key's secret, shown once

// sealSecret seals a new key's secret under the session (AES-256-GCM, the key ID
// as associated data) with a fresh display nonce: "NONCE.SEALED". Only a request
// with the session's cookie can open it; the store never holds it in the clear.
func sealSecret(session, keyID, secret string) string {
	var n [16]byte
	_, _ = rand.Read(n[:])
	nonce := hex.EncodeToString(n[:])
	aead := sessionAEAD(session)
	iv := make([]byte, aead.NonceSize())
	_, _ = rand.Read(iv)
	ct := aead.Seal(iv, iv, []byte(secret), []byte(keyID+"\x00"+nonce))
	return nonce + "." + base64.RawURLEncoding.EncodeToString(ct)
}

// openSecret opens a sealSecret value of keyID: its display nonce and the secret.
func openSecret(session, keyID, v string) (nonce, secret string, ok bool) {
	nonce, s, ok := strings.Cut(v, ".")
	if !ok || len(nonce) != 32 || len(s) > 512 {
		return "", "", false
	}
	ct, err := base64.RawURLEncoding.DecodeString(s)
	aead := sessionAEAD(session)
	if err != nil || len(ct) < aead.NonceSize() {
		return "", "", false
	}
	pt, err := aead.Open(nil, ct[:aead.NonceSize()], ct[aead.NonceSize():], []byte(keyID+"\x00"+nonce))
	if err != nil {
		return "", "", false
	}
	return nonce, string(pt), true
}

func sessionAEAD(session string) cipher.AEAD {
	b, err := aes.NewCipher(sessionKey(session, "key secret"))
	if err != nil {
		panic(err) // a 32-byte key always makes a cipher
	}
	aead, err := cipher.NewGCM(b)
	if err != nil {
		panic(err)
	}
	return aead
}

// setSecretCookie sends the sealed secret for the page that shows it (5 min at most).
func (h *Handler) setSecretCookie(w http.ResponseWriter, sealed string) {
	http.SetCookie(w, &http.Cookie{Name: secretCookie, Value: sealed, Path: "/admin/keys/", MaxAge: 300, HttpOnly: true,
		Secure: h.cfg.TLS, SameSite: http.SameSiteStrictMode})
}

// takeSecret returns the secret of keyID that r's cookie carries, once: the
// cookie is cleared, and its display nonce is consumed in the store (a second
// page with the same cookie, on any replica, gets ""). The secret is never
// logged.
func (h *Handler) takeSecret(w http.ResponseWriter, r *http.Request, p *principal, keyID string) string {
	c, err := r.Cookie(secretCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: secretCookie, Value: "", Path: "/admin/keys/", MaxAge: -1, HttpOnly: true,
		Secure: h.cfg.TLS, SameSite: http.SameSiteStrictMode})
	nonce, secret, ok := openSecret(p.token, keyID, c.Value)
	if !ok {
		return ""
	}
	if svc := h.cfg.Idempotency; svc != nil {
		res, err := svc.Do(r.Context(), idempotency.Scope(p.actor, secretOp, nonce), "shown",
			func(context.Context) idempotency.Response { return idempotency.Response{Status: http.StatusOK} },
			idempotency.OwnedBy(idempotency.Owner(p.actor, secretOp)))
		if err != nil || res.Replayed {
			return ""
		}
	}
	return secret
}
