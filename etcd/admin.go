package etcd

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/protocol"
)

// The records of the admin web (account.Store): accounts, sessions and the
// allow-list here, the audit log in audit.go. Each change is one transaction
// conditioned on the revisions of the keys it read.

var _ account.Store = (*Store)(nil)

// Bounds of the limit arguments of the audit reads and of PruneAudit.
const (
	maxAuditPage  = 1000
	maxAuditPrune = 10000
)

// adminBatch is the most keys one transaction of a multi-transaction admin change
// (PruneAudit, DeleteUserSessions, PruneSessions) deletes: under etcd's default
// --max-txn-ops with its compares.
const adminBatch = 100

// userRec is the JSON of an account. Times are UTC milliseconds.
type userRec struct {
	Role              string    `json:"role"`
	PasswordHash      string    `json:"passwordHash,omitempty"`
	Disabled          bool      `json:"disabled,omitempty"`
	CreatedAt         time.Time `json:"createdAt"`
	CreatedBy         string    `json:"createdBy,omitempty"`
	Epoch             uint64    `json:"epoch"`
	PasswordChangedAt time.Time `json:"passwordChangedAt"`
	LastLoginAt       time.Time `json:"lastLoginAt"`
	Webhook           string    `json:"webhook,omitempty"`
	Version           uint64    `json:"version"`
}

func encodeUser(u account.User) (string, error) {
	return jsonString(userRec{Role: string(u.Role), PasswordHash: u.PasswordHash, Disabled: u.Disabled,
		CreatedAt: protocol.Millis(u.CreatedAt), CreatedBy: u.CreatedBy, Epoch: u.Epoch,
		PasswordChangedAt: protocol.Millis(u.PasswordChangedAt), LastLoginAt: protocol.Millis(u.LastLoginAt),
		Webhook: u.Webhook, Version: u.Version})
}

func decodeUser(name string, v []byte) (account.User, error) {
	var r userRec
	if err := json.Unmarshal(v, &r); err != nil {
		return account.User{}, fmt.Errorf("etcd: corrupt user record %q: %w", name, err)
	}
	return account.User{Name: name, Role: account.Role(r.Role), PasswordHash: r.PasswordHash, Disabled: r.Disabled,
		CreatedAt: r.CreatedAt.UTC(), CreatedBy: r.CreatedBy, Epoch: r.Epoch, PasswordChangedAt: r.PasswordChangedAt.UTC(),
		LastLoginAt: r.LastLoginAt.UTC(), Webhook: r.Webhook, Version: r.Version}, nil
}

// createIfAbsent puts key only when it was never created (or was deleted);
// ErrConflict when it exists.
func (s *Store) createIfAbsent(ctx context.Context, op, key, val string, more ...clientv3.Op) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tr, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(append([]clientv3.Op{clientv3.OpPut(key, val)}, more...)...).Commit()
	if err != nil {
		return wrap(op, err)
	}
	if !tr.Succeeded {
		return idkeeper.ErrConflict
	}
	return nil
}

// CreateUser implements account.Store.
func (s *Store) CreateUser(ctx context.Context, u account.User) error {
	u.Version = 1
	rec, err := encodeUser(u)
	if err != nil {
		return fmt.Errorf("etcd: user: %w", err)
	}
	return s.createIfAbsent(ctx, "create user", s.k.user+u.Name, rec)
}

// User implements account.Store.
func (s *Store) User(ctx context.Context, name string) (account.User, error) {
	return getRecord(ctx, s, "user", s.k.user, name, decodeUser)
}

// Users implements account.Store: one range read, in key (name) order.
func (s *Store) Users(ctx context.Context) ([]account.User, error) {
	return getRecords(ctx, s, "users", s.k.user, decodeUser)
}

