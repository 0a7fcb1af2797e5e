package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/protocol"
)

// The records of the admin web (account.Store): accounts and sessions here,
// the allow-list in allowlist.go, the audit log in audit.go. Their keys are in the
// package doc. The account.Store takes every time as an argument: no method reads the
// store clock.

var _ account.Store = (*Store)(nil)

var (
	scriptUserUpdate        = plainScript("user_update")
	scriptSessionCreate     = plainScript("session_create")
	scriptSessionTouch      = plainScript("session_touch")
	scriptSessionDelete     = plainScript("session_delete")
	scriptSessionDeleteUser = plainScript("session_delete_user")
	scriptSessionPrune      = plainScript("session_prune")
)

// Key names of the admin records, after "{prefix}:".
const (
	keyUsers         = "users"
	keySessions      = "sessions"
	keySessionSeen   = "session-seen"
	keySessionExpiry = "session-expiry"
	keySessionUser   = "session-user:" // + user name
	keyAllowList     = "allowlist"
	keyAudit         = "audit"
	keyAuditSeq      = "audit-seq"
	keyAuditHead     = "audit-head"
)

// maxAdminRecord bounds the JSON of one admin record, written or read: a longer
// one is refused (written) or reported corrupt (read) before it is decoded.
const maxAdminRecord = 64 << 10

// pruneBatch is the most sessions or audit entries one prune script deletes.
const pruneBatch = 256

// adminKey is the key name under the store's hash tag.
func (s *Store) adminKey(name string) string {
	return strings.TrimSuffix(s.keys.meta, "meta") + name
}

// sessionKeys are the KEYS every session script starts with, then the user's set.
func (s *Store) sessionKeys(user string) []string {
	return []string{s.adminKey(keySessions), s.adminKey(keySessionSeen), s.adminKey(keySessionExpiry),
		s.adminKey(keySessionUser + user)}
}

// encodeRecord is v's JSON, refused with an INVALID_REQUEST error past maxAdminRecord.
func encodeRecord(what string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("redis: %s: %w", what, err)
	}
	if len(b) > maxAdminRecord {
		return "", protocol.Invalidf(what, "the %s record is %d bytes, more than the %d a store keeps", what, len(b), maxAdminRecord)
	}
	return string(b), nil
}

// decodeRecord decodes the JSON record of what id into v; a record too long or not
// JSON is an error.
func decodeRecord(what, id, rec string, v any) error {
	if len(rec) > maxAdminRecord {
		return fmt.Errorf("redis: malformed %s %q: %d bytes", what, id, len(rec))
	}
	if err := json.Unmarshal([]byte(rec), v); err != nil {
		return fmt.Errorf("redis: malformed %s %q: %w", what, id, err)
	}
	return nil
}

// userRecord is the JSON of one account in the users hash, keyed by name. Times
// are Unix ms (ms: Go's zero time is its own value).
type userRecord struct {
	Role              account.Role `json:"role"`
	PasswordHash      string       `json:"passwordHash"`
	Disabled          bool         `json:"disabled,omitempty"`
	CreatedAt         int64        `json:"createdAt"`
	CreatedBy         string       `json:"createdBy,omitempty"`
	Epoch             uint64       `json:"epoch"`
	PasswordChangedAt int64        `json:"passwordChangedAt"`
	LastLoginAt       int64        `json:"lastLoginAt"`
	Version           uint64       `json:"version"`
	Webhook           string       `json:"webhook,omitempty"`
}

func encodeUser(u account.User) (string, error) {
	return encodeRecord("user", userRecord{Role: u.Role, PasswordHash: u.PasswordHash, Disabled: u.Disabled,
		CreatedAt: ms(u.CreatedAt), CreatedBy: u.CreatedBy, Epoch: u.Epoch, PasswordChangedAt: ms(u.PasswordChangedAt),
		LastLoginAt: ms(u.LastLoginAt), Version: u.Version, Webhook: u.Webhook})
}

