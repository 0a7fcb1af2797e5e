package redis_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/fakeclock"
	"github.com/idkeeper/idkeeper/internal/redistest"
	"github.com/idkeeper/idkeeper/internal/storetest"
	"github.com/idkeeper/idkeeper/redis"
)

var (
	prefixSeq atomic.Int64
	quiet     = slog.New(slog.NewTextHandler(io.Discard, nil))
	t0        = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

// open opens a Store with a prefix of its own on srv, so tests can share a server.
func open(t testing.TB, srv *redistest.Server, opts redis.Options) *redis.Store {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = fmt.Sprintf("test%d", prefixSeq.Add(1))
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s, err := redis.Open(srv.URL(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rawClient is a plain client on srv, for looking behind the Store's back.
func rawClient(t testing.TB, srv *redistest.Server) *goredis.Client {
	t.Helper()
	o, err := goredis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

func who(i int) idkeeper.Requester {
	return idkeeper.Requester{MachineID: "host", PID: 1, StartedAt: t0.Add(time.Duration(i) * time.Second)}
}

func TestContract(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return open(t, srv, redis.Options{Clock: clock})
	})
}

func TestContractTinyReclaimBatches(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return open(t, srv, redis.Options{Clock: clock, ReclaimBatch: 1})
	})
}

func TestOpenRejects(t *testing.T) {
	for _, c := range []struct {
		url  string
		opts redis.Options
	}{
		{"http://127.0.0.1:1/0", redis.Options{}},
		{"127.0.0.1:6379", redis.Options{}},
		{"redis://127.0.0.1:1/x", redis.Options{}},
		{"redis://127.0.0.1:1/0", redis.Options{Prefix: "a{b}"}},
		{"redis://127.0.0.1:1/0", redis.Options{WaitReplicas: -1}},
	} {
		if s, err := redis.Open(c.url, c.opts); err == nil {
			s.Close()
			t.Errorf("Open(%q, %+v) succeeded", c.url, c.opts)
		}
	}
}

// With no Clock, the scripts take now from Redis TIME.
func TestRedisTimeIsTheClock(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{})
	raw := rawClient(t, srv)
	if _, err := s.Init(ctx, 4); err != nil {
		t.Fatal(err)
	}
	before, err := raw.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Alloc(ctx, who(1), 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	after, err := raw.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := idkeeper.Millis(before), idkeeper.Millis(after)
	for what, got := range map[string]time.Time{"Now": now, "Grant.Now": g.Now, "GrantedAt": g.Leases[0].GrantedAt} {
		if got.Before(lo) || got.After(hi) {
			t.Errorf("%s = %v, outside Redis TIME [%v, %v]", what, got, lo, hi)
		}
	}
	if want := g.Now.Add(time.Minute); !g.Leases[0].ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v", g.Leases[0].ExpiresAt, want)
	}
	if !now.Equal(idkeeper.Millis(now)) || now.Location() != time.UTC {
		t.Errorf("Now = %v, want UTC milliseconds", now)
	}

	// A Clock replaces TIME: a lock taken at a fake time far from the real one.
	clk := fakeclock.New(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	f := open(t, srv, redis.Options{Clock: clk.Now})
	l, ok, err := f.TryLock(ctx, "job", "a", time.Minute)
	if err != nil || !ok || !l.LockedAt.Equal(clk.Now()) {
		t.Fatalf("TryLock on a fake clock = %+v, %v, %v; want locked at %v", l, ok, err, clk.Now())
	}
}

// A Redis that is down makes every method fail quickly with a plain error.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{})
	if _, err := s.Init(t.Context(), 4); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)

	calls := map[string]func(ctx context.Context) error{
		"Ping":  s.Ping,
		"Now":   func(ctx context.Context) error { _, err := s.Now(ctx); return err },
		"Init":  func(ctx context.Context) error { _, err := s.Init(ctx, 4); return err },
		"Alloc": func(ctx context.Context) error { _, err := s.Alloc(ctx, who(1), 1, time.Minute); return err },
		"Renew": func(ctx context.Context) error { _, err := s.Renew(ctx, who(1), time.Minute); return err },
		"Remove": func(ctx context.Context) error {
			_, err := s.Remove(ctx, who(1), time.Time{})
			return err
		},
		"Reclaim":    func(ctx context.Context) error { _, err := s.Reclaim(ctx, 0); return err },
		"Quarantine": func(ctx context.Context) error { return s.Quarantine(ctx, t0, 1) },
		"Counts":     func(ctx context.Context) error { _, err := s.Counts(ctx); return err },
		"Leases":     func(ctx context.Context) error { _, err := s.Leases(ctx); return err },
		"Node":       func(ctx context.Context) error { _, err := s.Node(ctx, 0); return err },
		"TryLock": func(ctx context.Context) error {
			_, _, err := s.TryLock(ctx, "j", "o", time.Minute)
			return err
		},
		"Unlock":       func(ctx context.Context) error { _, err := s.Unlock(ctx, "j", "o", 0); return err },
		"CreateAPIKey": func(ctx context.Context) error { return s.CreateAPIKey(ctx, idkeeper.APIKey{ID: "k"}) },
		"APIKey":       func(ctx context.Context) error { _, err := s.APIKey(ctx, "k"); return err },
		"APIKeys":      func(ctx context.Context) error { _, err := s.APIKeys(ctx); return err },
		"DeleteAPIKey": func(ctx context.Context) error { return s.DeleteAPIKey(ctx, "k") },
		"RecordSkew": func(ctx context.Context) error {
			return s.RecordSkew(ctx, idkeeper.SkewObservation{Requester: who(1)}, time.Minute)
		},
		"Skews":         func(ctx context.Context) error { _, err := s.SkewObservations(ctx); return err },
		"ReplicationID": func(ctx context.Context) error { _, err := s.ReplicationID(ctx); return err },
	}
	var wg sync.WaitGroup
	for name, call := range calls {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			start := time.Now()
			err := call(ctx)
			took := time.Since(start)
			var de *idkeeper.Error
			switch {
			case err == nil:
				t.Errorf("%s with Redis down succeeded", name)
			case errors.Is(err, idkeeper.ErrStoreReset) || errors.As(err, &de):
				t.Errorf("%s with Redis down = %v, want a plain store failure", name, err)
			case took > 3*time.Second:
				t.Errorf("%s with Redis down took %v", name, took)
			}
		})
	}
	wg.Wait()
	if w := s.CheckConfig(t.Context()); len(w) == 0 {
		t.Errorf("CheckConfig with Redis down gave no warning")
	}
}