// UpdateUser implements account.Store: compare and set on the record's key,
// the stored Version checked against u.Version.
func (s *Store) UpdateUser(ctx context.Context, u account.User) error {
	return s.cas(ctx, "update user", s.k.user+u.Name, func(v []byte, ok bool) (casOp, string, error) {
		if !ok {
			return casKeep, "", idkeeper.ErrNotFound
		}
		cur, err := decodeUser(u.Name, v)
		if err != nil {
			return casKeep, "", err
		}
		if cur.Version != u.Version {
			return casKeep, "", idkeeper.ErrConflict
		}
		nu := u
		nu.Version++
		rec, err := encodeUser(nu)
		return casPut, rec, err
	})
}

// CountUsers implements account.Store: a count of the user range.
func (s *Store) CountUsers(ctx context.Context) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.k.user, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, wrap("count users", err)
	}
	return int(resp.Count), nil
}

// sessionRec is the JSON of a session; times are Unix ms.
type sessionRec struct {
	User      string `json:"user"`
	Epoch     uint64 `json:"epoch"`
	CreatedAt int64  `json:"createdAt"`
	SeenAt    int64  `json:"seenAt"`
	ExpiresAt int64  `json:"expiresAt"`
	RemoteIP  string `json:"remoteIP,omitempty"`
	UserAgent string `json:"userAgent,omitempty"`
}

func encodeSession(a account.Session) (string, error) {
	return jsonString(sessionRec{User: a.User, Epoch: a.Epoch, CreatedAt: timeMs(a.CreatedAt), SeenAt: timeMs(a.SeenAt),
		ExpiresAt: timeMs(a.ExpiresAt), RemoteIP: a.RemoteIP, UserAgent: a.UserAgent})
}

func decodeSession(id string, v []byte) (account.Session, error) {
	var r sessionRec
	if err := json.Unmarshal(v, &r); err != nil {
		return account.Session{}, fmt.Errorf("etcd: corrupt session record %q: %w", id, err)
	}
	return account.Session{ID: id, User: r.User, Epoch: r.Epoch, CreatedAt: msTime(r.CreatedAt),
		SeenAt: msTime(r.SeenAt), ExpiresAt: msTime(r.ExpiresAt), RemoteIP: r.RemoteIP, UserAgent: r.UserAgent}, nil
}

// The index keys of a session: by user, by SeenAt, by ExpiresAt.
func (k keys) userSessionKey(user, id string) string { return k.userSession + user + "/" + id }
func (k keys) sessionSeenKey(ms int64, id string) string {
	return k.sessionSeen + hexTime(ms) + "/" + id
}
func (k keys) sessionExpKey(ms int64, id string) string {
	return k.sessionExp + hexTime(ms) + "/" + id
}

// sessionIndex returns the puts (or deletes) of the index entries of a.
func (s *Store) sessionIndex(a account.Session, put bool) []clientv3.Op {
	ks := []string{s.k.userSessionKey(a.User, a.ID), s.k.sessionSeenKey(timeMs(a.SeenAt), a.ID),
		s.k.sessionExpKey(timeMs(a.ExpiresAt), a.ID)}
	ops := make([]clientv3.Op, len(ks))
	for i, k := range ks {
		if put {
			ops[i] = clientv3.OpPut(k, "")
		} else {
			ops[i] = clientv3.OpDelete(k)
		}
	}
	return ops
}

// CreateSession implements account.Store: the record and its index entries
// in one transaction, on the condition that the ID was never used.
func (s *Store) CreateSession(ctx context.Context, a account.Session) error {
	a.CreatedAt, a.SeenAt, a.ExpiresAt = protocol.Millis(a.CreatedAt), protocol.Millis(a.SeenAt), protocol.Millis(a.ExpiresAt)
	rec, err := encodeSession(a)
	if err != nil {
		return fmt.Errorf("etcd: session: %w", err)
	}
	return s.createIfAbsent(ctx, "create session", s.k.session+a.ID, rec, s.sessionIndex(a, true)...)
}

