package etcd

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/leasetx"
	"github.com/idkeeper/idkeeper/protocol"
)

// The records of the Idempotency-Key component (idempotency.Store): one
// JSON record per scope under idem/<scope>, and an entry per record under
// idemexp/<expiresAt>/<scope>, written with it, from which Purge deletes the
// lapsed ones. Each change is one transaction conditioned on the record key's
// revision. Times are Options.Clock's, truncated to the millisecond. The records
// are not part of a snapshot, and a load leaves them alone.

var _ idempotency.Store = (*Store)(nil)

// idemRec is the JSON of an idempotency record; times are Unix ms.
type idemRec struct {
	Owner       string              `json:"owner,omitempty"` // idempotency.CountingStore's; "" for the plain methods
	Fingerprint string              `json:"fp"`
	Token       string              `json:"token,omitempty"` // the marker's owner; "" once completed
	State       uint8               `json:"state"`
	Outcome     int                 `json:"outcome,omitempty"`
	Metadata    map[string][]string `json:"meta,omitempty"`
	Body        []byte              `json:"body,omitempty"`
	CreatedAt   int64               `json:"createdAt"`
	LockedUntil int64               `json:"lockedUntil,omitempty"` // 0 once completed
	ExpiresAt   int64               `json:"expiresAt"`
}

func (r idemRec) record(scope string) *idempotency.Record {
	return &idempotency.Record{Scope: scope, Fingerprint: r.Fingerprint, State: idempotency.State(r.State),
		Outcome: r.Outcome, Metadata: r.Metadata, Body: r.Body, CreatedAt: msTime(r.CreatedAt),
		LockedUntil: optTime(r.LockedUntil), ExpiresAt: msTime(r.ExpiresAt)}
}

func (k keys) idemKey(scope string) string { return k.idem + scope }
func (k keys) idemExpKey(exp int64, scope string) string {
	return k.idemExp + hexTime(exp) + "/" + scope
}

// idemOwner is the prefix of owner's entries: the owner in hex, which may hold
// any byte.
func (k keys) idemOwner(owner string) string {
	return k.idemOwn + hex.EncodeToString([]byte(owner)) + "/"
}
func (k keys) idemOwnKey(owner string, exp int64, scope string) string {
	return k.idemOwner(owner) + hexTime(exp) + "/" + scope
}

// changeIdem reads the record of scope (ok false: none, live or not) and commits
// the ops change returns on the condition that the record key is unchanged since;
// else it starts over, a bounded number of times. now is read in each attempt.
func (s *Store) changeIdem(ctx context.Context, op, scope string, change func(r idemRec, ok bool, now int64) ([]clientv3.Op, error)) error {
	return s.casOps(ctx, op, s.k.idemKey(scope), func(v []byte, ok bool) ([]clientv3.Op, error) {
		var r idemRec
		if ok {
			if err := json.Unmarshal(v, &r); err != nil {
				return nil, fmt.Errorf("etcd: corrupt idempotency record %q: %w", scope, err)
			}
		}
		return change(r, ok, s.nowMs())
	})
}

// idemWrite returns the ops that replace the record of scope (old, when ok) by r,
// with its lapse and owner entries; the entries hold the record's size.
func (s *Store) idemWrite(scope string, old idemRec, ok bool, r idemRec) ([]clientv3.Op, error) {
	v, err := jsonString(r)
	if err != nil {
		return nil, err
	}
	size := strconv.Itoa(len(scope) + len(v))
	ops := []clientv3.Op{clientv3.OpPut(s.k.idemKey(scope), v)}
	// etcd refuses a transaction that deletes and puts one key: the old entries
	// go only when their keys differ from the new ones.
	if ok && (old.ExpiresAt != r.ExpiresAt || old.Owner != r.Owner) {
		ops = append(ops, s.idemUnindex(scope, old)...)
	}
	return append(ops, clientv3.OpPut(s.k.idemExpKey(r.ExpiresAt, scope), size),
		clientv3.OpPut(s.k.idemOwnKey(r.Owner, r.ExpiresAt, scope), size)), nil
}

// idemUnindex returns the deletes of r's lapse and owner entries.
func (s *Store) idemUnindex(scope string, r idemRec) []clientv3.Op {
	return []clientv3.Op{clientv3.OpDelete(s.k.idemExpKey(r.ExpiresAt, scope)),
		clientv3.OpDelete(s.k.idemOwnKey(r.Owner, r.ExpiresAt, scope))}
}

// idemDelete returns the ops that delete the record r of scope.
func (s *Store) idemDelete(scope string, r idemRec) []clientv3.Op {
	return append(s.idemUnindex(scope, r), clientv3.OpDelete(s.k.idemKey(scope)))
}