// A Redis restart without persistence loses the sentinel: the next mutating call
// of every kind reports ErrStoreReset and writes nothing, and Reset recovers.
func TestRestartWithoutPersistenceIsStoreReset(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	clk := fakeclock.New(t0)
	s := open(t, srv, redis.Options{Clock: clk.Now})
	res, err := s.Init(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Alloc(ctx, who(1), 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)

	for name, call := range map[string]func() error{
		"Alloc":      func() error { _, err := s.Alloc(ctx, who(2), 1, time.Minute); return err },
		"Renew":      func() error { _, err := s.Renew(ctx, who(1), time.Hour); return err },
		"Remove":     func() error { _, err := s.Remove(ctx, who(1), time.Time{}); return err },
		"Reclaim":    func() error { _, err := s.Reclaim(ctx, 0); return err },
		"Quarantine": func() error { return s.Quarantine(ctx, time.Time{}) },
	} {
		if err := call(); !errors.Is(err, idkeeper.ErrStoreReset) {
			t.Errorf("%s after a restart without persistence = %v, want ErrStoreReset", name, err)
		}
	}
	if n, err := rawClient(t, srv).DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("refused calls wrote %d keys (%v)", n, err)
	}

	until := t0.Add(time.Hour)
	sentinel, recovered, err := s.Reset(ctx, res.Sentinel, idkeeper.ResetParams{Nodes: 8, Until: until, MinFence: g.Fence})
	if err != nil || !recovered || sentinel == res.Sentinel {
		t.Fatalf("Reset = %q, %v, %v; want a new sentinel, recovered", sentinel, recovered, err)
	}
	if c, err := s.Counts(ctx); err != nil || c != (idkeeper.Counts{Total: 8, Quarantined: 8}) {
		t.Fatalf("Counts after Reset = %+v, %v", c, err)
	}
	clk.Set(until)
	g2, err := s.Alloc(ctx, who(3), 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l := g2.Leases[0]; l.FencingToken <= g.Fence || !l.NotBefore.After(until) {
		t.Fatalf("lease after recovery %+v: want token above %d and NotBefore after %v", l, g.Fence, until)
	}
}

// With the append-only file on, a restart loses nothing and is no reset.
func TestRestartWithAOFKeepsLeases(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t, redistest.WithAOF())
	clk := fakeclock.New(t0)
	s := open(t, srv, redis.Options{Clock: clk.Now})
	if _, err := s.Init(ctx, 8); err != nil {
		t.Fatal(err)
	}
	g, err := s.Alloc(ctx, who(1), 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if w := s.CheckConfig(ctx); len(w) != 0 {
		t.Errorf("CheckConfig with AOF on = %q, want no warnings", w)
	}
	srv.Restart(t)
	clk.Advance(time.Second)
	r, err := s.Renew(ctx, who(1), time.Hour)
	if err != nil {
		t.Fatalf("Renew after a restart with AOF: %v", err)
	}
	if len(r.Leases) != 3 || r.Fence != g.Fence || r.Leases[0].FencingToken != g.Leases[0].FencingToken {
		t.Fatalf("Renew after restart = %+v, want the 3 leases of %+v", r, g)
	}
}

func TestReplicationIDChangesOnRestart(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{})
	a, err := s.ReplicationID(ctx)
	if err != nil || len(a) != 40 {
		t.Fatalf("ReplicationID = %q, %v; want 40 hex digits", a, err)
	}
	if b, _ := s.ReplicationID(ctx); b != a {
		t.Fatalf("ReplicationID changed without a restart: %q → %q", a, b)
	}
	srv.Restart(t)
	b, err := s.ReplicationID(ctx)
	if err != nil || b == a {
		t.Fatalf("ReplicationID after restart = %q, %v; want other than %q", b, err, a)
	}
}