// Session implements account.Store.
func (s *Store) Session(ctx context.Context, id string) (account.Session, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.k.session+id)
	if err != nil {
		return account.Session{}, wrap("session", err)
	}
	if len(resp.Kvs) == 0 {
		return account.Session{}, idkeeper.ErrNotFound
	}
	return decodeSession(id, resp.Kvs[0].Value)
}

// changeSession reads session id and, when change returns ops, commits them on
// the condition that the record is unchanged since; else it starts over, a
// bounded number of times. change sees ok false for a missing session.
func (s *Store) changeSession(ctx context.Context, op, id string, change func(a account.Session, ok bool) ([]clientv3.Op, error)) error {
	return s.casOps(ctx, op, s.k.session+id, func(v []byte, ok bool) ([]clientv3.Op, error) {
		var a account.Session
		if ok {
			var err error
			if a, err = decodeSession(id, v); err != nil {
				return nil, err
			}
		}
		return change(a, ok)
	})
}

// TouchSession implements account.Store.
func (s *Store) TouchSession(ctx context.Context, id string, at time.Time) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	at = protocol.Millis(at)
	return s.changeSession(ctx, "touch session", id, func(a account.Session, ok bool) ([]clientv3.Op, error) {
		if !ok || !at.After(a.SeenAt) {
			return nil, nil
		}
		old := timeMs(a.SeenAt)
		a.SeenAt = at
		rec, err := encodeSession(a)
		return []clientv3.Op{clientv3.OpPut(s.k.session+id, rec), clientv3.OpDelete(s.k.sessionSeenKey(old, id)),
			clientv3.OpPut(s.k.sessionSeenKey(timeMs(at), id), "")}, err
	})
}

// deleteSession deletes session id when want accepts it; deleted says whether it
// did.
func (s *Store) deleteSession(ctx context.Context, op, id string, want func(account.Session) bool) (deleted bool, err error) {
	err = s.changeSession(ctx, op, id, func(a account.Session, ok bool) ([]clientv3.Op, error) {
		deleted = ok && (want == nil || want(a))
		if !deleted {
			return nil, nil
		}
		return append(s.sessionIndex(a, false), clientv3.OpDelete(s.k.session+id)), nil
	})
	return deleted && err == nil, err
}

// DeleteSession implements account.Store.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.deleteSession(ctx, "delete session", id, nil)
	return err
}

// indexIDs reads the last path element of every key of the range [from, end).
func (s *Store) indexIDs(ctx context.Context, op, from, end string) ([]string, error) {
	resp, err := s.c.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly())
	if err != nil {
		return nil, wrap(op, err)
	}
	out := make([]string, len(resp.Kvs))
	for i, e := range resp.Kvs {
		k := string(e.Key)
		out[i] = k[strings.LastIndexByte(k, '/')+1:]
	}
	return out, nil
}