// Begin implements idempotency.Store: the records of owner "", never
// capped.
func (s *Store) Begin(ctx context.Context, scope, fingerprint, token string, lockFor time.Duration) (*idempotency.Record, bool, error) {
	return s.idemBegin(ctx, "", 0, scope, fingerprint, token, lockFor)
}

// idemBegin is Begin for owner's records, at most maxRecords live ones (0: no
// cap). It reads the record of scope and owner's live entries at one revision,
// and writes on the condition that the record is unchanged and that no entry of
// owner was written since (a deleted one only lowers the count).
func (s *Store) idemBegin(ctx context.Context, owner string, maxRecords int, scope, fingerprint, token string, lockFor time.Duration) (*idempotency.Record, bool, error) {
	if err := idempotency.ValidateBegin(scope, fingerprint, token, lockFor); err != nil {
		return nil, false, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	key, own := s.k.idemKey(scope), s.k.idemOwner(owner)
	for n := 1; ; n++ {
		now := s.nowMs()
		live := clientv3.GetPrefixRangeEnd(own)
		resp, err := s.c.Txn(ctx).Then(clientv3.OpGet(key),
			clientv3.OpGet(own+hexTime(now+1), clientv3.WithRange(live), clientv3.WithCountOnly()),
			clientv3.OpGet(own+hexTime(now+1), clientv3.WithRange(live), clientv3.WithLimit(1), clientv3.WithKeysOnly())).Commit()
		if err != nil {
			return nil, false, wrap("idempotency begin", err)
		}
		var r idemRec
		rev, ok := int64(0), false
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			if err := json.Unmarshal(kvs[0].Value, &r); err != nil {
				return nil, false, fmt.Errorf("etcd: corrupt idempotency record %q: %w", scope, err)
			}
			rev, ok = kvs[0].ModRevision, true
		}
		if ok && now < r.ExpiresAt {
			return r.record(scope), false, nil
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}
		if maxRecords > 0 {
			if held := resp.Responses[1].GetResponseRange().Count; held >= int64(maxRecords) {
				first := resp.Responses[2].GetResponseRange().Kvs
				wait := time.Second
				if len(first) == 1 {
					if exp, err := parseHexTime(string(first[0].Key[len(own) : len(own)+16])); err == nil {
						wait = time.Duration(exp-now) * time.Millisecond
					}
				}
				return nil, false, idempotency.NewCapError(maxRecords, wait)
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(own), "<", resp.Header.Revision+1).WithPrefix())
		}
		until := now + lockFor.Milliseconds()
		ops, err := s.idemWrite(scope, r, ok, idemRec{Owner: owner, Fingerprint: fingerprint, Token: token,
			State: uint8(idempotency.InFlight), CreatedAt: now, LockedUntil: until, ExpiresAt: until})
		if err != nil {
			return nil, false, err
		}
		tr, err := s.c.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, false, wrap("idempotency begin", err)
		}
		if tr.Succeeded {
			return nil, true, nil
		}
		if n >= maxConflicts {
			return nil, false, fmt.Errorf("etcd: idempotency begin: %d attempts in a row lost to other writers", n)
		}
		if err := leasetx.Backoff(ctx, n); err != nil {
			return nil, false, wrap("idempotency begin", err)
		}
	}
}

// Complete implements idempotency.Store for the records of owner "".
func (s *Store) Complete(ctx context.Context, scope, token string, res idempotency.Stored, ttl time.Duration) error {
	return s.idemComplete(ctx, "", scope, token, res, ttl)
}

func (s *Store) idemComplete(ctx context.Context, owner, scope, token string, res idempotency.Stored, ttl time.Duration) error {
	if err := idempotency.ValidateComplete(scope, token, res, ttl); err != nil {
		return err
	}
	return s.changeIdem(ctx, "idempotency complete", scope, func(r idemRec, ok bool, now int64) ([]clientv3.Op, error) {
		if !ok || r.State != uint8(idempotency.InFlight) || r.Token != token || r.Owner != owner || now >= r.LockedUntil {
			return nil, idempotency.ErrMarkerLost
		}
		return s.idemWrite(scope, r, ok, idemRec{Owner: owner, Fingerprint: r.Fingerprint,
			State: uint8(idempotency.Completed), Outcome: res.Outcome, Metadata: res.Metadata, Body: res.Body,
			CreatedAt: r.CreatedAt, ExpiresAt: now + ttl.Milliseconds()})
	})
}

// Abort implements idempotency.Store for the records of owner "".
func (s *Store) Abort(ctx context.Context, scope, token string) error {
	return s.idemAbort(ctx, "", scope, token)
}

