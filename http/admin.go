package http

import (
	"net/http"
	"net/url"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// AdminPrefix starts the routes of the admin API: managing the registry while it
// runs. Every admin route takes an admin API key (idkeeper.APIKey.Admin) in
// X-API-Key; the allow-list applies as on /v1. Answers and errors are those of
// /v1: JSON bodies decoded strictly, problem+json errors with a code.
//
//	GET  /admin/api/keys              200 wire.APIKeyList
//	POST /admin/api/keys              201 wire.CreateAPIKeyResponse (the secret, shown once), Location
//	GET  /admin/api/keys/{id}         200 wire.APIKey
//	POST /admin/api/keys/{id}/revoke  200 wire.RevokeAPIKeyResponse
//
// Errors besides those of every authenticated route: 403 ADMIN_KEY_REQUIRED for a
// key that is not an admin key, 404 NOT_FOUND for an unknown key ID, 400
// INVALID_REQUEST for a bad body.
const AdminPrefix = "/admin/api/"

func (s *Server) adminRoutes(mux *http.ServeMux) {
	mux.Handle("GET "+AdminPrefix+"keys", s.authed(s.listKeys, true))
	mux.Handle("POST "+AdminPrefix+"keys", s.authed(s.createKey, true))
	mux.Handle("GET "+AdminPrefix+"keys/{id}", s.authed(s.getKey, true))
	mux.Handle("POST "+AdminPrefix+"keys/{id}/revoke", s.authed(s.revokeKey, true))
}

// createKeyMembers are the members a create body may have.
var createKeyMembers = wire.Members(wire.CreateAPIKeyRequest{})

// maxExpiresIn bounds expiresIn: a hundred years.
const maxExpiresIn = 100 * 365 * 24 * time.Hour

// decodeCreateKey decodes the body of POST /admin/api/keys; an expiresIn counts
// from now. What the body cannot tell (a description that is empty or too long, a
// quota above the pool) idkeeper.CreateKey checks.
func decodeCreateKey(body []byte, now time.Time) (idkeeper.KeySpec, error) {
	m, err := decodeBody(body, createKeyMembers)
	if err != nil {
		return idkeeper.KeySpec{}, err
	}
	var spec idkeeper.KeySpec
	if spec.Description, err = stringMember(m, "", "description"); err != nil {
		return idkeeper.KeySpec{}, err
	}
	in, err := stringMember(m, "", "expiresIn")
	if err != nil {
		return idkeeper.KeySpec{}, err
	}
	at, err := optionalTimeMember(m, "", "expiresAt")
	if err != nil {
		return idkeeper.KeySpec{}, err
	}
	switch {
	case in != "" && at != nil:
		return idkeeper.KeySpec{}, idkeeper.Invalidf("expiresIn", "give expiresIn or expiresAt, not both")
	case in != "":
		d, err := time.ParseDuration(in)
		if err != nil || d <= 0 || d > maxExpiresIn {
			return idkeeper.KeySpec{}, idkeeper.Invalidf("expiresIn", "expiresIn must be a positive duration such as \"720h\", "+
				"at most %s; leave it out for a key that never expires", maxExpiresIn)
		}
		spec.ExpiresAt = now.Add(d)
	case at != nil:
		spec.ExpiresAt = *at
	}
	n, _, err := intMember(m, "", "maxNodes", 0, idkeeper.MaxCount)
	if err != nil {
		return idkeeper.KeySpec{}, err
	}
	spec.MaxNodes = int(n)
	if raw, ok := m["admin"]; ok {
		switch string(raw) {
		case "true":
			spec.Admin = true
		case "false":
		default:
			return idkeeper.KeySpec{}, idkeeper.Invalidf("admin", "admin must be true or false")
		}
	}
	return spec, nil
}

// keyJSON is k as the admin API shows it at now.
func keyJSON(k idkeeper.KeyInfo, now time.Time) wire.APIKey {
	opt := func(t time.Time) *string {
		if t.IsZero() {
			return nil
		}
		s := wire.FormatTime(t)
		return &s
	}
	return wire.APIKey{ID: k.Key.ID, Description: k.Key.Description, Status: k.Key.Status(now), Bootstrap: k.Key.Bootstrap,
		Admin: k.Key.Admin, CreatedAt: wire.FormatTime(k.Key.CreatedAt), ExpiresAt: opt(k.Key.ExpiresAt),
		LastUsedAt: opt(k.Key.LastUsedAt), RevokedAt: opt(k.Key.RevokedAt), MaxNodes: k.Key.MaxNodes, NodesHeld: k.NodesHeld}
}

func (s *Server) listKeys(_ http.ResponseWriter, r *http.Request, _ caller) (any, error) {
	keys, err := s.reg.Keys(r.Context())
	if err != nil {
		return nil, err
	}
	now := s.reg.Now()
	out := wire.APIKeyList{Keys: make([]wire.APIKey, len(keys))}
	for i, k := range keys {
		out.Keys[i] = keyJSON(k, now)
	}
	return out, nil
}

func (s *Server) getKey(_ http.ResponseWriter, r *http.Request, _ caller) (any, error) {
	k, err := s.reg.Key(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return keyJSON(k, s.reg.Now()), nil
}

// createKey makes a key. It takes no Idempotency-Key: replaying the answer would
// mean keeping the secret, which only the caller ever sees; a create retried
// after a lost answer makes a second key, which `apikey list` shows.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request, c caller) (any, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	spec, err := decodeCreateKey(body, s.reg.Now())
	if err != nil {
		return nil, err
	}
	secret, k, err := s.reg.CreateKey(r.Context(), spec)
	if err != nil {
		return nil, err
	}
	expiry := "never"
	if !k.ExpiresAt.IsZero() {
		expiry = wire.FormatTime(k.ExpiresAt)
	}
	s.log.Info("API key created through the admin API", "keyId", k.ID, "description", k.Description, "admin", k.Admin,
		"expiresAt", expiry, "maxNodes", k.MaxNodes, "byKeyId", c.key.ID, "remoteIp", c.remoteIP)
	return created{
		location: AdminPrefix + "keys/" + url.PathEscape(k.ID),
		body:     wire.CreateAPIKeyResponse{Key: keyJSON(idkeeper.KeyInfo{Key: k}, s.reg.Now()), Secret: secret},
	}, nil
}

func (s *Server) revokeKey(_ http.ResponseWriter, r *http.Request, c caller) (any, error) {
	k, already, err := s.reg.RevokeKey(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if !already {
		s.log.Info("API key revoked through the admin API", "keyId", k.Key.ID, "description", k.Key.Description,
			"nodesHeld", k.NodesHeld, "byKeyId", c.key.ID, "remoteIp", c.remoteIP)
	}
	return wire.RevokeAPIKeyResponse{Key: keyJSON(k, s.reg.Now()), AlreadyRevoked: already}, nil
}
