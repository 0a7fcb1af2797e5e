package redis

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
)

// IdempotencyStore is the idkeeper.IdempotencyStore on Redis: the one to use when
// several processes (gateways, server replicas) share work, since they all see the
// same records.
//
// A record is one hash, {prefix}:idem:<scope>, under the same hash tag as every
// other key of the prefix. Each method is one Lua script on that key, so it is
// atomic, and the scripts read the time from Redis TIME (or Options.Clock, for
// tests). Redis deletes a record by itself once it lapses: PEXPIRE is the lock time
// for an in-flight marker and the ttl for a completed record.
//
// Durability is that of the Redis deployment (see the package doc). With
// Options.WaitReplicas, Complete waits for the replicas to acknowledge the stored
// response; when they do not in time it returns an error although the record is
// written on the primary, so a retry finds it.
type IdempotencyStore struct {
	s      *Store
	prefix string // "{prefix}:idem:"
	own    bool   // Close closes s
}

var _ idkeeper.IdempotencyStore = (*IdempotencyStore)(nil)

//go:embed lua/common.lua lua/idempotency_*.lua
var idemLua embed.FS

func idemScript(name string) *goredis.Script {
	common, err1 := idemLua.ReadFile("lua/common.lua")
	body, err2 := idemLua.ReadFile("lua/idempotency_" + name + ".lua")
	if err1 != nil || err2 != nil {
		panic("redis: missing embedded idempotency script " + name)
	}
	return goredis.NewScript(string(common) + string(body))
}

var (
	scriptIdemBegin    = idemScript("begin")
	scriptIdemComplete = idemScript("complete")
	scriptIdemAbort    = idemScript("abort")
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
	return &IdempotencyStore{s: s, prefix: strings.TrimSuffix(s.keys.meta, "meta") + "idem:"}
}

// Close closes the client that OpenIdempotency created.
func (i *IdempotencyStore) Close() error {
	if !i.own {
		return nil
	}
	return i.s.Close()
}

// Key is the Redis key of scope's record.
func (i *IdempotencyStore) Key(scope string) string { return i.prefix + scope }

// Begin implements idkeeper.IdempotencyStore.
func (i *IdempotencyStore) Begin(ctx context.Context, scope, fingerprint, token string, lockFor time.Duration) (*idkeeper.IdempotencyRecord, bool, error) {
	if err := idkeeper.ValidateIdempotencyBegin(scope, fingerprint, token, lockFor); err != nil {
		return nil, false, err
	}
	v, err := i.s.run(ctx, scriptIdemBegin, []string{i.Key(scope)}, false,
		i.s.nowArg(), fingerprint, token, lockFor.Milliseconds())
	if err != nil {
		return nil, false, wrap("idempotency begin", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return nil, false, fmt.Errorf("redis: idempotency begin: unexpected reply %v", v)
	}
	if started, _ := a[0].(int64); started == 1 {
		return nil, true, nil
	}
	rec, err := decodeIdem(scope, a)
	if err != nil {
		return nil, false, fmt.Errorf("redis: idempotency begin: %w", err)
	}
	return rec, false, nil
}

// decodeIdem decodes the {0, state, fingerprint, created, locked, expires, status,
// header, body} reply of idempotency_begin.lua.
func decodeIdem(scope string, a []any) (*idkeeper.IdempotencyRecord, error) {
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
	r := &idkeeper.IdempotencyRecord{Scope: scope, Fingerprint: str(2)}
	switch str(1) {
	case "inflight":
		r.State = idkeeper.IdempotencyInFlight
	case "completed":
		r.State = idkeeper.IdempotencyCompleted
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
	r.CreatedAt, r.ExpiresAt, r.Status = fromMs(created), fromMs(expires), int(status)
	if r.State == idkeeper.IdempotencyInFlight {
		r.LockedUntil = fromMs(locked)
		return r, nil
	}
	if h := str(7); h != "" {
		if err := json.Unmarshal([]byte(h), &r.Header); err != nil {
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

// Complete implements idkeeper.IdempotencyStore. With Options.WaitReplicas it
// also waits for the replicas, as the type's doc says.
func (i *IdempotencyStore) Complete(ctx context.Context, scope, token string, res idkeeper.IdempotencyResult, ttl time.Duration) error {
	if err := idkeeper.ValidateIdempotencyComplete(scope, token, res, ttl); err != nil {
		return err
	}
	header, err := json.Marshal(res.Header)
	if err != nil {
		return fmt.Errorf("redis: idempotency complete: %w", err)
	}
	v, err := i.s.run(ctx, scriptIdemComplete, []string{i.Key(scope)}, true,
		i.s.nowArg(), token, res.Status, header, res.Body, ttl.Milliseconds())
	if err != nil {
		return wrap("idempotency complete", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return fmt.Errorf("redis: idempotency complete: unexpected reply %v", v)
	}
	if done, _ := a[0].(int64); done != 1 {
		return idkeeper.ErrIdempotencyMarkerLost
	}
	return nil
}

// Abort implements idkeeper.IdempotencyStore.
func (i *IdempotencyStore) Abort(ctx context.Context, scope, token string) error {
	if err := idkeeper.ValidateIdempotencyAbort(scope, token); err != nil {
		return err
	}
	if _, err := i.s.run(ctx, scriptIdemAbort, []string{i.Key(scope)}, false, token); err != nil {
		return wrap("idempotency abort", err)
	}
	return nil
}