func (s *Store) idemAbort(ctx context.Context, owner, scope, token string) error {
	if err := idempotency.ValidateAbort(scope, token); err != nil {
		return err
	}
	return s.changeIdem(ctx, "idempotency abort", scope, func(r idemRec, ok bool, _ int64) ([]clientv3.Op, error) {
		if !ok || r.State != uint8(idempotency.InFlight) || r.Token != token || r.Owner != owner {
			return nil, nil
		}
		return s.idemDelete(scope, r), nil
	})
}

// Owned implements idempotency.CountingStore: owner's live records are its
// entries under idemown/<hex owner>/ with a lapse time after now, counted by etcd.
func (s *Store) Owned(owner string, maxRecords int) idempotency.Store {
	return &ownedIdem{s: s, owner: owner, max: maxRecords}
}

// Stats implements idempotency.CountingStore: one range read of the lapse
// entries of the live records, each holding its record's size (scope and
// stored JSON; a body is kept as base64). O(records).
func (s *Store) Stats(ctx context.Context) (records, bytes int64, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	now := s.nowMs()
	from := s.k.idemExp + hexTime(now+1)
	_, err = s.readRange(ctx, "idempotency stats", from, clientv3.GetPrefixRangeEnd(s.k.idemExp), 0, false,
		func(key string, val []byte) error {
			n, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil {
				return fmt.Errorf("etcd: corrupt idempotency entry %q", key)
			}
			records, bytes = records+1, bytes+n
			return nil
		})
	if err != nil {
		return 0, 0, err
	}
	return records, bytes, nil
}

// ownedIdem is the view of one owner's records (Store.Owned).
type ownedIdem struct {
	s     *Store
	owner string
	max   int
}

func (o *ownedIdem) valid() error {
	switch {
	case len(o.owner) > idempotency.MaxScopeLen:
		return protocol.Invalidf("owner", "an idempotency owner has at most %d bytes", idempotency.MaxScopeLen)
	case o.max < 0:
		return protocol.Invalidf("maxRecords", "the cap of an owner's records is not negative, got %d", o.max)
	}
	return nil
}

func (o *ownedIdem) Begin(ctx context.Context, scope, fingerprint, token string, lockFor time.Duration) (*idempotency.Record, bool, error) {
	if err := o.valid(); err != nil {
		return nil, false, err
	}
	return o.s.idemBegin(ctx, o.owner, o.max, scope, fingerprint, token, lockFor)
}

func (o *ownedIdem) Complete(ctx context.Context, scope, token string, res idempotency.Stored, ttl time.Duration) error {
	if err := o.valid(); err != nil {
		return err
	}
	return o.s.idemComplete(ctx, o.owner, scope, token, res, ttl)
}

func (o *ownedIdem) Abort(ctx context.Context, scope, token string) error {
	if err := o.valid(); err != nil {
		return err
	}
	return o.s.idemAbort(ctx, o.owner, scope, token)
}

// Purge deletes the lapsed idempotency records (ExpiresAt at or before now) and
// returns how many: it reads their entries in the expiry index, and deletes each
// record in a transaction conditioned on its revision, judged again on the
// record, reading the index in pages of 1,000 keys. etcd does not expire them
// by itself; run it now and then (lapsed records are treated as absent, but
// take room). Options.Timeout bounds each transaction, not the whole purge.
func (s *Store) Purge(ctx context.Context) (int, error) {
	now := s.nowMs()
	n := 0
	_, err := s.readRange(ctx, "idempotency purge", s.k.idemExp, before(s.k.idemExp, now+1), 0, true, func(idx string, _ []byte) error {
		rest := strings.TrimPrefix(idx, s.k.idemExp)
		if len(rest) < 17 {
			return fmt.Errorf("etcd: malformed idempotency expiry key %q", idx)
		}
		scope := rest[17:]
		deleted := false
		err := s.changeIdem(ctx, "idempotency purge", scope, func(r idemRec, ok bool, now int64) ([]clientv3.Op, error) {
			if deleted = ok && now >= r.ExpiresAt; !deleted {
				return nil, nil
			}
			return s.idemDelete(scope, r), nil
		})
		switch {
		case err != nil:
			return err
		case deleted:
			n++
			return nil
		}
		// An entry whose record is gone: delete it (a record that lives on has a
		// later entry of its own).
		cctx, cancel := s.bound(ctx)
		defer cancel()
		_, err = s.c.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(s.k.idemKey(scope)), "=", 0)).
			Then(clientv3.OpDelete(idx)).Commit()
		return wrap("idempotency purge", err)
	})
	return n, err
}
