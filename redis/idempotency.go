package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/protocol"
)

// IdempotencyStore is the idempotency.Store on Redis: the one to use when
// several processes (gateways, server replicas) share work, since they all see the
// same records.
//
// A record is one hash, {prefix}:idem:<scope>, under the same hash tag as every
// other key of the prefix. Each method is one Lua script on that key and the two
// below, so it is atomic, and the scripts read the time from Redis TIME (or
// Options.Clock, for tests). Redis deletes a record by itself once it lapses:
// PEXPIRE is the lock time for an in-flight marker and the ttl for a completed
// record. Beside the records (see lua/idempotency_*.lua for their fields):
//
//	{prefix}:idem-owner:<owner>   zset: scope → expiry of each record of owner (see Owned);
//	                              Begin drops the lapsed ones, and counts the rest against the cap
//	{prefix}:idem-stats           hash: records and bytes by the minute in which they lapse (Stats)
//
// Both lapse by themselves (PEXPIRE) once every record they count has. A record
// costs its hash (the bytes Stats counts) and one zset entry of about 100 bytes
// plus its scope. Records written before records were counted (no field v) are
// read and completed as before but not counted; a live record of a newer format is
// a store error, never an answer.
//
// Durability is that of the Redis deployment (see the package doc). With
// Options.WaitReplicas, Complete waits for the replicas to acknowledge the stored
// response; when they do not in time it returns an error although the record is
// written on the primary, so a retry finds it.
type IdempotencyStore struct {
	s      *Store
	prefix string // "{prefix}:idem:"
	owners string // "{prefix}:idem-owner:"
	stats  string // "{prefix}:idem-stats"
	own    bool   // Close closes s
}

var _ idempotency.Store = (*IdempotencyStore)(nil)

// idemScript is an idempotency script: its body after the helpers of common.lua
// and idempotency_common.lua it uses.
func idemScript(name string) *goredis.Script {
	return goredis.NewScript(assemble(lua("idempotency_"+name), "common", "idempotency_common"))
}

var (
	scriptIdemBegin    = idemScript("begin")
	scriptIdemComplete = idemScript("complete")
	scriptIdemAbort    = idemScript("abort")
	scriptIdemStats    = idemScript("stats")
)

// OpenIdempotency returns an IdempotencyStore on the Redis at url, or on
// opts.Client, as Open does; of opts it uses Client, Clock, Prefix, WaitReplicas
// and WaitTimeout. Like Open it does no I/O.
func OpenIdempotency(url string, opts Options) (*IdempotencyStore, error) {
	s, err := Open(url, opts)
	if err != nil {
		return nil, err
	}
	i := s.Idempotency()
	i.own = true
	return i, nil
}

// Idempotency returns an IdempotencyStore on the Store's client, clock and prefix.
// Its Close does nothing; closing the Store closes the client.
func (s *Store) Idempotency() *IdempotencyStore {
	base := strings.TrimSuffix(s.keys.meta, "meta")
	return &IdempotencyStore{s: s, prefix: base + "idem:", owners: base + "idem-owner:", stats: base + "idem-stats"}
}

// Close closes the client that OpenIdempotency created.
func (i *IdempotencyStore) Close() error {
	if !i.own {
		return nil
	}
	return i.s.Close()
}

// Ping checks that Redis answers.
func (i *IdempotencyStore) Ping(ctx context.Context) error { return i.s.Ping(ctx) }

// Key is the Redis key of scope's record.
func (i *IdempotencyStore) Key(scope string) string { return i.prefix + scope }

// OwnerKey is the Redis key of owner's zset of records.
func (i *IdempotencyStore) OwnerKey(owner string) string { return i.owners + owner }

// StatsKey is the Redis key of the hash that Stats reads.
func (i *IdempotencyStore) StatsKey() string { return i.stats }

// Begin implements idempotency.Store: a record of the owner "", uncapped.
func (i *IdempotencyStore) Begin(ctx context.Context, scope, fingerprint, token string, lockFor time.Duration) (*idempotency.Record, bool, error) {
	return i.Owned("", 0).Begin(ctx, scope, fingerprint, token, lockFor)
}

// Complete implements idempotency.Store for the records of the owner "".
func (i *IdempotencyStore) Complete(ctx context.Context, scope, token string, res idempotency.Stored, ttl time.Duration) error {
	return i.Owned("", 0).Complete(ctx, scope, token, res, ttl)
}

// Abort implements idempotency.Store for the records of the owner "".
func (i *IdempotencyStore) Abort(ctx context.Context, scope, token string) error {
	return i.Owned("", 0).Abort(ctx, scope, token)
}

// Owned returns the view of owner's records, capped at maxRecords (0: no cap),
// as idempotency.CountingStore defines it.
func (i *IdempotencyStore) Owned(owner string, maxRecords int) idempotency.Store {
	return &idemOwned{i: i, owner: owner, max: maxRecords}
}

