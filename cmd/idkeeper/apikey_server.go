package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	idkclient "github.com/idkeeper/idkeeper/client"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// serverKeysTimeout bounds one request to the admin API.
const serverKeysTimeout = 30 * time.Second

// serverKeys are the keys of a running registry server, managed through its admin
// API (idkhttp.AdminPrefix) with an admin API key: what works while the server
// holds a bolt file.
type serverKeys struct {
	base string // the server's base URL, without a trailing slash
	key  string // the admin API key; "": the session of a login (the client's cookie jar)
	hc   *http.Client
}

// newServerKeys checks the server URL and the admin key and makes the HTTP client
// (newAdminClient).
func newServerKeys(server, caFile, key string) (*serverKeys, error) {
	b, err := newAdminClient(server, caFile)
	if err != nil {
		return nil, err
	}
	if key == "" {
		return nil, usagef("--server needs an admin API key: set %s or %s_FILE, or give --admin-api-key-file", AdminKeyEnv, AdminKeyEnv)
	}
	b.key = key
	return b, nil
}

// newAdminClient checks the server URL and makes the HTTP client of the admin
// API, without credentials yet: it trusts caFile's CAs besides the system's,
// keeps the session cookie of a login, and follows no redirect (the key travels
// in X-API-Key, which net/http would hand to whatever host a redirect names).
func newAdminClient(server, caFile string) (*serverKeys, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--server %q: want the registry's http:// or https:// base URL", server)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		if tr.TLSClientConfig, err = idkclient.CABundle(caFile); err != nil {
			return nil, usagef("--server-ca-file: %v", err)
		}
	}
	jar, _ := cookiejar.New(nil) // never fails without options
	hc := &http.Client{Transport: tr, Timeout: serverKeysTimeout, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &serverKeys{base: strings.TrimRight(server, "/"), hc: hc}, nil
}

func (b *serverKeys) Close() error {
	b.hc.CloseIdleConnections()
	return nil
}

func (b *serverKeys) create(ctx context.Context, desc string, expires time.Duration, maxNodes int, admin bool) (string, keyRow, error) {
	req := wire.CreateAPIKeyRequest{Description: desc, MaxNodes: maxNodes, Admin: admin}
	if expires > 0 {
		req.ExpiresIn = expires.String()
	}
	var ans wire.CreateAPIKeyResponse
	if err := b.do(ctx, http.MethodPost, "keys", req, http.StatusCreated, &ans); err != nil {
		return "", keyRow{}, err
	}
	switch {
	case ans.Secret == "" && ans.Message != "":
		return "", keyRow{}, fmt.Errorf("key %s: %s", ans.Key.ID, ans.Message) // a replay: the secret was shown before
	case ans.Secret == "":
		return "", keyRow{}, fmt.Errorf("the server's answer holds no key")
	}
	row, err := rowFromWire(ans.Key)
	return ans.Secret, row, err
}

func (b *serverKeys) list(ctx context.Context) ([]keyRow, error) {
	var ans wire.APIKeyList
	if err := b.do(ctx, http.MethodGet, "keys", nil, http.StatusOK, &ans); err != nil {
		return nil, err
	}
	rows := make([]keyRow, len(ans.Keys))
	for i, k := range ans.Keys {
		var err error
		if rows[i], err = rowFromWire(k); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

func (b *serverKeys) revoke(ctx context.Context, id string) (keyRow, bool, error) {
	var ans wire.RevokeAPIKeyResponse
	err := b.do(ctx, http.MethodPost, "keys/"+url.PathEscape(id)+"/revoke", nil, http.StatusOK, &ans)
	if ae := (*adminError)(nil); errors.As(err, &ae) && ae.code == protocol.CodeNotFound {
		return keyRow{}, false, errNoKey
	}
	if err != nil {
		return keyRow{}, false, err
	}
	row, err := rowFromWire(ans.Key)
	return row, ans.AlreadyRevoked, err
}

// adminError is an error answer of the admin API.
type adminError struct {
	status int
	code   idkeeper.Code
	detail string
}

func (e *adminError) Error() string {
	if e.code == "" {
		return fmt.Sprintf("the server answered %d %s", e.status, http.StatusText(e.status))
	}
	return fmt.Sprintf("the server answered %d %s: %s", e.status, e.code, e.detail)
}

// do sends a request to the admin route path with body as JSON (none when nil) and
// decodes an answer of status want into out (nil: no body expected); any other
// answer is an *adminError.
func (b *serverKeys) do(ctx context.Context, method, path string, body any, want int, out any) error {
	return b.doWith(ctx, method, path, nil, body, want, out)
}

// doWith is do with the extra request headers hdr.
func (b *serverKeys) doWith(ctx context.Context, method, path string, hdr http.Header, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		payload, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+idkhttp.AdminPrefix+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if b.key != "" {
		req.Header.Set(idkhttp.APIKeyHeader, b.key)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return fmt.Errorf("reach the server: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("read the server's answer: %w", err)
	}
	if resp.StatusCode != want {
		return answerError(resp, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the server's answer is not the expected JSON: %w", err)
	}
	return nil
}

// rowFromWire is a key of the admin API as apikey list shows it: the same row as
// the store gives.
func rowFromWire(k wire.APIKey) (keyRow, error) {
	created, err := wire.ParseTime(k.CreatedAt)
	if err != nil {
		return keyRow{}, fmt.Errorf("the server's answer: key %s: createdAt: %w", k.ID, err)
	}
	opt := func(name string, s *string) (*time.Time, error) {
		if s == nil {
			return nil, nil
		}
		t, err := wire.ParseTime(*s)
		if err != nil {
			return nil, fmt.Errorf("the server's answer: key %s: %s: %w", k.ID, name, err)
		}
		return &t, nil
	}
	row := keyRow{ID: k.ID, Description: k.Description, Status: k.Status, Bootstrap: k.Bootstrap, Admin: k.Admin,
		CreatedAt: created, MaxNodes: k.MaxNodes, NodesHeld: k.NodesHeld}
	if row.ExpiresAt, err = opt("expiresAt", k.ExpiresAt); err != nil {
		return keyRow{}, err
	}
	if row.LastUsedAt, err = opt("lastUsedAt", k.LastUsedAt); err != nil {
		return keyRow{}, err
	}
	if row.RevokedAt, err = opt("revokedAt", k.RevokedAt); err != nil {
		return keyRow{}, err
	}
	return row, nil
}

// answerError is the *adminError of an answer the caller did not want: its
// status, and the problem's code and detail when the body is problem+json; a
// redirect says where to point --server instead.
func answerError(resp *http.Response, data []byte) *adminError {
	e := &adminError{status: resp.StatusCode}
	var p wire.Problem
	if strings.Contains(resp.Header.Get("Content-Type"), "json") && json.Unmarshal(data, &p) == nil {
		e.code, e.detail = idkeeper.Code(p.Code), p.Detail
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		e.detail = "redirected to " + resp.Header.Get("Location") + "; give --server the registry's own address"
	}
	return e
}
