package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/protocol"
)

var _ account.Store = (*Store)(nil)

// maxSessionKey bounds a session ID, well under bbolt's key limit with the user
// index prefix.
const maxSessionKey = 1024

// encodeUser is role | passwordHash | disabled u8 | createdAt | createdBy | epoch |
// passwordChangedAt | lastLoginAt | version [| webhook]. The webhook came later:
// it is written only when set, so the record of a user without one is the record
// older builds wrote and read.
func encodeUser(u account.User) []byte {
	w := newRec(64 + len(u.Role) + len(u.PasswordHash) + len(u.CreatedBy) + len(u.Webhook))
	w = w.str(string(u.Role)).str(u.PasswordHash).flag(u.Disabled).ms(timeMs(u.CreatedAt)).str(u.CreatedBy)
	w = w.u64(u.Epoch).ms(timeMs(u.PasswordChangedAt)).ms(timeMs(u.LastLoginAt)).u64(u.Version)
	if u.Webhook != "" {
		w = w.str(u.Webhook)
	}
	return w
}

func decodeUser(name string, v []byte) (account.User, error) {
	r := readRec(fmt.Sprintf("user %q", name), v)
	u := account.User{Name: name, Role: account.Role(r.str()), PasswordHash: r.str(), Disabled: r.flag(),
		CreatedAt: msTime(r.ms()), CreatedBy: r.str(), Epoch: r.u64(), PasswordChangedAt: msTime(r.ms()),
		LastLoginAt: msTime(r.ms()), Version: r.u64()}
	if r.more() {
		if u.Webhook = r.str(); u.Webhook == "" {
			r.fail("empty webhook") // never written: an unset one is left out
		}
	}
	if err := r.end(); err != nil {
		return account.User{}, err
	}
	return u, nil
}

// more reports whether fields follow: the optional ones at the end of a record
// that older builds wrote without them.
func (r *recReader) more() bool { return r.err == nil && len(r.b) > 0 }

// CreateUser implements account.Store. It checks no more of u than a bbolt
// key needs (the caller checks account.ValidUserName): an empty name, or one over
// bbolt.MaxKeySize bytes, is an INVALID_REQUEST error.
func (s *Store) CreateUser(ctx context.Context, u account.User) error {
	if u.Name == "" || len(u.Name) > bbolt.MaxKeySize {
		return protocol.Invalidf("name", "an account needs a name of 1 to %d bytes", bbolt.MaxKeySize)
	}
	u.Version = 1
	return s.update(ctx, nil, func(t *txn) error {
		b, err := writeBucket(t, bucketUsers)
		if err != nil {
			return err
		}
		if b.Get([]byte(u.Name)) != nil {
			return idkeeper.ErrConflict
		}
		return b.Put([]byte(u.Name), encodeUser(u))
	})
}

// User implements account.Store.
func (s *Store) User(ctx context.Context, name string) (account.User, error) {
	var u account.User
	err := s.view(ctx, func(t *txn) error {
		var v []byte
		if b := t.tx.Bucket(bucketUsers); b != nil && name != "" {
			v = b.Get([]byte(name))
		}
		if v == nil {
			return idkeeper.ErrNotFound
		}
		var err error
		u, err = decodeUser(name, v)
		return err
	})
	return u, err
}

