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
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/redis"
)

// The contract suite's wipe cases skip a store that is not a Wiper: a renamed
// WipeForTest must fail the build, not skip them.
var _ storetest.Wiper = (*redis.Store)(nil)

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

// testKey is the API key the tests' leases belong to.
const testKey = "test-key"

// initGuard initialises s with a pool of nodes and returns the guard of the
// generation Init reports, as a registry that adopted it would send.
func initGuard(t testing.TB, s *redis.Store, nodes int) idkeeper.Guard {
	t.Helper()
	res, err := s.Init(t.Context(), idkeeper.PoolSpec{Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	return idkeeper.Guard{Generation: res.Generation.ID}
}

func allocP(r idkeeper.Requester, count int, first time.Duration) idkeeper.AllocParams {
	return idkeeper.AllocParams{Requester: r, KeyID: testKey, Count: count, First: first}
}

func renewP(r idkeeper.Requester, d time.Duration) idkeeper.RenewParams {
	return idkeeper.RenewParams{Requester: r, KeyID: testKey, Duration: d}
}

func removeP(r idkeeper.Requester, mintedUpTo time.Time) idkeeper.RemoveParams {
	return idkeeper.RemoveParams{Requester: r, KeyID: testKey, MintedUpTo: mintedUpTo}
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
		{"redis://127.0.0.1:1/0", redis.Options{WaitTimeout: -time.Second}},
		{"redis://127.0.0.1:1/0", redis.Options{ReclaimBatch: -1}},
	} {
		if s, err := redis.Open(c.url, c.opts); err == nil {
			s.Close()
			t.Errorf("Open(%q, %+v) succeeded", c.url, c.opts)
		}
	}
}

// With no Clock, the scripts take now from Redis TIME, and the guard compares the
// caller's clock with it.
func TestRedisTimeIsTheClock(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{})
	raw := rawClient(t, srv)
	g := initGuard(t, s, 4)
	before, err := raw.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gr, err := s.Alloc(ctx, g, allocP(who(1), 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after, err := raw.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := protocol.Millis(before), protocol.Millis(after)
	for what, got := range map[string]time.Time{"Now": now, "Grant.Now": gr.Now, "GrantedAt": gr.Leases[0].GrantedAt,
		"Status.Now": st.Now} {
		if got.Before(lo) || got.After(hi) {
			t.Errorf("%s = %v, outside Redis TIME [%v, %v]", what, got, lo, hi)
		}
	}
	if at := st.Generation.At; at.After(lo) || lo.Sub(at) > time.Minute {
		t.Errorf("Generation.At = %v, want Redis TIME at Init, just before %v", at, lo)
	}
	if want := gr.Now.Add(time.Minute); !gr.Leases[0].ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v", gr.Leases[0].ExpiresAt, want)
	}
	if !now.Equal(protocol.Millis(now)) || now.Location() != time.UTC {
		t.Errorf("Now = %v, want UTC milliseconds", now)
	}

	// The guard's clock check reads Redis TIME too: a registry clock within
	// MaxSkew passes, one an hour off is refused and nothing is written.
	g.Now, g.MaxSkew = time.Now(), 5*time.Second
	if _, err := s.Renew(ctx, g, renewP(who(1), time.Hour)); err != nil {
		t.Fatalf("Renew with the registry's clock in step: %v", err)
	}
	g.Now = time.Now().Add(time.Hour)
	if _, err := s.Alloc(ctx, g, allocP(who(2), 1, time.Minute)); !errors.Is(err, idkeeper.ErrStoreClockSkew) {
		t.Fatalf("Alloc with the registry's clock an hour ahead = %v, want ErrStoreClockSkew", err)
	}
	if c, err := s.Counts(ctx); err != nil || c.Leased != 1 {
		t.Fatalf("Counts after a refused Alloc = %+v, %v; want the one lease", c, err)
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
	g := initGuard(t, s, 4)
	srv.Stop(t)

	calls := map[string]func(ctx context.Context) error{
		"Ping":   s.Ping,
		"Now":    func(ctx context.Context) error { _, err := s.Now(ctx); return err },
		"Status": func(ctx context.Context) error { _, err := s.Status(ctx); return err },
		"Init":   func(ctx context.Context) error { _, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 4}); return err },
		"Grow":   func(ctx context.Context) error { return s.Grow(ctx, g, idkeeper.PoolSpec{Nodes: 5}) },
		"Reset": func(ctx context.Context) error {
			_, err := s.Reset(ctx, idkeeper.ResetParams{Pool: idkeeper.PoolSpec{Nodes: 4}, Until: t0})
			return err
		},
		"Alloc": func(ctx context.Context) error { _, err := s.Alloc(ctx, g, allocP(who(1), 1, time.Minute)); return err },
		"Renew": func(ctx context.Context) error { _, err := s.Renew(ctx, g, renewP(who(1), time.Minute)); return err },
		"Remove": func(ctx context.Context) error {
			_, err := s.Remove(ctx, g, removeP(who(1), time.Time{}))
			return err
		},
		"Reclaim":     func(ctx context.Context) error { _, err := s.Reclaim(ctx, g, 0); return err },
		"Quarantine":  func(ctx context.Context) error { return s.Quarantine(ctx, g, t0, 1) },
		"Counts":      func(ctx context.Context) error { _, err := s.Counts(ctx); return err },
		"Leases":      func(ctx context.Context) error { _, err := s.Leases(ctx); return err },
		"Node":        func(ctx context.Context) error { _, err := s.Node(ctx, 0); return err },
		"KeyHoldings": func(ctx context.Context) error { _, err := s.KeyHoldings(ctx); return err },
		"TryLock": func(ctx context.Context) error {
			_, _, err := s.TryLock(ctx, "j", "o", time.Minute)
			return err
		},
		"Unlock":       func(ctx context.Context) error { _, err := s.Unlock(ctx, "j", "o", 0); return err },
		"CreateAPIKey": func(ctx context.Context) error { return s.CreateAPIKey(ctx, idkeeper.APIKey{ID: "k"}) },
		"APIKey":       func(ctx context.Context) error { _, err := s.APIKey(ctx, "k"); return err },
		"APIKeys":      func(ctx context.Context) error { _, err := s.APIKeys(ctx); return err },
		"RevokeAPIKey": func(ctx context.Context) error { return s.RevokeAPIKey(ctx, "k", t0) },
		"TouchAPIKey":  func(ctx context.Context) error { return s.TouchAPIKey(ctx, "k", t0) },
		"RecordSkew": func(ctx context.Context) error {
			return s.RecordSkew(ctx, idkeeper.SkewObservation{Requester: who(1)}, time.Minute)
		},
		"Skews":         func(ctx context.Context) error { _, err := s.SkewObservations(ctx); return err },
		"ReplicationID": func(ctx context.Context) error { _, err := s.ReplicationID(ctx); return err },
		"Durability":    func(ctx context.Context) error { _, _, err := s.Durability(ctx); return err },
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
			case errors.Is(err, idkeeper.ErrStoreReset) || errors.Is(err, idkeeper.ErrStoreClockSkew) || errors.As(err, &de):
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

// A Redis restart without persistence loses the generation: the next guarded call
// of every kind reports ErrStoreReset (the generation changed) and writes nothing,
// and Reset recovers under a new generation.
func TestRestartWithoutPersistenceIsStoreReset(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	clk := fakeclock.New(t0)
	s := open(t, srv, redis.Options{Clock: clk.Now})
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 8})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	gr, err := s.Alloc(ctx, g, allocP(who(1), 2, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	g.MinFence = gr.Fence
	srv.Restart(t)

	for name, call := range map[string]func() error{
		"Alloc":      func() error { _, err := s.Alloc(ctx, g, allocP(who(2), 1, time.Minute)); return err },
		"Renew":      func() error { _, err := s.Renew(ctx, g, renewP(who(1), time.Hour)); return err },
		"Remove":     func() error { _, err := s.Remove(ctx, g, removeP(who(1), time.Time{})); return err },
		"Reclaim":    func() error { _, err := s.Reclaim(ctx, g, 0); return err },
		"Quarantine": func() error { return s.Quarantine(ctx, g, time.Time{}) },
		"Grow":       func() error { return s.Grow(ctx, g, idkeeper.PoolSpec{Nodes: 9}) },
	} {
		if err := call(); !errors.Is(err, idkeeper.ErrStoreReset) || !errors.Is(err, idkeeper.ErrGenerationChanged) {
			t.Errorf("%s after a restart without persistence = %v, want ErrStoreReset (ErrGenerationChanged)", name, err)
		}
	}
	if n, err := rawClient(t, srv).DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("refused calls wrote %d keys (%v)", n, err)
	}
	if st, err := s.Status(ctx); err != nil || st.Initialised || st.Pool.Nodes != 0 {
		t.Fatalf("Status after the restart = %+v, %v; want not initialised", st, err)
	}

	until := t0.Add(time.Hour)
	rr, err := s.Reset(ctx, idkeeper.ResetParams{Seen: res.Generation, Pool: idkeeper.PoolSpec{Nodes: 8}, Until: until, MinFence: gr.Fence})
	if err != nil || !rr.NewGeneration || rr.Generation.ID == res.Generation.ID || rr.Generation.Number != 2 ||
		rr.Generation.Origin != idkeeper.OriginRecovered {
		t.Fatalf("Reset = %+v, %v; want a new generation 2, recovered", rr, err)
	}
	if c, err := s.Counts(ctx); err != nil || c != (idkeeper.Counts{Total: 8, Quarantined: 8}) {
		t.Fatalf("Counts after Reset = %+v, %v", c, err)
	}
	if _, err := s.Alloc(ctx, g, allocP(who(3), 1, time.Minute)); !errors.Is(err, idkeeper.ErrGenerationChanged) {
		t.Fatalf("Alloc under the lost generation = %v, want ErrGenerationChanged", err)
	}
	g.Generation = rr.Generation.ID
	clk.Set(until)
	g2, err := s.Alloc(ctx, g, allocP(who(3), 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if l := g2.Leases[0]; l.FencingToken <= gr.Fence || !l.NotBefore.After(until) {
		t.Fatalf("lease after recovery %+v: want token above %d and NotBefore after %v", l, gr.Fence, until)
	}
	// A guard that knows a token the store never reached is a lost write too.
	g.MinFence = g2.Fence + 1
	if _, err := s.Renew(ctx, g, renewP(who(3), time.Hour)); !errors.Is(err, idkeeper.ErrStoreReset) ||
		!errors.Is(err, idkeeper.ErrFenceRegression) {
		t.Fatalf("Renew with MinFence above the counter = %v, want ErrStoreReset (ErrFenceRegression)", err)
	}
}

// With the append-only file on, a restart loses nothing and is no reset.
func TestRestartWithAOFKeepsLeases(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t, redistest.WithAOF())
	clk := fakeclock.New(t0)
	s := open(t, srv, redis.Options{Clock: clk.Now})
	g := initGuard(t, s, 8)
	gr, err := s.Alloc(ctx, g, allocP(who(1), 3, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if w := s.CheckConfig(ctx); len(w) != 0 {
		t.Errorf("CheckConfig with AOF on = %q, want no warnings", w)
	}
	srv.Restart(t)
	clk.Advance(time.Second)
	g.MinFence = gr.Fence
	r, err := s.Renew(ctx, g, renewP(who(1), time.Hour))
	if err != nil {
		t.Fatalf("Renew after a restart with AOF: %v", err)
	}
	if len(r.Leases) != 3 || r.Fence != gr.Fence || r.Leases[0].FencingToken != gr.Leases[0].FencingToken {
		t.Fatalf("Renew after restart = %+v, want the 3 leases of %+v", r, gr)
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
	g := initGuard(t, s, 4)
	if _, err := s.Alloc(ctx, g, allocP(odd, 2, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(ctx, g, allocP(who(1), 1, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, g, removeP(who(1), time.Time{})); err != nil {
		t.Fatal(err)
	}
	if err := s.Quarantine(ctx, g, t0.Add(time.Hour), 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reset(ctx, idkeeper.ResetParams{Pool: idkeeper.PoolSpec{Nodes: 4}, Until: t0.Add(time.Hour), MinFence: 3}); err != nil {
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
	if len(keys) < 16 {
		t.Fatalf("only %d keys written: %q", len(keys), keys)
	}
	names := append(keys, s.KeysForTest()...)
	for _, k := range names {
		if !strings.HasPrefix(k, "{tagged}:") || hashTag(k) != "tagged" {
			t.Errorf("key %q does not carry the hash tag {tagged}", k)
		}
	}
}

// Lease records round-trip requester keys and API key IDs with commas, slashes,
// digits and braces, and the empty key ID: neither can be taken for the other.
func TestLeaseRecordsRoundTrip(t *testing.T) {
	ctx := t.Context()
	clk := fakeclock.New(t0)
	s := open(t, redistest.Start(t), redis.Options{Clock: clk.Now})
	g := initGuard(t, s, 8)
	type holder struct {
		r   idkeeper.Requester
		key string
	}
	holders := []holder{
		{idkeeper.Requester{MachineID: "a,1,2/3", PID: 12, StartedAt: t0, Instance: "x_-9"}, "7,8/9"},
		{idkeeper.Requester{MachineID: "12,", PID: 3, StartedAt: t0.Add(time.Millisecond)}, ""},
		{idkeeper.Requester{MachineID: "ä {b}", PID: 99, StartedAt: t0}, "{k}/ä,"},
	}
	want := map[string]int{}
	for i, h := range holders {
		p := allocP(h.r, i+1, time.Minute)
		p.KeyID = h.key
		gr, err := s.Alloc(ctx, g, p)
		if err != nil {
			t.Fatal(err)
		}
		want[h.key] = i + 1
		for _, l := range gr.Leases {
			st, err := s.Node(ctx, l.NodeID)
			if err != nil || st.Lease == nil {
				t.Fatalf("Node(%d) = %+v, %v", l.NodeID, st, err)
			}
			if got := *st.Lease; got.Requester != h.r || got.KeyID != h.key || got.FencingToken != l.FencingToken {
				t.Fatalf("stored lease %+v, want requester %v, key %q", got, h.r, h.key)
			}
		}
		if rg, err := s.Renew(ctx, g, idkeeper.RenewParams{Requester: h.r, KeyID: h.key, Duration: time.Hour}); err != nil ||
			len(rg.Leases) != i+1 {
			t.Fatalf("Renew of %v with key %q = %+v, %v", h.r, h.key, rg, err)
		}
	}
	hs, err := s.KeyHoldings(ctx)
	if err != nil || len(hs) != len(want) {
		t.Fatalf("KeyHoldings = %v, %v; want %v", hs, err, want)
	}
	for k, n := range want {
		if hs[k] != n {
			t.Fatalf("KeyHoldings = %v, want %v", hs, want)
		}
	}
	ls, err := s.Leases(ctx)
	if err != nil || len(ls) != 6 {
		t.Fatalf("Leases = %+v, %v", ls, err)
	}
	// The empty key owns its leases like any other.
	if _, err := s.Remove(ctx, g, idkeeper.RemoveParams{Requester: holders[1].r, KeyID: "x"}); protocol.ErrorCode(err) != protocol.CodeLeaseNotOwned {
		t.Fatalf("Remove with another key = %v, want LEASE_NOT_OWNED", err)
	}
	if n, err := s.Remove(ctx, g, idkeeper.RemoveParams{Requester: holders[1].r, KeyID: ""}); err != nil || n != 2 {
		t.Fatalf("Remove with the empty key = %d, %v", n, err)
	}
	if hs, err := s.KeyHoldings(ctx); err != nil || len(hs) != 2 || hs[""] != 0 {
		t.Fatalf("KeyHoldings after the remove = %v, %v", hs, err)
	}
}

// Keys written by a build before store generations (a "sentinel" in the meta
// hash, lease records of another format) are not read: Init and Reset refuse
// them with a plain error that says what to do, and guarded calls find no
// generation.
func TestOldLayoutRefused(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{Prefix: "old"})
	raw := rawClient(t, srv)
	if err := raw.HSet(ctx, "{old}:meta", "sentinel", "abc", "nodes", 4, "fence", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.HSet(ctx, "{old}:leases", "0", "1,2,1,3,4,1/2/host").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 4}); err == nil || protocol.ErrorCode(err) != protocol.CodeInternal || !strings.Contains(err.Error(), "older") {
		t.Fatalf("Init on the old layout = %v, want a plain error naming it", err)
	}
	if _, err := s.Reset(ctx, idkeeper.ResetParams{Pool: idkeeper.PoolSpec{Nodes: 4}, Until: t0}); err == nil || !strings.Contains(err.Error(), "older") {
		t.Fatalf("Reset on the old layout = %v, want a plain error naming it", err)
	}
	if _, err := s.Alloc(ctx, idkeeper.Guard{Generation: "abc"}, allocP(who(1), 1, time.Minute)); !errors.Is(err, idkeeper.ErrStoreReset) {
		t.Fatalf("Alloc on the old layout = %v, want ErrStoreReset", err)
	}
	if st, err := s.Status(ctx); err != nil || st.Initialised {
		t.Fatalf("Status of the old layout = %+v, %v; want not initialised", st, err)
	}
	if n, err := raw.HLen(ctx, "{old}:meta").Result(); err != nil || n != 3 {
		t.Fatalf("refused calls changed the meta hash: %d fields, %v", n, err)
	}
}

// Scripts run again after SCRIPT FLUSH (EVALSHA falls back to EVAL).
func TestScriptCacheFlushed(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{})
	g := initGuard(t, s, 4)
	if err := rawClient(t, srv).ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(ctx, g, allocP(who(1), 1, time.Minute)); err != nil {
		t.Fatal(err)
	}
}

// A Redis that accepts connections but does not answer (paused, overloaded) holds
// a call no longer than its context allows.
func TestRedisUnresponsiveHonoursContext(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{})
	g := initGuard(t, s, 4)
	if err := rawClient(t, srv).Do(t.Context(), "CLIENT", "PAUSE", 3000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Alloc(ctx, g, allocP(who(1), 1, time.Minute))
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
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	wantCounts := func(want idkeeper.Counts) {
		t.Helper()
		if c, err := s.Counts(ctx); err != nil || !c.Equal(want) {
			t.Fatalf("Counts = %+v, %v; want %+v", c, err, want)
		}
	}
	gr, err := s.Alloc(ctx, g, allocP(who(1), 2500, time.Minute))
	if err != nil || len(gr.Leases) != 2500 || gr.Fence != 2500 {
		t.Fatalf("Alloc(2500) = %d leases, fence %d, %v", len(gr.Leases), gr.Fence, err)
	}
	if _, err := s.Alloc(ctx, g, allocP(who(2), 1597, time.Minute)); protocol.ErrorCode(err) != protocol.CodeNodeIDsExhausted {
		t.Fatalf("Alloc(1597) of 1596 left = %v", err)
	}
	wantCounts(idkeeper.Counts{Total: 4096, Remaining: 1596, Leased: 2500})
	if hs, err := s.KeyHoldings(ctx); err != nil || hs[testKey] != 2500 {
		t.Fatalf("KeyHoldings = %v, %v", hs, err)
	}
	clk.Advance(2 * time.Minute)
	if n, err := s.Reclaim(ctx, g, 0); err != nil || n != 2500 {
		t.Fatalf("Reclaim = %d, %v; want 2500", n, err)
	}
	wantCounts(idkeeper.Counts{Total: 4096, Remaining: 4096})
	if hs, err := s.KeyHoldings(ctx); err != nil || len(hs) != 0 {
		t.Fatalf("KeyHoldings after Reclaim = %v, %v", hs, err)
	}

	until := clk.Now().Add(time.Hour)
	rr, err := s.Reset(ctx, idkeeper.ResetParams{Seen: res.Generation, Pool: idkeeper.PoolSpec{Nodes: 4096}, Until: until, MinFence: 9000})
	if err != nil || !rr.NewGeneration {
		t.Fatalf("Reset = %+v, %v", rr, err)
	}
	g.Generation = rr.Generation.ID
	wantCounts(idkeeper.Counts{Total: 4096, Quarantined: 4096})
	clk.Set(until.Add(time.Millisecond))
	gr, err = s.Alloc(ctx, g, allocP(who(3), 4096, time.Minute))
	if err != nil || len(gr.Leases) != 4096 || gr.Leases[0].FencingToken <= 9000 {
		t.Fatalf("Alloc(4096) after the quarantine = %d leases, %v", len(gr.Leases), err)
	}
	if n, err := s.Remove(ctx, g, removeP(who(3), clk.Now())); err != nil || n != 4096 {
		t.Fatalf("Remove = %d, %v", n, err)
	}
	// mintedUpTo = now: every node cools for the rest of this millisecond.
	wantCounts(idkeeper.Counts{Total: 4096, Remaining: 4096, Cooling: 4096, NextReadyAt: clk.Now().Add(time.Millisecond)})
	clk.Advance(time.Millisecond)
	wantCounts(idkeeper.Counts{Total: 4096, Remaining: 4096})
}
