package idkeeper_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/protocol"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type env struct {
	reg   *idkeeper.Registry
	store idkeeper.Store
	clk   *fakeclock.Clock
	logs  *syncWriter
	obs   *recorder
	cfg   idkeeper.Config
}

// testSecret is the receipt secret of every test registry.
var testSecret = []byte("receipt-secret-for-tests-0123456789abcdef")

// newEnv opens a registry over a real bbolt file with a fake clock, initialised.
func newEnv(t *testing.T, cfg idkeeper.Config) *env {
	t.Helper()
	clk := fakeclock.New(t0)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return openEnv(t, st, clk, cfg)
}

// openEnv initialises st when it holds no generation (as `idkeeper init` does) and
// opens a registry over it whose own clock is clk, with the test receipt secret.
func openEnv(t *testing.T, st idkeeper.Store, clk *fakeclock.Clock, cfg idkeeper.Config) *env {
	t.Helper()
	pool := idkeeper.PoolSpec{First: cfg.First, Nodes: cfg.Nodes, Layout: cfg.Layout}
	if pool.Nodes == 0 {
		pool.Nodes = pool.LayoutOrDefault().Nodes() - int(pool.First)
	}
	if s, err := st.Status(context.Background()); err != nil {
		t.Fatal(err)
	} else if !s.Initialised {
		if _, err := st.Init(context.Background(), pool); err != nil {
			t.Fatal(err)
		}
	}
	return startEnv(t, st, clk, cfg)
}