func decodeUser(name, rec string) (account.User, error) {
	var r userRecord
	if err := decodeRecord("user", name, rec, &r); err != nil {
		return account.User{}, err
	}
	if r.Version == 0 {
		return account.User{}, fmt.Errorf("redis: malformed user %q: no version", name)
	}
	return account.User{Name: name, Role: r.Role, PasswordHash: r.PasswordHash, Disabled: r.Disabled,
		CreatedAt: fromMs(r.CreatedAt), CreatedBy: r.CreatedBy, Epoch: r.Epoch, PasswordChangedAt: fromMs(r.PasswordChangedAt),
		LastLoginAt: fromMs(r.LastLoginAt), Version: r.Version, Webhook: r.Webhook}, nil
}

// CreateUser stores u with Version 1; ErrConflict when the name exists, an
// INVALID_REQUEST error when it is empty.
func (s *Store) CreateUser(ctx context.Context, u account.User) error {
	if u.Name == "" {
		return protocol.Invalidf("name", "an account needs a name")
	}
	u.Version = 1
	rec, err := encodeUser(u)
	if err != nil {
		return err
	}
	created, err := s.client.HSetNX(ctx, s.adminKey(keyUsers), u.Name, rec).Result()
	if err != nil {
		return fmt.Errorf("redis: create user: %w", err)
	}
	if !created {
		return idkeeper.ErrConflict
	}
	return nil
}

// User returns the account with that name; ErrNotFound when there is none.
func (s *Store) User(ctx context.Context, name string) (account.User, error) {
	u, _, err := s.user(ctx, name)
	return u, err
}

// user returns the account and its record as stored.
func (s *Store) user(ctx context.Context, name string) (account.User, string, error) {
	rec, err := s.client.HGet(ctx, s.adminKey(keyUsers), name).Result()
	if errors.Is(err, goredis.Nil) {
		return account.User{}, "", idkeeper.ErrNotFound
	}
	if err != nil {
		return account.User{}, "", fmt.Errorf("redis: user: %w", err)
	}
	u, err := decodeUser(name, rec)
	return u, rec, err
}

// Users returns every account, sorted by name: one HGETALL, O(n) for n accounts.
func (s *Store) Users(ctx context.Context) ([]account.User, error) {
	m, err := s.client.HGetAll(ctx, s.adminKey(keyUsers)).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: users: %w", err)
	}
	out := make([]account.User, 0, len(m))
	for name, rec := range m {
		u, err := decodeUser(name, rec)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b account.User) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// UpdateUser replaces the account u.Name with u and Version u.Version + 1 when the
// stored Version is u.Version. It reads the record, checks the Version, and a
// script replaces the record only when it is still the one read: every update
// raises the Version, so a record changed meanwhile is ErrConflict.
func (s *Store) UpdateUser(ctx context.Context, u account.User) error {
	cur, old, err := s.user(ctx, u.Name)
	if err != nil {
		return err
	}
	if cur.Version != u.Version {
		return idkeeper.ErrConflict
	}
	if u.Version == math.MaxUint64 {
		return fmt.Errorf("redis: update user %q: its version is at its maximum", u.Name)
	}
	u.Version++
	rec, err := encodeUser(u)
	if err != nil {
		return err
	}
	v, err := s.run(ctx, scriptUserUpdate, []string{s.adminKey(keyUsers)}, false, u.Name, old, rec)
	if err != nil {
		return wrap("update user", err)
	}
	switch v {
	case int64(1):
		return nil
	case int64(-1):
		return idkeeper.ErrNotFound
	}
	return idkeeper.ErrConflict
}

// CountUsers returns how many accounts exist (HLEN).
func (s *Store) CountUsers(ctx context.Context) (int, error) {
	n, err := s.client.HLen(ctx, s.adminKey(keyUsers)).Result()
	if err != nil {
		return 0, fmt.Errorf("redis: count users: %w", err)
	}
	return int(n), nil
}

