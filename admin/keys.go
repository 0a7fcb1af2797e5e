package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/jsonbody"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The API key routes (issue #20, moved here from package http, and issue #10's
// update). No answer but a create's ever holds a secret; none holds a hash.

var (
	createKeyMembers = wire.Members(wire.CreateAPIKeyRequest{})
	updateKeyMembers = wire.Members(wire.UpdateAPIKeyRequest{})
)

// maxExpiresIn bounds expiresIn: a hundred years.
const maxExpiresIn = 100 * 365 * 24 * time.Hour

// expiresIn reads the member expiresIn: a positive duration from now.
func expiresIn(m jsonbody.Members, now time.Time) (*time.Time, error) {
	in, err := m.String("", "expiresIn")
	if err != nil || in == "" {
		return nil, err
	}
	d, err := time.ParseDuration(in)
	if err != nil || d <= 0 || d > maxExpiresIn {
		return nil, protocol.Invalidf("expiresIn", "expiresIn must be a positive duration such as \"720h\", "+
			"at most %s; leave it out for a key that never expires", maxExpiresIn)
	}
	at := now.Add(d)
	return &at, nil
}

// decodeCreateKey decodes the body of POST /admin/api/keys; an expiresIn counts
// from now. What the body cannot tell (a description that is empty or too long, a
// quota above the pool, an expiry in the past) apikey.Create checks.
func decodeCreateKey(body []byte, now time.Time) (apikey.Spec, error) {
	m, err := jsonbody.Decode(body, createKeyMembers)
	if err != nil {
		return apikey.Spec{}, err
	}
	var spec apikey.Spec
	if spec.Description, err = m.String("", "description"); err != nil {
		return apikey.Spec{}, err
	}
	in, err := expiresIn(m, now)
	if err != nil {
		return apikey.Spec{}, err
	}
	at, err := m.OptionalTime("", "expiresAt")
	if err != nil {
		return apikey.Spec{}, err
	}
	switch {
	case in != nil && at != nil:
		return apikey.Spec{}, protocol.Invalidf("expiresIn", "give expiresIn or expiresAt, not both")
	case in != nil:
		spec.ExpiresAt = *in
	case at != nil:
		spec.ExpiresAt = *at
	}
	n, _, err := m.Int("", "maxNodes", 0, protocol.MaxCount)
	if err != nil {
		return apikey.Spec{}, err
	}
	spec.MaxNodes = int(n)
	if spec.Admin, _, err = m.Bool("", "admin"); err != nil {
		return apikey.Spec{}, err
	}
	return spec, nil
}

// decodeUpdateKey decodes the body of POST /admin/api/keys/{id}: expiresAt (a
// time, or null: never), or expiresIn (from now), and maxNodes; at least one.
func decodeUpdateKey(body []byte, now time.Time) (idkeeper.KeyUpdate, error) {
	m, nulls, err := jsonbody.DecodeNulls(body, updateKeyMembers)
	if err != nil {
		return idkeeper.KeyUpdate{}, err
	}
	var u idkeeper.KeyUpdate
	if u.ExpiresAt, err = m.OptionalTime("", "expiresAt"); err != nil {
		return idkeeper.KeyUpdate{}, err
	}
	if nulls["expiresAt"] {
		u.ExpiresAt = &time.Time{}
	}
	in, err := expiresIn(m, now)
	switch {
	case err != nil:
		return idkeeper.KeyUpdate{}, err
	case in != nil && u.ExpiresAt != nil:
		return idkeeper.KeyUpdate{}, protocol.Invalidf("expiresIn", "give expiresIn or expiresAt, not both")
	case in != nil:
		u.ExpiresAt = in
	}
	if n, ok, err := m.Int("", "maxNodes", 0, protocol.MaxCount); err != nil {
		return idkeeper.KeyUpdate{}, err
	} else if ok {
		q := int(n)
		u.MaxNodes = &q
	}
	if u.ExpiresAt == nil && u.MaxNodes == nil {
		return idkeeper.KeyUpdate{}, protocol.Invalidf("body", "give expiresAt (a time, or null: never), expiresIn or maxNodes")
	}
	return u, nil
}