// Stats returns the live counted records and their bytes, as
// idempotency.CountingStore defines it: records count until the end of the minute
// in which they lapse.
func (i *IdempotencyStore) Stats(ctx context.Context) (records, bytes int64, err error) {
	v, err := i.s.run(ctx, scriptIdemStats, []string{i.stats}, false, i.s.nowArg())
	if err != nil {
		return 0, 0, wrap("idempotency stats", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return 0, 0, fmt.Errorf("redis: idempotency stats: unexpected reply %v", v)
	}
	records, _ = a[0].(int64)
	bytes, _ = a[1].(int64)
	return records, bytes, nil
}

// idemOwned is IdempotencyStore.Owned.
type idemOwned struct {
	i     *IdempotencyStore
	owner string
	max   int
}

func (o *idemOwned) keys(scope string) []string {
	return []string{o.i.Key(scope), o.i.OwnerKey(o.owner), o.i.stats}
}

// Begin implements idempotency.Store, counting the marker against the
// owner and refusing it when the owner is full.
func (o *idemOwned) Begin(ctx context.Context, scope, fingerprint, token string, lockFor time.Duration) (*idempotency.Record, bool, error) {
	if err := idempotency.ValidateBegin(scope, fingerprint, token, lockFor); err != nil {
		return nil, false, err
	}
	if err := validOwner(o.owner, o.max); err != nil {
		return nil, false, err
	}
	v, err := o.i.s.run(ctx, scriptIdemBegin, o.keys(scope), false,
		o.i.s.nowArg(), fingerprint, token, lockFor.Milliseconds(), o.owner, o.max, scope)
	if err != nil {
		return nil, false, wrap("idempotency begin", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return nil, false, fmt.Errorf("redis: idempotency begin: unexpected reply %v", v)
	}
	switch kind, _ := a[0].(int64); {
	case kind == 1:
		return nil, true, nil
	case kind == 2 && len(a) == 2:
		wait, _ := a[1].(int64)
		return nil, false, idempotency.NewCapError(o.max, time.Duration(wait)*time.Millisecond)
	case kind == 3 && len(a) == 2:
		return nil, false, fmt.Errorf("redis: idempotency record of scope %q has format %v; this build reads formats up to 2", scope, a[1])
	}
	rec, err := decodeIdem(scope, a)
	if err != nil {
		return nil, false, fmt.Errorf("redis: idempotency begin: %w", err)
	}
	return rec, false, nil
}

// decodeIdem decodes the {0, state, fingerprint, created, locked, expires, status,
// header, body} reply of idempotency_begin.lua.
func decodeIdem(scope string, a []any) (*idempotency.Record, error) {
	if len(a) != 9 {
		return nil, fmt.Errorf("record of scope %q: reply of %d elements", scope, len(a))
	}
	str := func(i int) string { s, _ := a[i].(string); return s }
	num := func(i int) (int64, error) {
		if a[i] == nil {
			return 0, nil
		}
		return strconv.ParseInt(str(i), 10, 64)
	}
	r := &idempotency.Record{Scope: scope, Fingerprint: str(2)}
	switch str(1) {
	case "inflight":
		r.State = idempotency.InFlight
	case "completed":
		r.State = idempotency.Completed
	default:
		return nil, fmt.Errorf("record of scope %q has state %q", scope, str(1))
	}
	created, err1 := num(3)
	locked, err2 := num(4)
	expires, err3 := num(5)
	status, err4 := num(6)
	if err := firstErr(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("record of scope %q: %w", scope, err)
	}
	r.CreatedAt, r.ExpiresAt, r.Outcome = fromMs(created), fromMs(expires), int(status)
	if r.State == idempotency.InFlight {
		r.LockedUntil = fromMs(locked)
		return r, nil
	}
	if h := str(7); h != "" {
		if err := json.Unmarshal([]byte(h), &r.Metadata); err != nil {
			return nil, fmt.Errorf("record of scope %q: header: %w", scope, err)
		}
	}
	if b := str(8); b != "" {
		r.Body = []byte(b)
	}
	return r, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Complete implements idempotency.Store. With Options.WaitReplicas it
// also waits for the replicas, as the type's doc says.
func (o *idemOwned) Complete(ctx context.Context, scope, token string, res idempotency.Stored, ttl time.Duration) error {
	if err := idempotency.ValidateComplete(scope, token, res, ttl); err != nil {
		return err
	}
	if err := validOwner(o.owner, o.max); err != nil {
		return err
	}
	header, err := json.Marshal(res.Metadata)
	if err != nil {
		return fmt.Errorf("redis: idempotency complete: %w", err)
	}
	v, err := o.i.s.run(ctx, scriptIdemComplete, o.keys(scope), true,
		o.i.s.nowArg(), token, res.Outcome, header, res.Body, ttl.Milliseconds(), o.owner, scope)
	if err != nil {
		return wrap("idempotency complete", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return fmt.Errorf("redis: idempotency complete: unexpected reply %v", v)
	}
	if done, _ := a[0].(int64); done != 1 {
		return idempotency.ErrMarkerLost
	}
	return nil
}

// Abort implements idempotency.Store.
func (o *idemOwned) Abort(ctx context.Context, scope, token string) error {
	if err := idempotency.ValidateAbort(scope, token); err != nil {
		return err
	}
	if err := validOwner(o.owner, o.max); err != nil {
		return err
	}
	if _, err := o.i.s.run(ctx, scriptIdemAbort, o.keys(scope), false, o.i.s.nowArg(), token, o.owner, scope); err != nil {
		return wrap("idempotency abort", err)
	}
	return nil
}

// validOwner checks the arguments of IdempotencyStore.Owned.
func validOwner(owner string, limit int) error {
	switch {
	case len(owner) > idempotency.MaxScopeLen:
		return protocol.Invalidf("owner", "an idempotency owner must have at most %d bytes", idempotency.MaxScopeLen)
	case limit < 0:
		return protocol.Invalidf("maxRecords", "the most records of an owner must not be negative, got %d", limit)
	}
	return nil
}