// sessionRecord is the JSON of one session in the sessions hash, keyed by ID.
// SeenAt is not in it: the seen zset holds it, so TouchSession is one ZADD.
type sessionRecord struct {
	User      string `json:"user"`
	Epoch     uint64 `json:"epoch"`
	CreatedAt int64  `json:"createdAt"`
	ExpiresAt int64  `json:"expiresAt"`
	RemoteIP  string `json:"remoteIp,omitempty"`
	UserAgent string `json:"userAgent,omitempty"`
}

func decodeSession(id, rec string) (account.Session, error) {
	var r sessionRecord
	if err := decodeRecord("session", id, rec, &r); err != nil {
		return account.Session{}, err
	}
	return account.Session{ID: id, User: r.User, Epoch: r.Epoch, CreatedAt: fromMs(r.CreatedAt),
		ExpiresAt: fromMs(r.ExpiresAt), RemoteIP: r.RemoteIP, UserAgent: r.UserAgent}, nil
}

// CreateSession stores s; ErrConflict when its ID exists, an INVALID_REQUEST
// error when it is empty.
func (s *Store) CreateSession(ctx context.Context, sess account.Session) error {
	if sess.ID == "" {
		return protocol.Invalidf("id", "a session needs an ID")
	}
	rec, err := encodeRecord("session", sessionRecord{User: sess.User, Epoch: sess.Epoch, CreatedAt: ms(sess.CreatedAt),
		ExpiresAt: ms(sess.ExpiresAt), RemoteIP: sess.RemoteIP, UserAgent: sess.UserAgent})
	if err != nil {
		return err
	}
	v, err := s.run(ctx, scriptSessionCreate, s.sessionKeys(sess.User), false, sess.ID, rec,
		ms(sess.SeenAt), ms(sess.ExpiresAt))
	if err != nil {
		return wrap("create session", err)
	}
	if v != int64(1) {
		return idkeeper.ErrConflict
	}
	return nil
}

// Session returns the session with that ID; ErrNotFound when there is none. Its
// record and SeenAt are read in one MULTI.
func (s *Store) Session(ctx context.Context, id string) (account.Session, error) {
	var get *goredis.StringCmd
	var seen *goredis.FloatCmd
	_, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		get = p.HGet(ctx, s.adminKey(keySessions), id)
		seen = p.ZScore(ctx, s.adminKey(keySessionSeen), id)
		return nil
	})
	rec, err2 := get.Result()
	if errors.Is(err2, goredis.Nil) {
		return account.Session{}, idkeeper.ErrNotFound
	}
	if err2 != nil {
		return account.Session{}, fmt.Errorf("redis: session: %w", err2)
	}
	if err != nil && !errors.Is(err, goredis.Nil) {
		return account.Session{}, fmt.Errorf("redis: session: %w", err)
	}
	sess, err := decodeSession(id, rec)
	if err != nil {
		return account.Session{}, err
	}
	score, err := seen.Result()
	if err != nil {
		return account.Session{}, fmt.Errorf("redis: malformed session %q: no seen time: %w", id, err)
	}
	at, ok := scoreMs(score)
	if !ok {
		return account.Session{}, fmt.Errorf("redis: malformed session %q: seen time %v", id, score)
	}
	sess.SeenAt = fromMs(at)
	return sess, nil
}

// scoreMs is a zset score that holds Unix ms, when it is a whole number a time
// can hold.
func scoreMs(f float64) (int64, bool) {
	const limit = 1 << 53 // exact in a float64, and far beyond any time.Time in ms
	if f != math.Trunc(f) || f < -limit || f > limit {
		return 0, false
	}
	return int64(f), true
}

// TouchSession raises the session's SeenAt to at (never lowers it); a missing
// session is no error.
func (s *Store) TouchSession(ctx context.Context, id string, at time.Time) error {
	if _, err := s.run(ctx, scriptSessionTouch, []string{s.adminKey(keySessionSeen)}, false, id, ms(at)); err != nil {
		return wrap("touch session", err)
	}
	return nil
}