// startEnv opens a registry over st as it is.
func startEnv(t *testing.T, st idkeeper.Store, clk *fakeclock.Clock, cfg idkeeper.Config) *env {
	t.Helper()
	logs := &syncWriter{}
	obs := &recorder{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	cfg.Observer = obs
	if cfg.CleanupInterval == 0 {
		cfg.CleanupInterval = time.Hour // the loop must not interfere; tests call Cleanup
	}
	if cfg.Clock == nil {
		cfg.Clock = clk.Now
	}
	if cfg.ReceiptSecret == nil {
		cfg.ReceiptSecret = testSecret
	}
	reg, err := idkeeper.NewRegistry(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return &env{reg: reg, store: st, clk: clk, logs: logs, obs: obs, cfg: cfg}
}

// who is requester pid; all share machine and start time, and each has its own
// instance, as sessions of the client library do.
func who(pid int) idkeeper.Requester {
	return idkeeper.Requester{MachineID: "machine-a", PID: pid, StartedAt: t0.Add(-time.Hour), Instance: fmt.Sprintf("i%d", pid)}
}

// receipts returns the receipts of a grant's leases.
func receipts(g idkeeper.Grant) []string {
	out := make([]string, len(g.Leases))
	for i, l := range g.Leases {
		out[i] = l.Receipt
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func TestConfigRangesNameTheSetting(t *testing.T) {
	cases := []struct {
		cfg     idkeeper.Config
		setting string
	}{
		{idkeeper.Config{FirstLease: 30 * time.Second}, "first-lease"},
		{idkeeper.Config{FirstLease: 21 * time.Minute}, "first-lease"},
		{idkeeper.Config{LeaseDuration: 5 * time.Minute}, "lease-duration"},
		{idkeeper.Config{Grace: 61 * time.Minute}, "cleanup-grace"},
		{idkeeper.Config{CleanupInterval: 2 * time.Hour}, "cleanup-interval"},
		{idkeeper.Config{Nodes: 5000}, "nodes"},
	}
	for _, c := range cases {
		_, err := idkeeper.NewRegistry(nil, c.cfg)
		var re *idkeeper.RangeError
		if !errors.As(err, &re) || re.Setting != c.setting {
			t.Errorf("%+v: got %v, want a RangeError for %s", c.cfg, err, c.setting)
			continue
		}
		if !strings.Contains(err.Error(), c.setting) || !strings.Contains(err.Error(), "..") {
			t.Errorf("message %q does not name the setting and its range", err)
		}
	}
	reg, err := idkeeper.NewRegistry(nil, idkeeper.Config{Grace: idkeeper.NoGrace})
	if err != nil || reg.Config().Grace != 0 {
		t.Fatalf("NoGrace: %v, grace %v", err, reg.Config().Grace)
	}
	def, _ := idkeeper.NewRegistry(nil, idkeeper.Config{})
	c := def.Config()
	if c.FirstLease != 10*time.Minute || c.LeaseDuration != 48*time.Hour || c.Grace != 10*time.Minute ||
		c.CleanupInterval != 10*time.Minute || c.Nodes != 4096 {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestSkewLevels(t *testing.T) {
	g := 10 * time.Minute
	cases := []struct {
		skew, grace time.Duration
		want        idkeeper.SkewLevel
	}{
		{0, g, idkeeper.SkewOK},
		{5 * time.Minute, g, idkeeper.SkewOK},
		{5*time.Minute + time.Millisecond, g, idkeeper.SkewWarn},
		{-6 * time.Minute, g, idkeeper.SkewWarn},
		{-time.Hour, g, idkeeper.SkewWarn}, // ahead is never rejected: the client stops early
		{g, g, idkeeper.SkewWarn},
		{g + time.Millisecond, g, idkeeper.SkewReject},
		{time.Hour, 0, idkeeper.SkewWarn}, // grace 0: only logged
		{0, 0, idkeeper.SkewOK},
	}
	for _, c := range cases {
		if got := idkeeper.SkewLevelFor(c.skew, c.grace); got != c.want {
			t.Errorf("SkewLevelFor(%v, %v) = %s, want %s", c.skew, c.grace, got, c.want)
		}
	}
}

func TestAlloc_RejectsLargeSkewAndRecordsIt(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	ctx := context.Background()
	behind := t0.Add(-11 * time.Minute)
	_, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 1, ClientNow: &behind, RemoteIP: "127.0.0.9"})
	var ie *idkeeper.Error
	if !errors.As(err, &ie) || ie.Code != protocol.CodeClockSkewTooLarge {
		t.Fatalf("got %v, want CLOCK_SKEW_TOO_LARGE", err)
	}
	if ie.Details["skewMs"] != int64(11*60*1000) || ie.Details["thresholdMs"] != int64(10*60*1000) ||
		!strings.Contains(ie.Message, "NTP") {
		t.Fatalf("details %v, message %q", ie.Details, ie.Message)
	}
	if c, _ := e.reg.Remaining(ctx); c.Leased != 0 {
		t.Fatalf("a rejected alloc leased %d node IDs", c.Leased)
	}
	obs, err := e.store.SkewObservations(ctx)
	if err != nil || len(obs) != 1 || obs[0].Level != idkeeper.SkewReject || obs[0].RemoteIP != "127.0.0.9" {
		t.Fatalf("observations %+v, %v", obs, err)
	}
	if !strings.Contains(e.logs.String(), "alloc rejected") || !strings.Contains(e.logs.String(), "127.0.0.9") {
		t.Fatalf("no warning with the remote IP logged:\n%s", e.logs)
	}

	// Renew is never rejected, however far behind.
	ok := t0
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1, ClientNow: &ok}); err != nil {
		t.Fatal(err)
	}
	far := t0.Add(-5 * time.Hour)
	g, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(2), ClientNow: &far})
	if err != nil || len(g.Leases) != 1 {
		t.Fatalf("renew with skew: %v %+v", err, g)
	}

	// The observation lapses after lease + grace.
	e.clk.Advance(48*time.Hour + 10*time.Minute + time.Second)
	if obs, _ := e.store.SkewObservations(ctx); len(obs) != 0 {
		t.Fatalf("observations did not lapse: %+v", obs)
	}
}

func TestSkewWithZeroGraceIsOnlyLogged(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Grace: idkeeper.NoGrace})
	behind := t0.Add(-time.Hour)
	if _, err := e.reg.Alloc(context.Background(), idkeeper.AllocRequest{Requester: who(1), Count: 1, ClientNow: &behind}); err != nil {
		t.Fatalf("grace 0 rejected an alloc: %v", err)
	}
	if !strings.Contains(e.logs.String(), "clock skew") {
		t.Fatal("skew was not logged")
	}
}