// Users implements account.Store: key order is name order.
func (s *Store) Users(ctx context.Context) ([]account.User, error) {
	out := []account.User{}
	err := s.view(ctx, func(t *txn) error {
		b := t.tx.Bucket(bucketUsers)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			u, err := decodeUser(string(k), v)
			out = append(out, u)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// UpdateUser implements account.Store.
func (s *Store) UpdateUser(ctx context.Context, u account.User) error {
	if u.Name == "" {
		return idkeeper.ErrNotFound
	}
	return s.update(ctx, nil, func(t *txn) error {
		b, err := writeBucket(t, bucketUsers)
		if err != nil {
			return err
		}
		v := b.Get([]byte(u.Name))
		if v == nil {
			return idkeeper.ErrNotFound
		}
		cur, err := decodeUser(u.Name, v)
		if err != nil {
			return err
		}
		if cur.Version != u.Version {
			return idkeeper.ErrConflict
		}
		u.Version++
		return b.Put([]byte(u.Name), encodeUser(u))
	})
}

// CountUsers implements account.Store. It walks the users bucket: O(n),
// and accounts are few.
func (s *Store) CountUsers(ctx context.Context) (int, error) {
	n := 0
	err := s.view(ctx, func(t *txn) error {
		if b := t.tx.Bucket(bucketUsers); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	return n, err
}

// encodeSession is user | epoch | createdAt | seenAt | expiresAt | remoteIP | userAgent.
func encodeSession(a account.Session) []byte {
	w := newRec(48 + len(a.User) + len(a.RemoteIP) + len(a.UserAgent))
	w = w.str(a.User).u64(a.Epoch).ms(timeMs(a.CreatedAt)).ms(timeMs(a.SeenAt)).ms(timeMs(a.ExpiresAt))
	return w.str(a.RemoteIP).str(a.UserAgent)
}

func decodeSession(id string, v []byte) (account.Session, error) {
	r := readRec(fmt.Sprintf("session %q", id), v)
	a := account.Session{ID: id, User: r.str(), Epoch: r.u64(), CreatedAt: msTime(r.ms()), SeenAt: msTime(r.ms()),
		ExpiresAt: msTime(r.ms()), RemoteIP: r.str(), UserAgent: r.str()}
	if err := r.end(); err != nil {
		return account.Session{}, err
	}
	return a, nil
}

// userSessionsPrefix is the usersessions index prefix of a user's sessions: the
// length makes the prefix of "al" no prefix of "alice"'s.
func userSessionsPrefix(user string) []byte {
	return append(binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(user)), uint16(len(user))), user...)
}

func userSessionKey(user, id string) []byte { return append(userSessionsPrefix(user), id...) }

// sessionTxn holds the two session buckets of a read-write transaction.
type sessionTxn struct{ recs, byUser *bbolt.Bucket }

func sessionBuckets(t *txn) (st sessionTxn, err error) {
	if st.recs, err = writeBucket(t, bucketSessions); err != nil {
		return st, err
	}
	st.byUser, err = writeBucket(t, bucketUserSessions)
	return st, err
}

// delete deletes session id of user from both buckets.
func (st sessionTxn) delete(id, user string) error {
	if err := st.recs.Delete([]byte(id)); err != nil {
		return err
	}
	return st.byUser.Delete(userSessionKey(user, id))
}

// CreateSession implements account.Store. An empty ID, an ID over 1024
// bytes or a user name over 65535 bytes is an INVALID_REQUEST error.
func (s *Store) CreateSession(ctx context.Context, a account.Session) error {
	switch {
	case a.ID == "" || len(a.ID) > maxSessionKey:
		return protocol.Invalidf("id", "a session ID is 1 to %d bytes", maxSessionKey)
	case len(a.User) > math.MaxUint16:
		return protocol.Invalidf("user", "a session's user name is too long")
	}
	return s.update(ctx, nil, func(t *txn) error {
		st, err := sessionBuckets(t)
		if err != nil {
			return err
		}
		if st.recs.Get([]byte(a.ID)) != nil {
			return idkeeper.ErrConflict
		}
		if err := st.recs.Put([]byte(a.ID), encodeSession(a)); err != nil {
			return err
		}
		return st.byUser.Put(userSessionKey(a.User, a.ID), nil)
	})
}

// Session implements account.Store.
func (s *Store) Session(ctx context.Context, id string) (account.Session, error) {
	var a account.Session
	err := s.view(ctx, func(t *txn) error {
		var v []byte
		if b := t.tx.Bucket(bucketSessions); b != nil && id != "" && len(id) <= maxSessionKey {
			v = b.Get([]byte(id))
		}
		if v == nil {
			return idkeeper.ErrNotFound
		}
		var err error
		a, err = decodeSession(id, v)
		return err
	})
	return a, err
}

// TouchSession implements account.Store. It writes only when SeenAt rises.
func (s *Store) TouchSession(ctx context.Context, id string, at time.Time) error {
	if id == "" || len(id) > maxSessionKey {
		return nil
	}
	at = protocol.Millis(at)
	return s.update(ctx, nil, func(t *txn) error {
		b := t.tx.Bucket(bucketSessions)
		if b == nil {
			return nil
		}
		v := b.Get([]byte(id))
		if v == nil {
			return nil
		}
		a, err := decodeSession(id, v)
		if err != nil || !at.After(a.SeenAt) {
			return err
		}
		a.SeenAt = at
		return b.Put([]byte(id), encodeSession(a))
	})
}

// DeleteSession implements account.Store.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if id == "" || len(id) > maxSessionKey {
		return nil
	}
	return s.update(ctx, nil, func(t *txn) error {
		if t.tx.Bucket(bucketSessions) == nil {
			return nil
		}
		st, err := sessionBuckets(t)
		if err != nil {
			return err
		}
		v := st.recs.Get([]byte(id))
		if v == nil {
			return nil
		}
		a, err := decodeSession(id, v)
		if err != nil {
			return err
		}
		return st.delete(id, a.User)
	})
}

// DeleteUserSessions implements account.Store. It reads the user's entries
// of the usersessions index: O(log n + k) for k sessions of the user.
func (s *Store) DeleteUserSessions(ctx context.Context, user string) (int, error) {
	if len(user) > math.MaxUint16 {
		return 0, nil
	}
	n := 0
	err := s.update(ctx, nil, func(t *txn) error {
		n = 0
		if t.tx.Bucket(bucketSessions) == nil {
			return nil
		}
		st, err := sessionBuckets(t)
		if err != nil {
			return err
		}
		prefix := userSessionsPrefix(user)
		var ids []string
		c := st.byUser.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			ids = append(ids, string(k[len(prefix):]))
		}
		for _, id := range ids {
			if err := st.delete(id, user); err != nil {
				return err
			}
		}
		n = len(ids)
		return nil
	})
	return n, err
}

// PruneSessions implements account.Store. It reads every session: O(n) for
// n sessions, which are few (each is a logged-in browser).
func (s *Store) PruneSessions(ctx context.Context, now time.Time, idle time.Duration) (int, error) {
	n := 0
	err := s.update(ctx, nil, func(t *txn) error {
		n = 0
		if t.tx.Bucket(bucketSessions) == nil {
			return nil
		}
		st, err := sessionBuckets(t)
		if err != nil {
			return err
		}
		var ended []account.Session
		err = st.recs.ForEach(func(k, v []byte) error {
			a, err := decodeSession(string(k), v)
			if err != nil {
				return err
			}
			if !a.ExpiresAt.After(now) || !a.SeenAt.Add(idle).After(now) {
				ended = append(ended, a)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, a := range ended {
			if err := st.delete(a.ID, a.User); err != nil {
				return err
			}
		}
		n = len(ended)
		return nil
	})
	return n, err
}