// DeleteSession deletes the session; a missing one is no error. It reads the
// record for the user's set, then a script deletes the session if the record is
// still the one read.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	for range 10 {
		rec, err := s.client.HGet(ctx, s.adminKey(keySessions), id).Result()
		if errors.Is(err, goredis.Nil) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("redis: delete session: %w", err)
		}
		sess, err := decodeSession(id, rec)
		if err != nil {
			return err
		}
		v, err := s.run(ctx, scriptSessionDelete, s.sessionKeys(sess.User), false, id, rec)
		if err != nil {
			return wrap("delete session", err)
		}
		if v != int64(-1) {
			return nil
		}
	}
	return fmt.Errorf("redis: delete session %q: the record kept changing", id)
}

// DeleteUserSessions deletes every session of the user, by the user's set of
// session IDs, and returns how many: one script, O(k log n) for k of n sessions.
func (s *Store) DeleteUserSessions(ctx context.Context, user string) (int, error) {
	v, err := s.run(ctx, scriptSessionDeleteUser, s.sessionKeys(user), false)
	if err != nil {
		return 0, wrap("delete user sessions", err)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("redis: delete user sessions: reply %v", v)
	}
	return int(n), nil
}

// PruneSessions deletes the sessions whose ExpiresAt is not after now or whose
// SeenAt + idle is not after now, and returns how many. It scans nothing: the seen
// and expiry zsets give the candidates, pruneBatch at a time, and a script deletes
// those that still end, so it costs O(k log n) for k of n sessions.
func (s *Store) PruneSessions(ctx context.Context, now time.Time, idle time.Duration) (int, error) {
	// Times are whole ms: seenAt + idle <= now exactly when seenAt <= ⌊now - idle⌋.
	cutoff := strconv.FormatInt(now.Add(-idle).UnixMilli(), 10)
	nowMs := strconv.FormatInt(now.UnixMilli(), 10)
	total := 0
	for range 100000 {
		ids, err := s.pruneCandidates(ctx, cutoff, nowMs)
		if err != nil || len(ids) == 0 {
			return total, err
		}
		recs, err := s.client.HMGet(ctx, s.adminKey(keySessions), ids...).Result()
		if err != nil {
			return total, fmt.Errorf("redis: prune sessions: %w", err)
		}
		keys := s.sessionKeys("")[:3]
		args := []any{cutoff, nowMs}
		for i, id := range ids {
			rec, _ := recs[i].(string)
			key := keys[0] // no record: the script only drops the index entries
			if rec != "" {
				sess, err := decodeSession(id, rec)
				if err != nil {
					return total, err
				}
				key = s.adminKey(keySessionUser + sess.User)
			}
			keys = append(keys, key)
			args = append(args, id, rec)
		}
		v, err := s.run(ctx, scriptSessionPrune, keys, false, args...)
		if err != nil {
			return total, wrap("prune sessions", err)
		}
		r, _ := v.([]any)
		if len(r) != 2 {
			return total, fmt.Errorf("redis: prune sessions: reply %v", v)
		}
		deleted, _ := r[0].(int64)
		dropped, _ := r[1].(int64)
		total += int(deleted)
		if deleted+dropped == 0 {
			return total, nil // every candidate was touched meanwhile
		}
	}
	return total, fmt.Errorf("redis: prune sessions: sessions keep ending")
}

// pruneCandidates are up to pruneBatch IDs by seen time and as many by expiry.
func (s *Store) pruneCandidates(ctx context.Context, cutoff, nowMs string) ([]string, error) {
	idle, err := s.client.ZRangeByScore(ctx, s.adminKey(keySessionSeen),
		&goredis.ZRangeBy{Min: "-inf", Max: cutoff, Count: pruneBatch}).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: prune sessions: %w", err)
	}
	expired, err := s.client.ZRangeByScore(ctx, s.adminKey(keySessionExpiry),
		&goredis.ZRangeBy{Min: "-inf", Max: nowMs, Count: pruneBatch}).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: prune sessions: %w", err)
	}
	ids := append(idle, expired...)
	slices.Sort(ids)
	return slices.Compact(ids), nil
}