func TestCheckConfig(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{})
	w := s.CheckConfig(ctx)
	if len(w) != 1 || !strings.Contains(w[0], "persists nothing") {
		t.Fatalf("CheckConfig on a server without persistence = %q, want one persistence warning", w)
	}
	raw := rawClient(t, srv)
	if err := raw.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.ConfigSet(ctx, "save", "3600 1").Err(); err != nil {
		t.Fatal(err)
	}
	w = s.CheckConfig(ctx)
	if len(w) != 2 || !strings.Contains(w[0], "allkeys-lru") || !strings.Contains(w[1], "RDB") {
		t.Fatalf("CheckConfig with eviction and RDB only = %q, want an eviction and an RDB warning", w)
	}
	for k, v := range map[string]string{"maxmemory-policy": "noeviction", "appendonly": "yes"} {
		if err := raw.ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if w = s.CheckConfig(ctx); len(w) != 0 {
		t.Fatalf("CheckConfig with noeviction and AOF = %q, want none", w)
	}
}

// hashTag is the part of key Redis Cluster hashes: between the first '{' and the
// first '}' after it.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// Every key the store writes carries the same hash tag, so Redis Cluster keeps them
// in one slot; even a requester whose machine ID has braces of its own.
func TestKeysShareOneHashTag(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	clk := fakeclock.New(t0)
	s := open(t, srv, redis.Options{Clock: clk.Now, Prefix: "tagged"})
	odd := idkeeper.Requester{MachineID: "{evil}, a|b/c", PID: 7, StartedAt: t0}
	if _, err := s.Init(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(ctx, odd, 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(ctx, who(1), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, who(1), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Quarantine(ctx, t0.Add(time.Hour), 3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.TryLock(ctx, "job", "me", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAPIKey(ctx, idkeeper.APIKey{ID: "k", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordSkew(ctx, idkeeper.SkewObservation{Requester: odd, ObservedAt: t0}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ls, err := s.Leases(ctx)
	if err != nil || len(ls) != 2 || ls[0].Requester != odd {
		t.Fatalf("Leases = %+v, %v; want 2 leases of %v", ls, err, odd)
	}
	keys, err := rawClient(t, srv).Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 10 {
		t.Fatalf("only %d keys written: %q", len(keys), keys)
	}
	names := append(keys, s.KeysForTest()...)
	for _, k := range names {
		if !strings.HasPrefix(k, "{tagged}:") || hashTag(k) != "tagged" {
			t.Errorf("key %q does not carry the hash tag {tagged}", k)
		}
	}
}

// Mutating calls before Init have no sentinel to match.
func TestMutatingBeforeInit(t *testing.T) {
	s := open(t, redistest.Start(t), redis.Options{})
	if _, err := s.Alloc(t.Context(), who(1), 1, time.Minute); !errors.Is(err, idkeeper.ErrStoreReset) {
		t.Fatalf("Alloc before Init = %v, want ErrStoreReset", err)
	}
}

// Scripts run again after SCRIPT FLUSH (EVALSHA falls back to EVAL).
func TestScriptCacheFlushed(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{})
	if _, err := s.Init(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if err := rawClient(t, srv).ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(ctx, who(1), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// A Redis that accepts connections but does not answer (paused, overloaded) holds
// a call no longer than its context allows.
func TestRedisUnresponsiveHonoursContext(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{})
	if _, err := s.Init(t.Context(), 4); err != nil {
		t.Fatal(err)
	}
	if err := rawClient(t, srv).Do(t.Context(), "CLIENT", "PAUSE", 3000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Alloc(ctx, who(1), 1, time.Minute)
	if took := time.Since(start); err == nil || took > time.Second {
		t.Fatalf("Alloc on a paused Redis = %v after %v, want an error within the 200 ms deadline", err, took)
	}
}

func TestOpenHidesPassword(t *testing.T) {
	_, err := redis.Open("redis://user:s3cret@127.0.0.1:1/0\x7f", redis.Options{})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Open with a bad URL = %v, want an error without the password", err)
	}
}

// A pool of 4,096 and grants of thousands of node IDs at once exercise the
// chunked commands of the scripts (Lua's unpack takes only so many values).
func TestLargePool(t *testing.T) {
	ctx := t.Context()
	clk := fakeclock.New(t0)
	s := open(t, redistest.Start(t), redis.Options{Clock: clk.Now})
	res, err := s.Init(ctx, 4096)
	if err != nil {
		t.Fatal(err)
	}
	wantCounts := func(want idkeeper.Counts) {
		t.Helper()
		if c, err := s.Counts(ctx); err != nil || c != want {
			t.Fatalf("Counts = %+v, %v; want %+v", c, err, want)
		}
	}
	g, err := s.Alloc(ctx, who(1), 2500, time.Minute)
	if err != nil || len(g.Leases) != 2500 || g.Fence != 2500 {
		t.Fatalf("Alloc(2500) = %d leases, fence %d, %v", len(g.Leases), g.Fence, err)
	}
	if _, err := s.Alloc(ctx, who(2), 1597, time.Minute); idkeeper.ErrorCode(err) != idkeeper.CodeNodeIDsExhausted {
		t.Fatalf("Alloc(1597) of 1596 left = %v", err)
	}
	wantCounts(idkeeper.Counts{Total: 4096, Remaining: 1596, Leased: 2500})
	clk.Advance(2 * time.Minute)
	if n, err := s.Reclaim(ctx, 0); err != nil || n != 2500 {
		t.Fatalf("Reclaim = %d, %v; want 2500", n, err)
	}
	wantCounts(idkeeper.Counts{Total: 4096, Remaining: 4096})

	until := clk.Now().Add(time.Hour)
	if _, ok, err := s.Reset(ctx, res.Sentinel, idkeeper.ResetParams{Nodes: 4096, Until: until, MinFence: 9000}); err != nil || !ok {
		t.Fatalf("Reset = %v, %v", ok, err)
	}
	wantCounts(idkeeper.Counts{Total: 4096, Quarantined: 4096})
	clk.Set(until.Add(time.Millisecond))
	g, err = s.Alloc(ctx, who(3), 4096, time.Minute)
	if err != nil || len(g.Leases) != 4096 || g.Leases[0].FencingToken <= 9000 {
		t.Fatalf("Alloc(4096) after the quarantine = %d leases, %v", len(g.Leases), err)
	}
	if n, err := s.Remove(ctx, who(3), clk.Now()); err != nil || n != 4096 {
		t.Fatalf("Remove = %d, %v", n, err)
	}
	wantCounts(idkeeper.Counts{Total: 4096, Remaining: 4096})
}