func TestAlloc_ValidatesInput(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 8})
	ctx := context.Background()
	cases := []struct {
		req   idkeeper.AllocRequest
		field string
	}{
		{idkeeper.AllocRequest{Requester: who(1), Count: 0}, "count"},
		{idkeeper.AllocRequest{Requester: idkeeper.Requester{PID: 1, StartedAt: t0}, Count: 1}, "requester.machineId"},
		{idkeeper.AllocRequest{Requester: idkeeper.Requester{MachineID: "a\nb", PID: 1, StartedAt: t0}, Count: 1}, "requester.machineId"},
		{idkeeper.AllocRequest{Requester: idkeeper.Requester{MachineID: "m", PID: 0, StartedAt: t0}, Count: 1}, "requester.pid"},
		{idkeeper.AllocRequest{Requester: idkeeper.Requester{MachineID: "m", PID: 1}, Count: 1}, "requester.startedAt"},
	}
	for _, c := range cases {
		_, err := e.reg.Alloc(ctx, c.req)
		var ie *idkeeper.Error
		if !errors.As(err, &ie) || ie.Code != protocol.CodeInvalidRequest || ie.Field != c.field {
			t.Errorf("%+v: got %v, want INVALID_REQUEST on %s", c.req, err, c.field)
		}
	}
	// A count above the pool (or above MaxCount) is the one code the gateway
	// sends for a count above its limit too.
	for _, n := range []int{9, protocol.MaxCount + 1} {
		_, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: n})
		var ie *idkeeper.Error
		if !errors.As(err, &ie) || ie.Code != protocol.CodeCountTooLarge || ie.Field != "count" || ie.Details["maxCount"] != 8 {
			t.Errorf("count %d: got %v, want COUNT_TOO_LARGE with maxCount 8", n, err)
		}
	}
	if c, _ := e.reg.Remaining(ctx); c.Remaining != 8 {
		t.Fatalf("invalid requests wrote something: %+v", c)
	}
}

func TestScenarioAllocSameRenewRemainingRemove(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	ctx := context.Background()
	g1, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(7), Count: 2})
	if err != nil || len(g1.Leases) != 2 {
		t.Fatalf("alloc: %v %+v", err, g1)
	}
	if !g1.Leases[0].ExpiresAt.Equal(t0.Add(10 * time.Minute)) {
		t.Fatalf("first lease expires %v, want now+10m", g1.Leases[0].ExpiresAt)
	}
	e.clk.Advance(time.Minute)
	g2, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(7), Count: 2})
	if err != nil || g2.Leases[0].NodeID != g1.Leases[0].NodeID || g2.Leases[1].FencingToken != g1.Leases[1].FencingToken {
		t.Fatalf("idempotent alloc: %v %+v vs %+v", err, g2, g1)
	}
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(7), Count: 3}); protocol.ErrorCode(err) != protocol.CodeRequesterCountMismatch {
		t.Fatalf("other count: %v", err)
	}
	g3, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(7), FencingTokens: []uint64{g1.Leases[0].FencingToken}})
	if err != nil || len(g3.Leases) != 2 || !g3.Leases[0].ExpiresAt.Equal(e.clk.Now().Add(48*time.Hour)) {
		t.Fatalf("renew: %v %+v", err, g3)
	}
	c, _ := e.reg.Remaining(ctx)
	if c.Total != 4096 || c.Remaining != 4094 || c.Leased != 2 {
		t.Fatalf("remaining: %+v", c)
	}
	n, err := e.reg.Remove(ctx, idkeeper.RemoveRequest{Requester: who(7), MintedUpTo: e.clk.Now()})
	if err != nil || n != 2 {
		t.Fatalf("remove: %d %v", n, err)
	}
	if c, _ := e.reg.Remaining(ctx); c.Remaining != 4096 {
		t.Fatalf("after remove: %+v", c)
	}
	if g, _ := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(7)}); len(g.Leases) != 0 {
		t.Fatalf("renew after remove returned %+v, want empty", g.Leases)
	}
	if e.obs.count("alloc", "") != 2 || e.obs.count("alloc", protocol.CodeRequesterCountMismatch) != 1 {
		t.Fatalf("observer saw %v", e.obs.ops)
	}
}

func TestCleanup_RunsOnOneReplicaAtATime(t *testing.T) {
	a := newEnv(t, idkeeper.Config{Nodes: 8, CleanupInterval: 10 * time.Minute})
	b := openEnv(t, a.store, a.clk, idkeeper.Config{Nodes: 8, CleanupInterval: 10 * time.Minute, Owner: "replica-b"})
	ctx := context.Background()
	if _, err := a.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 3}); err != nil {
		t.Fatal(err)
	}
	a.clk.Advance(10*time.Minute + 10*time.Minute + time.Millisecond) // past expiry + grace
	n, ran, err := a.reg.Cleanup(ctx)
	if err != nil || !ran || n != 3 {
		t.Fatalf("replica a: %d %v %v", n, ran, err)
	}
	if _, ran, _ := b.reg.Cleanup(ctx); ran {
		t.Fatal("replica b ran the job while a's lock-at-least-for held")
	}
	a.clk.Advance(9*time.Minute + time.Millisecond)
	if n, ran, err := b.reg.Cleanup(ctx); !ran || err != nil || n != 0 {
		t.Fatalf("replica b after the lock lapsed: %d %v %v", n, ran, err)
	}
	if a.obs.reclaimed != 3 {
		t.Fatalf("reclaimed observed: %d", a.obs.reclaimed)
	}
}