// keyJSON is k as the admin API shows it at now.
func keyJSON(k idkeeper.KeyInfo, now time.Time) wire.APIKey {
	return wire.APIKey{ID: k.Key.ID, Description: k.Key.Description, Status: k.Key.Status(now), Bootstrap: k.Key.Bootstrap,
		Admin: k.Key.Admin, CreatedAt: wire.FormatTime(k.Key.CreatedAt), CreatedBy: k.Key.CreatedBy,
		ExpiresAt: optTime(k.Key.ExpiresAt), LastUsedAt: optTime(k.Key.LastUsedAt), RevokedAt: optTime(k.Key.RevokedAt),
		MaxNodes: k.Key.MaxNodes, NodesHeld: k.NodesHeld,
		EffectiveMaxNodes: k.Quota, MaxNodesIsDefault: k.QuotaDefault, NodesCooling: k.NodesCooling}
}

// expiry is a key's expiry for logs and the audit log.
func expiry(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return wire.FormatTime(t)
}

func (h *Handler) listKeys(_ http.ResponseWriter, r *http.Request, _ *principal) (any, error) {
	keys, err := h.reg.Keys(r.Context())
	if err != nil {
		return nil, err
	}
	now := h.reg.Now()
	out := wire.APIKeyList{Keys: make([]wire.APIKey, len(keys))}
	for i, k := range keys {
		out.Keys[i] = keyJSON(k, now)
	}
	return out, nil
}

