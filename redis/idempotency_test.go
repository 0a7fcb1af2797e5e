package redis_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/idemtest"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/redis"
)

var idemPrefixSeq atomic.Int64

// openIdempotency opens an IdempotencyStore with a client of its own on srv; an
// empty opts.Prefix gets a fresh one.
func openIdempotency(t testing.TB, srv *redistest.Server, opts redis.Options) *redis.IdempotencyStore {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = fmt.Sprintf("idem%d", idemPrefixSeq.Add(1))
	}
	s, err := redis.OpenIdempotency(srv.URL(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The store counts records, so the contract suite runs its cap and Stats cases.
var _ idempotency.CountingStore = (*redis.IdempotencyStore)(nil)

func TestIdempotencyContract(t *testing.T) {
	srv := redistest.Start(t)
	idemtest.Run(t, func(t *testing.T, clock idkeeper.Clock) idempotency.Store {
		return openIdempotency(t, srv, redis.Options{Clock: clock})
	})
}

// TestIdempotencyRedisTime runs on Redis TIME: records lapse by the server's
// clock, and Redis deletes them by itself.
func TestIdempotencyRedisTime(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := openIdempotency(t, srv, redis.Options{})
	raw := idemRawClient(t, srv)

	if _, started, err := s.Begin(ctx, "s", "fp", "t1", 200*time.Millisecond); err != nil || !started {
		t.Fatalf("Begin: %v, %v", started, err)
	}
	rec, started, err := s.Begin(ctx, "s", "fp", "t2", time.Minute)
	if err != nil || started {
		t.Fatalf("second Begin: %v, %v", started, err)
	}
	if d := rec.LockedUntil.Sub(rec.CreatedAt); d != 200*time.Millisecond {
		t.Fatalf("marker locked for %v, want 200ms", d)
	}
	if now := time.Now(); rec.CreatedAt.Before(now.Add(-time.Minute)) || rec.CreatedAt.After(now.Add(time.Minute)) {
		t.Fatalf("CreatedAt %v is not Redis's now (about %v)", rec.CreatedAt, now)
	}
	if pttl := raw.PTTL(ctx, s.Key("s")).Val(); pttl <= 0 || pttl > 200*time.Millisecond {
		t.Fatalf("marker PTTL %v, want at most 200ms", pttl)
	}
	time.Sleep(300 * time.Millisecond)
	if n := raw.Exists(ctx, s.Key("s")).Val(); n != 0 {
		t.Fatal("Redis kept the lapsed marker")
	}
	if _, started, err := s.Begin(ctx, "s", "fp", "t3", time.Minute); err != nil || !started {
		t.Fatalf("Begin after the marker lapsed: %v, %v", started, err)
	}
	if err := s.Complete(ctx, "s", "t3", idempotency.Stored{Outcome: 200}, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if pttl := raw.PTTL(ctx, s.Key("s")).Val(); pttl <= time.Hour || pttl > 2*time.Hour {
		t.Fatalf("record PTTL %v, want the ttl of 2h", pttl)
	}
}

// TestIdempotencyKeysTagged checks that records live under the prefix's hash tag,
// with the other keys of the store.
func TestIdempotencyKeysTagged(t *testing.T) {
	srv := redistest.Start(t)
	s := openIdempotency(t, srv, redis.Options{Prefix: "gw"})
	if k := s.Key("op:abc"); k != "{gw}:idem:op:abc" {
		t.Fatalf("Key = %q, want {gw}:idem:op:abc", k)
	}
	store, err := redis.Open(srv.URL(), redis.Options{Prefix: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if k := store.Idempotency().Key("x"); !strings.HasPrefix(k, "{gw}:") {
		t.Fatalf("Store.Idempotency key %q lacks the store's hash tag", k)
	}
}

// TestIdempotencyTwoClientsShare: two stores (two gateways) on one Redis and
// prefix see one record; other prefixes share nothing.
func TestIdempotencyTwoClientsShare(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	clock := fakeclock.New(idemtest.T0)
	a := openIdempotency(t, srv, redis.Options{Prefix: "shared", Clock: clock.Now})
	b := openIdempotency(t, srv, redis.Options{Prefix: "shared", Clock: clock.Now})
	other := openIdempotency(t, srv, redis.Options{Prefix: "other", Clock: clock.Now})

	if _, started, err := a.Begin(ctx, "s", "fp", "ta", time.Minute); err != nil || !started {
		t.Fatalf("Begin on a: %v, %v", started, err)
	}
	if rec, started, err := b.Begin(ctx, "s", "fp", "tb", time.Minute); err != nil || started || rec.State != idempotency.InFlight {
		t.Fatalf("Begin on b = %+v, %v, %v; want a's marker", rec, started, err)
	}
	if _, started, err := other.Begin(ctx, "s", "fp", "to", time.Minute); err != nil || !started {
		t.Fatalf("Begin under another prefix: %v, %v", started, err)
	}
	if err := a.Complete(ctx, "s", "ta", idempotency.Stored{Outcome: 201, Body: []byte("ids")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := b.Begin(ctx, "s", "fp", "tb", time.Minute); err != nil || rec == nil || string(rec.Body) != "ids" {
		t.Fatalf("b after a completed = %+v, %v", rec, err)
	}
}

func TestIdempotencyUnreachable(t *testing.T) {
	srv := redistest.Start(t)
	s := openIdempotency(t, srv, redis.Options{})
	srv.Stop(t)
	if _, _, err := s.Begin(t.Context(), "s", "fp", "t", time.Minute); err == nil || protocol.ErrorCode(err) != protocol.CodeInternal {
		t.Fatalf("Begin on a stopped Redis: %v, want a store failure", err)
	}
}

func idemRawClient(t testing.TB, srv *redistest.Server) *goredis.Client {
	t.Helper()
	o, err := goredis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestIdempotencyRecordFormats: records of format 1 (before records were
// counted: no field v) and of a newer format, as idemtest.RecordFormats wants them.
func TestIdempotencyRecordFormats(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	clock := fakeclock.New(idemtest.T0)
	s := openIdempotency(t, srv, redis.Options{Clock: clock.Now})
	raw := idemRawClient(t, srv)
	now := idemtest.T0.UnixMilli()
	for scope, fields := range map[string][]any{
		"old-done": {"state", "completed", "fingerprint", "fp", "created", now, "expires", now + 3600_000,
			"status", 201, "header", `{"Content-Type":["text/plain"]}`, "body", "x"},
		"old-running": {"state", "inflight", "fingerprint", "fp", "token", "t-old", "created", now, "locked", now + 60_000, "expires", now + 60_000},
		"newer":       {"v", "3", "state", "completed", "fingerprint", "fp", "created", now, "expires", now + 3600_000, "status", 200, "body", "x"},
	} {
		if err := raw.HSet(ctx, s.Key(scope), fields...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	idemtest.RecordFormats(t, s, clock)
}

// TestIdempotencyStatsKeysLapse: the owner and stats keys lapse with the records
// they count, so an idle prefix leaves nothing behind; the stats hash keeps about
// a pair of fields per minute of the TTL.
func TestIdempotencyStatsKeysLapse(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := openIdempotency(t, srv, redis.Options{})
	raw := idemRawClient(t, srv)
	o := s.Owned("owner", 10)
	if _, started, err := o.Begin(ctx, "s", "fp", "t", 200*time.Millisecond); err != nil || !started {
		t.Fatalf("Begin: %v, %v", started, err)
	}
	for _, k := range []string{s.OwnerKey("owner"), s.StatsKey()} {
		if pttl := raw.PTTL(ctx, k).Val(); pttl <= 0 || pttl > 200*time.Millisecond {
			t.Fatalf("%s: PTTL %v, want at most the marker's 200ms", k, pttl)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if n := raw.Exists(ctx, s.Key("s"), s.OwnerKey("owner"), s.StatsKey()).Val(); n != 0 {
		t.Fatalf("%d keys left after every record lapsed", n)
	}
}

// TestIdempotencyStatsSwept: writes delete the fields of the minutes that are
// over, so the stats hash stays at about two fields per minute of the TTL however
// long records keep coming, even when nothing reads Stats.
func TestIdempotencyStatsSwept(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	clock := fakeclock.New(idemtest.T0)
	s := openIdempotency(t, srv, redis.Options{Clock: clock.Now})
	raw := idemRawClient(t, srv)
	const ttl = 5 * time.Minute
	for i := range 300 {
		scope, token := fmt.Sprintf("s%d", i), fmt.Sprintf("t%d", i)
		if _, started, err := s.Begin(ctx, scope, "fp", token, time.Second); err != nil || !started {
			t.Fatalf("Begin %d: %v, %v", i, started, err)
		}
		if err := s.Complete(ctx, scope, token, idempotency.Stored{Outcome: 200}, ttl); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
	}
	if n := raw.HLen(ctx, s.StatsKey()).Val(); n > 2*(5+2)+1 {
		t.Fatalf("the stats hash has %d fields after 300 minutes of a 5-minute TTL", n)
	}
	if n, _, err := s.Stats(ctx); err != nil || n != 5 {
		t.Fatalf("Stats = %d, %v; want the 4 live records and the one that lapsed this minute", n, err)
	}
}

// The contract holds on Redis Cluster: a record, its owner's zset and the stats
// hash share the prefix's hash tag, so each script's keys are in one slot.
func TestIdempotencyContractCluster(t *testing.T) {
	srv := redistest.Start(t, redistest.WithCluster())
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { c.Close() })
	idemtest.Run(t, func(t *testing.T, clock idkeeper.Clock) idempotency.Store {
		return openIdempotency(t, srv, redis.Options{Clock: clock, Client: c})
	})
}