func TestCleanup_KeepsLeasesInsideGrace(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 4})
	ctx := context.Background()
	e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 1})
	e.clk.Advance(10*time.Minute + 10*time.Minute) // exactly expiry + grace: not yet
	if n, _, _ := e.reg.Cleanup(ctx); n != 0 {
		t.Fatalf("reclaimed %d inside grace", n)
	}
	c, _ := e.reg.Remaining(ctx)
	if c.InGrace != 1 || c.Remaining != 3 {
		t.Fatalf("in grace not counted as used: %+v", c)
	}
}

func TestAuthenticate(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	ctx := context.Background()
	secret, k := idkeeper.NewAPIKey("ci", t0, t0.Add(time.Hour))
	if err := e.store.CreateAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Authenticate(ctx, secret); err != nil {
		t.Fatalf("valid key: %v", err)
	}
	for presented, code := range map[string]idkeeper.Code{
		"":                          protocol.CodeAPIKeyMissing,
		secret + "x":                protocol.CodeAPIKeyInvalid,
		"idk_not-a-key-at-all-1234": protocol.CodeAPIKeyInvalid,
	} {
		if _, err := e.reg.Authenticate(ctx, presented); protocol.ErrorCode(err) != code {
			t.Errorf("%q: got %v, want %s", presented, err, code)
		}
	}
	old, ok := idkeeper.NewAPIKey("old", t0, t0.Add(-time.Second))
	e.store.CreateAPIKey(ctx, ok)
	if _, err := e.reg.Authenticate(ctx, old); protocol.ErrorCode(err) != protocol.CodeAPIKeyExpired {
		t.Fatalf("expired key: %v", err)
	}
	if bytes.Contains(k.Hash, []byte(secret)) || len(k.Hash) != 32 {
		t.Fatal("the stored key is not a hash")
	}
	created, err := e.reg.EnsureAPIKey(ctx, "bootstrap-key-0123456789abcdef", "bootstrap")
	if err != nil || !created {
		t.Fatalf("bootstrap: %v %v", created, err)
	}
	if created, _ := e.reg.EnsureAPIKey(ctx, "bootstrap-key-0123456789abcdef", "bootstrap"); created {
		t.Fatal("bootstrap key created twice")
	}
	if _, err := e.reg.EnsureAPIKey(ctx, "short", "x"); protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
		t.Fatalf("short bootstrap key: %v", err)
	}
}

// A revoked key authenticates nothing; a key's use is recorded (LastUsedAt).
func TestRevokedKeyAndLastUse(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 4})
	ctx := context.Background()
	secret, k := idkeeper.NewAPIKey("ci", t0, time.Time{})
	if err := e.store.CreateAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Authenticate(ctx, secret); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := e.store.APIKey(ctx, k.ID)
		if got.LastUsedAt.Equal(t0) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("LastUsedAt = %v, want %v", got.LastUsedAt, t0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.store.RevokeAPIKey(ctx, k.ID, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err := e.reg.Authenticate(ctx, secret)
	if protocol.ErrorCode(err) != protocol.CodeAPIKeyInvalid || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked key: %v", err)
	}
}