func (h *Handler) getKey(_ http.ResponseWriter, r *http.Request, _ *principal) (any, error) {
	k, err := h.reg.Key(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return keyJSON(k, h.reg.Now()), nil
}

// KeyCreateReplayed is the message of a replayed key create (keyCreateCodec).
const KeyCreateReplayed = "this key was created by an earlier request with this Idempotency-Key; its secret was " +
	"shown in that request's answer only and is stored nowhere: if it was lost, revoke this key and create a new one"

// keyCreateCodec stores the answer of a key create without its secret: a 2xx is
// stored as its key record alone (wire.APIKey), and replayed as the key with
// "secretShown": false and KeyCreateReplayed, never with the secret, which is
// kept nowhere. Other answers (problems) hold no secret and are stored as they
// are. A record whose key cannot be read is not replayed (503).
var keyCreateCodec = &idempotency.Codec{
	Name: "admin.keys.create/1",
	Encode: func(status int, _ http.Header, body []byte) ([]byte, bool) {
		if status < 200 || status > 299 {
			return nil, false
		}
		var res wire.CreateAPIKeyResponse
		if err := json.Unmarshal(body, &res); err != nil {
			return []byte("{}"), true // never the body: it may hold the secret
		}
		b, err := json.Marshal(res.Key)
		if err != nil {
			return []byte("{}"), true
		}
		return b, true
	},
	Decode: func(stored []byte) ([]byte, error) {
		var k wire.APIKey
		if err := json.Unmarshal(stored, &k); err != nil {
			return nil, err
		}
		if k.ID == "" {
			return nil, errors.New("the stored key create holds no key")
		}
		b, err := json.Marshal(wire.CreateAPIKeyResponse{Key: k, Message: KeyCreateReplayed})
		return append(b, '\n'), err
	},
}

// createKey makes a key, created by the caller; an admin key ("admin": true)
// only for an admin (403 FORBIDDEN, nothing made). Its answer holds the secret
// ("secretShown": true), the only time any answer does. A create retried with its
// Idempotency-Key (Config.Idempotency) is not run again: it gets the key as it
// was created, without the secret (keyCreateCodec).
func (h *Handler) createKey(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	body, err := jsonbody.Read(w, r, h.cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	spec, err := decodeCreateKey(body, h.reg.Now())
	if err != nil {
		return nil, err
	}
	if err := p.mayCreateKey(spec.Admin); err != nil {
		return nil, err
	}
	spec.CreatedBy = p.actor
	secret, k, err := h.keys.Create(r.Context(), spec)
	if err != nil {
		return nil, err
	}
	detail := fmt.Sprintf("description %q, admin %t, expires %s, maxNodes %d", k.Description, k.Admin, expiry(k.ExpiresAt), k.MaxNodes)
	h.log.Info("API key created through the admin API", "keyId", k.ID, "description", k.Description, "admin", k.Admin,
		"expiresAt", expiry(k.ExpiresAt), "maxNodes", k.MaxNodes, "by", p.actor, "remoteIp", p.remote)
	h.audit(r.Context(), audit.Entry{Actor: p.actor, Action: audit.KeyCreate, Target: "key:" + k.ID, Detail: detail})
	return created{
		location: APIPrefix + "keys/" + url.PathEscape(k.ID),
		body:     wire.CreateAPIKeyResponse{Key: keyJSON(h.keys.NewInfo(k), h.reg.Now()), Secret: secret, SecretShown: true},
	}, nil
}

// updateKey sets a key's expiry and quota (Registry.UpdateKey); an admin key's
// only for an admin (mayManageKey: 403 FORBIDDEN).
func (h *Handler) updateKey(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	body, err := jsonbody.Read(w, r, h.cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	u, err := decodeUpdateKey(body, h.reg.Now())
	if err != nil {
		return nil, err
	}
	if err := h.mayManageKey(r.Context(), p, r.PathValue("id"), "change"); err != nil {
		return nil, err
	}
	k, err := h.keys.Update(r.Context(), r.PathValue("id"), u)
	if err != nil {
		return nil, err
	}
	var parts []string
	if u.ExpiresAt != nil {
		parts = append(parts, "expires "+expiry(k.Key.ExpiresAt))
	}
	if u.MaxNodes != nil {
		parts = append(parts, fmt.Sprintf("maxNodes %d", k.Key.MaxNodes))
	}
	h.audit(r.Context(), audit.Entry{Actor: p.actor, Action: audit.KeyUpdate, Target: "key:" + k.Key.ID,
		Detail: strings.Join(parts, ", ")})
	return keyJSON(k, h.reg.Now()), nil
}

// revokeKey revokes a key, and says what becomes of its leases; an admin key
// only for an admin (mayManageKey: 403 FORBIDDEN).
func (h *Handler) revokeKey(_ http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	if err := h.mayManageKey(r.Context(), p, r.PathValue("id"), "revoke"); err != nil {
		return nil, err
	}
	k, already, err := h.keys.Revoke(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	leases := leasesOfRevoked(k.NodesHeld)
	if !already {
		h.log.Info("API key revoked through the admin API", "keyId", k.Key.ID, "description", k.Key.Description,
			"nodesHeld", k.NodesHeld, "by", p.actor, "remoteIp", p.remote)
		h.audit(r.Context(), audit.Entry{Actor: p.actor, Action: audit.KeyRevoke, Target: "key:" + k.Key.ID,
			Detail: fmt.Sprintf("description %q; %s", k.Key.Description, leases)})
	}
	return wire.RevokeAPIKeyResponse{Key: keyJSON(k, h.reg.Now()), AlreadyRevoked: already, Leases: leases}, nil
}

// leasesOfRevoked says what becomes of the n node IDs a revoked key's leases hold.
func leasesOfRevoked(n int) string {
	switch n {
	case 0:
		return "it holds no node IDs"
	case 1:
		return "its 1 node ID stays held until its lease expires; the holder cannot renew, " +
			"and the node ID returns to the pool after the grace period"
	}
	return fmt.Sprintf("its %d node IDs stay held until their leases expire; holders cannot renew, "+
		"and the node IDs return to the pool after the grace period", n)
}