// DeleteUserSessions implements account.Store: a transaction per session,
// each conditioned on the session's record.
func (s *Store) DeleteUserSessions(ctx context.Context, user string) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	from := s.k.userSession + user + "/"
	ids, err := s.indexIDs(ctx, "delete user sessions", from, clientv3.GetPrefixRangeEnd(from))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		ok, err := s.deleteSession(ctx, "delete user sessions", id, func(a account.Session) bool { return a.User == user })
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// PruneSessions implements account.Store: the candidates are read from the
// expiry and SeenAt indexes, and each is deleted in a transaction of its own
// conditioned on its record, judged again on the record.
func (s *Store) PruneSessions(ctx context.Context, now time.Time, idle time.Duration) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	nowMs := timeMs(now)
	idleMs := idle.Milliseconds()
	expired, err := s.indexIDs(ctx, "prune sessions", s.k.sessionExp, before(s.k.sessionExp, nowMs+1))
	if err != nil {
		return 0, err
	}
	stale, err := s.indexIDs(ctx, "prune sessions", s.k.sessionSeen, before(s.k.sessionSeen, nowMs-idleMs+1))
	if err != nil {
		return 0, err
	}
	due := func(a account.Session) bool {
		return timeMs(a.ExpiresAt) <= nowMs || timeMs(a.SeenAt)+idleMs <= nowMs
	}
	n := 0
	seen := map[string]bool{}
	for _, id := range append(expired, stale...) {
		if seen[id] {
			continue
		}
		seen[id] = true
		ok, err := s.deleteSession(ctx, "prune sessions", id, due)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// allowKeyOf is the key of the masked prefix p: family (0 IPv4, 1 IPv6), the
// 16-byte address (IPv4 in its 4-in-6 form) and the length, in hex, so that key
// order is netip's order: by address, then by prefix length.
func (s *Store) allowKeyOf(p netip.Prefix) string {
	b := make([]byte, 0, 18)
	b = append(b, boolByte(!p.Addr().Is4()))
	a := p.Addr().As16()
	b = append(b, a[:]...)
	b = append(b, byte(p.Bits()))
	return s.k.allow + hex.EncodeToString(b)
}

// allowRec is the JSON of an allow-list entry.
type allowRec struct {
	Prefix    string `json:"prefix"`
	Note      string `json:"note,omitempty"`
	CreatedBy string `json:"createdBy,omitempty"`
	CreatedAt int64  `json:"createdAt"`
}

func allowPrefix(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return netip.Prefix{}, protocol.Invalidf("prefix", "not an IP prefix")
	}
	return p.Masked(), nil
}

func encodeAllow(e allowlist.Entry) (string, error) {
	return jsonString(allowRec{Prefix: e.Prefix.String(), Note: e.Note, CreatedBy: e.CreatedBy, CreatedAt: timeMs(e.CreatedAt)})
}

func decodeAllow(v []byte) (allowlist.Entry, error) {
	var r allowRec
	if err := json.Unmarshal(v, &r); err != nil {
		return allowlist.Entry{}, fmt.Errorf("etcd: corrupt allow-list entry: %w", err)
	}
	p, err := netip.ParsePrefix(r.Prefix)
	if err != nil {
		return allowlist.Entry{}, fmt.Errorf("etcd: corrupt allow-list entry: %w", err)
	}
	return allowlist.Entry{Prefix: p, Note: r.Note, CreatedBy: r.CreatedBy, CreatedAt: msTime(r.CreatedAt)}, nil
}

// AddAllowEntry implements account.Store. An invalid prefix is an
// INVALID_REQUEST error.
func (s *Store) AddAllowEntry(ctx context.Context, e allowlist.Entry) error {
	p, err := allowPrefix(e.Prefix)
	if err != nil {
		return err
	}
	e.Prefix = p
	rec, err := encodeAllow(e)
	if err != nil {
		return fmt.Errorf("etcd: allow-list entry: %w", err)
	}
	return s.createIfAbsent(ctx, "add allow-list entry", s.allowKeyOf(p), rec)
}

// RemoveAllowEntry implements account.Store. An invalid prefix is an
// INVALID_REQUEST error.
func (s *Store) RemoveAllowEntry(ctx context.Context, p netip.Prefix) error {
	p, err := allowPrefix(p)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Delete(ctx, s.allowKeyOf(p))
	if err != nil {
		return wrap("remove allow-list entry", err)
	}
	if resp.Deleted == 0 {
		return idkeeper.ErrNotFound
	}
	return nil
}

// AllowEntries implements account.Store: one range read; key order is the
// contract's order.
func (s *Store) AllowEntries(ctx context.Context) ([]allowlist.Entry, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.k.allow, clientv3.WithPrefix())
	if err != nil {
		return nil, wrap("allow-list", err)
	}
	out := make([]allowlist.Entry, 0, len(resp.Kvs))
	for _, e := range resp.Kvs {
		a, err := decodeAllow(e.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