// A new bootstrap key retires the previous one; the retired one is not brought
// back by a replica still configured with it.
func TestBootstrapKeyRotation(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 4})
	ctx := context.Background()
	const k1, k2 = "idk_first-bootstrap-key-0123456789", "idk_second-bootstrap-key-012345678"
	if created, retired, err := e.reg.EnsureBootstrapKey(ctx, k1); err != nil || !created || len(retired) != 0 {
		t.Fatalf("first bootstrap key: %v %v %v", created, retired, err)
	}
	if created, _, err := e.reg.EnsureBootstrapKey(ctx, k1); err != nil || created {
		t.Fatalf("same key again: %v %v", created, err)
	}
	id1, _ := idkeeper.HashAPIKey(k1)
	created, retired, err := e.reg.EnsureBootstrapKey(ctx, k2)
	if err != nil || !created || len(retired) != 1 || retired[0] != id1 {
		t.Fatalf("rotation: %v %v %v", created, retired, err)
	}
	if _, err := e.reg.Authenticate(ctx, k1); protocol.ErrorCode(err) != protocol.CodeAPIKeyInvalid {
		t.Fatalf("the retired key: %v", err)
	}
	if _, err := e.reg.Authenticate(ctx, k2); err != nil {
		t.Fatalf("the new key: %v", err)
	}
	// A replica still configured with the old key neither revives it nor retires the new one.
	if _, _, err := e.reg.EnsureBootstrapKey(ctx, k1); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("reviving the retired key: %v", err)
	}
	if _, err := e.reg.Authenticate(ctx, k2); err != nil {
		t.Fatalf("the new key after the old replica: %v", err)
	}
	// A key made with apikey create is no bootstrap key: rotation leaves it alone.
	other, k := idkeeper.NewAPIKey("service", t0, time.Time{})
	e.store.CreateAPIKey(ctx, k)
	if _, _, err := e.reg.EnsureBootstrapKey(ctx, "idk_third-bootstrap-key-0123456789"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Authenticate(ctx, other); err != nil {
		t.Fatalf("a created key after a rotation: %v", err)
	}
}

// A key's quota caps the node IDs its leases hold at once: 409
// API_KEY_QUOTA_EXCEEDED, nothing granted.
func TestKeyQuota(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 16})
	ctx := context.Background()
	key := idkeeper.APIKey{ID: "quota", MaxNodes: 3}
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 2, Key: key}); err != nil {
		t.Fatal(err)
	}
	_, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 2, Key: key})
	var ie *idkeeper.Error
	if !errors.As(err, &ie) || ie.Code != protocol.CodeAPIKeyQuotaExceeded ||
		ie.Details["maxNodes"] != 3 || ie.Details["held"] != 2 {
		t.Fatalf("over the quota: %v", err)
	}
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1, Key: key}); err != nil {
		t.Fatalf("up to the quota: %v", err)
	}
	if c, _ := e.reg.Remaining(ctx); c.Leased != 3 {
		t.Fatalf("leased %d", c.Leased)
	}
}

// countingState is a StateKeeper that counts its saves and can be slowed down.
type countingState struct {
	idkeeper.MemoryState
	mu    sync.Mutex
	saves int
	delay time.Duration
}

func (c *countingState) Save(ctx context.Context, st idkeeper.ReplicaState) error {
	time.Sleep(c.delay)
	c.mu.Lock()
	c.saves++
	c.mu.Unlock()
	return c.MemoryState.Save(ctx, st)
}

// Every new grant's token is durable in the replica state before the grant is
// answered; concurrent grants share saves (group commit), renewals save nothing.
func TestGrantsSaveTheStateBeforeAnswering(t *testing.T) {
	state := &countingState{delay: 20 * time.Millisecond}
	e := newEnv(t, idkeeper.Config{Nodes: 64, State: state})
	ctx := context.Background()
	base := state.saves
	g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := state.Load(ctx); st.MaxToken != g.Leases[0].FencingToken || st.Generation != e.reg.Generation() {
		t.Fatalf("state after a grant: %+v, want token %d", st, g.Leases[0].FencingToken)
	}
	if state.saves != base+1 {
		t.Fatalf("%d saves for one grant", state.saves-base)
	}
	before := state.saves
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(10 + i), Count: 1}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := state.saves - before; n >= 30 || n < 1 {
		t.Fatalf("%d saves for 30 concurrent grants, want fewer (group commit)", n)
	}
	if st, _ := state.Load(ctx); st.MaxToken != 31 {
		t.Fatalf("MaxToken %d after 31 grants", st.MaxToken)
	}
	before = state.saves
	if _, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1), Receipts: receipts(g)}); err != nil {
		t.Fatal(err)
	}
	if state.saves != before {
		t.Fatalf("a renewal saved the state %d times", state.saves-before)
	}
}

// The alloc log line names the node IDs as ranges, not one by one: an Alloc of a
// thousand node IDs is one short attribute.
func TestAlloc_LogSummarisesNodeRanges(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 1024})
	if _, err := e.reg.Alloc(context.Background(), idkeeper.AllocRequest{Requester: who(1), Count: 1000}); err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.SplitSeq(e.logs.String(), "\n") {
		if strings.Contains(l, "msg=alloc ") {
			line = l
		}
	}
	if !strings.Contains(line, "nodes=0-999 ") || len(line) > 300 {
		t.Fatalf("alloc log line: %q; want nodes=0-999", line)
	}
}
