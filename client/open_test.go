package client_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/protocol"
)

// Open allocates, renews once at once, and the session mints IDs of its node IDs at
// the session clock's time (DESIGN §4 Start).
func TestOpenAllocatesRenewsAtOnceAndMints(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	cfg := e.config()
	cfg.Count = 2
	s := e.open(cfg)

	if a, r := e.proxy.count(allocPath), e.proxy.count(renewPath); a != 1 || r != 1 {
		t.Fatalf("Open sent %d Alloc and %d Renew, want 1 and 1 (the immediate renew)", a, r)
	}
	stored := e.storeLeases()
	if len(stored) != 2 {
		t.Fatalf("store holds %d leases, want 2", len(stored))
	}
	for _, l := range stored {
		if !l.ExpiresAt.Equal(t0.Add(idkeeper.DefaultLeaseDuration)) || !l.RenewedAt.Equal(t0) {
			t.Errorf("stored lease %+v: want renewed at t0 to t0+48h", l)
		}
	}
	leases := s.Leases()
	if len(leases) != 2 || leases[0].NodeID >= leases[1].NodeID {
		t.Fatalf("Leases() = %+v, want 2 sorted by node ID", leases)
	}
	if got := s.TimeLeft(); got != idkeeper.DefaultLeaseDuration {
		t.Errorf("TimeLeft = %v, want 48h", got)
	}
	if !s.Healthy() {
		t.Fatalf("not healthy after Open: %v", s.Check())
	}
	layout := s.Layout()
	if layout != idkeeper.DefaultLayout {
		t.Errorf("Layout = %+v, want the default", layout)
	}
	seen := map[int64]bool{}
	for range 10 {
		id, err := s.NextID()
		if err != nil {
			t.Fatal(err)
		}
		p, _ := layout.Decode(id)
		if !p.Time.Equal(t0) || (p.Node != leases[0].NodeID && p.Node != leases[1].NodeID) {
			t.Fatalf("ID %d decodes to %+v: want time t0 and a node ID of the session", id, p)
		}
		seen[p.Node] = true
	}
	if len(seen) != 2 {
		t.Errorf("NextID used node IDs %v, want both (round robin)", seen)
	}
	if got := e.pending(); !slices.Equal(got, []time.Duration{24 * time.Hour, 48 * time.Hour}) {
		t.Errorf("pending timers %v, want the renew at half the lease (24h) and the expiry (48h)", got)
	}
	// The log says the lease the session holds: the full one after the first
	// Renew, not the 10-minute first lease.
	want := "expiresAt=" + t0.Add(idkeeper.DefaultLeaseDuration).Format("2006-01-02T15:04:05")
	if logs := e.logs.String(); !strings.Contains(logs, "lease held") || !strings.Contains(logs, want) {
		t.Errorf("the lease-held log line lacks %s:\n%s", want, logs)
	}
}

// Every Alloc and Renew carries clientUtcNow (the session's wall clock, RFC 3339 UTC
// with ms), Renew carries the fencing tokens, and the server measures the skew.
func TestRequestsCarryClientUtcNow(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	e.clk.StepWall(-6 * time.Minute) // behind by more than grace/2: the server records it
	cfg := e.config()
	s := e.open(cfg)
	e.clk.Advance(24 * time.Hour)

	allocs, renews := e.proxy.requests(allocPath), e.proxy.requests(renewPath)
	if len(allocs) != 1 || len(renews) != 2 {
		t.Fatalf("%d allocs and %d renews, want 1 and 2", len(allocs), len(renews))
	}
	r := s.Requester()
	if r.MachineID != cfg.Requester.MachineID || r.PID != cfg.Requester.PID || len(r.Instance) != 22 {
		t.Fatalf("session requester %+v, want the configured one with an instance", r)
	}
	wantReq := map[string]any{"machineId": r.MachineID, "pid": float64(r.PID), "startedAt": "2026-03-01T11:00:00.000Z", "instance": r.Instance}
	if !equalJSON(allocs[0]["requester"], wantReq) || allocs[0]["count"] != float64(1) {
		t.Errorf("alloc body %v", allocs[0])
	}
	for i, want := range []string{"2026-03-01T11:54:00.000Z"} {
		if got := allocs[i]["clientUtcNow"]; got != want {
			t.Errorf("alloc clientUtcNow = %v, want %s", got, want)
		}
	}
	for i, want := range []string{"2026-03-01T11:54:00.000Z", "2026-03-02T11:54:00.000Z"} {
		if got := renews[i]["clientUtcNow"]; got != want {
			t.Errorf("renew %d clientUtcNow = %v, want %s", i, got, want)
		}
		tokens := []any{float64(s.Leases()[0].FencingToken)}
		if got := renews[i]["fencingTokens"]; !equalJSON(got, tokens) {
			t.Errorf("renew %d fencingTokens = %v, want %v", i, got, tokens)
		}
		if got, ok := renews[i]["receipts"].([]any); !ok || len(got) != 1 || got[0] == "" {
			t.Errorf("renew %d receipts = %v, want the lease's receipt", i, renews[i]["receipts"])
		}
		if !equalJSON(renews[i]["requester"], wantReq) {
			t.Errorf("renew %d requester %v, want the session's, instance included", i, renews[i]["requester"])
		}
	}
	obs, err := e.store.SkewObservations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(obs) != 1 || obs[0].Skew != 6*time.Minute || obs[0].Requester.Key() != r.Key() {
		t.Errorf("server's skew observations %+v, want one of 6m for the session", obs)
	}
}

// A 409 CLOCK_SKEW_TOO_LARGE at start is retried with backoff 3 s ×2 up to 60 s,
// ±20 %, the server's problem logged as fields each time, the session unhealthy; once
// the clock is corrected the next attempt succeeds, without a restart.
func TestAlloc_BackoffOnClockSkewThenRecovery(t *testing.T) {
	e := newEnv(t, idkeeper.Config{}) // grace 10 min
	e.clk.StepWall(-15 * time.Minute)
	s, err := client.New(e.config())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := openAsync(s)

	bases := []float64{3, 6, 12, 24, 48, 60, 60, 60}
	for i, base := range bases {
		if !e.clk.WaitPending(1, wait) {
			t.Fatalf("attempt %d: no backoff timer armed", i+1)
		}
		d := e.pending()[0]
		lo, hi := time.Duration(base*0.8*float64(time.Second)), time.Duration(base*1.2*float64(time.Second))
		if d < lo || d > hi {
			t.Errorf("backoff %d = %v, want %v..%v", i+1, d, lo, hi)
		}
		if _, err := s.NextID(); !errors.Is(err, client.ErrNotOpen) || s.Healthy() {
			t.Fatalf("while retrying: NextID error %v, healthy %v; want ErrNotOpen, unhealthy", err, s.Healthy())
		}
		e.clk.Advance(d)
	}
	if !e.clk.WaitPending(1, wait) {
		t.Fatal("no backoff timer after the last refusal")
	}
	attempts := len(bases) + 1
	if n := e.proxy.count(allocPath); n != attempts {
		t.Fatalf("%d Alloc attempts, want %d", n, attempts)
	}
	// The problem is logged as fields: code, skew, threshold and the NTP advice.
	logs := e.logs.String()
	for _, want := range []string{`problem.skewMs=900000 `, `problem.thresholdMs=600000`} {
		if n := strings.Count(logs, want); n != attempts {
			t.Errorf("log holds %s %d times, want once per attempt (%d)\n%s", want, n, attempts, logs)
		}
	}
	if strings.Contains(logs, `\"code\"`) {
		t.Errorf("the problem is logged as an escaped JSON string:\n%s", logs)
	}
	for _, want := range []string{`problem.code=CLOCK_SKEW_TOO_LARGE`, "sync the client's clock with NTP"} {
		if n := strings.Count(logs, want); n < attempts {
			t.Errorf("log holds %q %d times, want at least once per attempt (%d)", want, n, attempts)
		}
	}

	e.clk.StepWall(15 * time.Minute) // NTP fixed
	e.clk.Advance(e.pending()[0])
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Open after the clock was fixed: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("Open did not return after the clock was fixed")
	}
	if _, err := s.NextID(); err != nil || !s.Healthy() {
		t.Fatalf("after recovery: NextID %v, healthy %v", err, s.Healthy())
	}
}

// Transport errors, 5xx and an exhausted pool at start are retried; the lease comes
// once the cause is gone.
func TestAlloc_RetriesTransientFailures(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 1})
	other := requester()
	if _, err := e.reg.Alloc(context.Background(), idkeeper.AllocRequest{Requester: other, Count: 1}); err != nil {
		t.Fatal(err)
	}
	faults := []fault{drop, status(http.StatusServiceUnavailable, "STORE_UNAVAILABLE"), nil} // nil: the real 409 NODE_IDS_EXHAUSTED
	e.proxy.set(allocPath, faults[0])
	s, err := client.New(e.config())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := openAsync(s)
	for _, f := range faults[1:] {
		if !e.clk.WaitPending(1, wait) {
			t.Fatal("no backoff timer")
		}
		e.proxy.set(allocPath, f)
		e.clk.Advance(e.pending()[0])
	}
	if !e.clk.WaitPending(1, wait) {
		t.Fatal("no backoff timer")
	}
	if !strings.Contains(e.logs.String(), "NODE_IDS_EXHAUSTED") {
		t.Error("the exhausted pool's answer is not in the log")
	}
	// The other holder leaves: the next attempt gets its node ID.
	if _, err := e.reg.Remove(context.Background(), idkeeper.RemoveRequest{Requester: other, MintedUpTo: t0}); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(e.pending()[0])
	if err := <-done; err != nil {
		t.Fatalf("Open: %v", err)
	}
	if n := e.proxy.count(allocPath); n != 4 {
		t.Errorf("%d Alloc attempts, want 4", n)
	}
}

// Answers that retrying cannot fix end Open at once: a bad API key, a requester
// that holds another number of node IDs, a requester used by another session of
// this process.
func TestOpenPermanentFailures(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	t.Run("bad API key", func(t *testing.T) {
		cfg := e.config()
		cfg.APIKey = "idk_not-a-key-the-registry-knows-at-all"
		s, _ := client.New(cfg)
		err := s.Open(context.Background())
		var se *client.ServerError
		if !errors.As(err, &se) || se.Status != 401 || se.Code != protocol.CodeAPIKeyInvalid {
			t.Fatalf("Open = %v, want a 401 API_KEY_INVALID ServerError", err)
		}
		if s.Err() == nil || s.Healthy() {
			t.Errorf("after a failed Open: Err %v, healthy %v", s.Err(), s.Healthy())
		}
		if err := s.Open(context.Background()); !errors.Is(err, client.ErrClosed) {
			t.Errorf("second Open = %v, want ErrClosed", err)
		}
	})
	t.Run("count mismatch", func(t *testing.T) {
		e.proxy.set(allocPath, status(409, string(protocol.CodeRequesterCountMismatch)))
		defer e.proxy.set(allocPath, nil)
		before := e.proxy.count(allocPath)
		s, _ := client.New(e.config())
		var se *client.ServerError
		if err := s.Open(context.Background()); !errors.As(err, &se) || se.Code != protocol.CodeRequesterCountMismatch {
			t.Fatalf("Open = %v, want 409 REQUESTER_COUNT_MISMATCH", err)
		}
		if n := e.proxy.count(allocPath) - before; n != 1 {
			t.Errorf("%d allocs sent, want 1 (no retry)", n)
		}
	})
	t.Run("lease of another key", func(t *testing.T) {
		e.proxy.set(allocPath, status(403, string(protocol.CodeLeaseNotOwned)))
		defer e.proxy.set(allocPath, nil)
		s, _ := client.New(e.config())
		var se *client.ServerError
		if err := s.Open(context.Background()); !errors.As(err, &se) || se.Code != protocol.CodeLeaseNotOwned {
			t.Fatalf("Open = %v, want 403 LEASE_NOT_OWNED", err)
		}
	})
	e.expectNoFatal()
}

// The grant is validated before use (DESIGN §4 fail fast): no retry, no Renew, the
// grant given back, OnFatal not called.
func TestOpenFailsFastOnInvalidGrant(t *testing.T) {
	layoutEdit := func(k string, v float64) fault {
		return rewrite(func(m map[string]any) { m["layout"].(map[string]any)[k] = v })
	}
	cases := []struct {
		name  string
		fault fault
		skew  time.Duration
		want  string
	}{
		{"widths do not add up to 63", layoutEdit("sequenceBits", 9), 0, "add up to 62"},
		{"a width is not positive", rewrite(func(m map[string]any) {
			l := m["layout"].(map[string]any)
			l["nodeBits"], l["timestampBits"] = float64(0), float64(53)
		}), 0, "positive"},
		{"node ID outside the node field", rewrite(func(m map[string]any) {
			m["leases"].([]any)[0].(map[string]any)["nodeId"] = float64(4096)
		}), 0, "outside 0..4095"},
		{"fewer leases than asked", rewrite(func(m map[string]any) { m["leases"] = []any{} }), 0, "granted 0"},
		// The server's first lease is 10 min; a clock 11 min ahead sees it expired.
		{"lease expired by the local clock", nil, 11 * time.Minute, "already past by the local clock"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, idkeeper.Config{})
			e.clk.StepWall(c.skew)
			e.proxy.set(allocPath, c.fault)
			s, _ := client.New(e.config())
			err := s.Open(context.Background())
			if !errors.Is(err, client.ErrInvalidGrant) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open = %v, want ErrInvalidGrant mentioning %q", err, c.want)
			}
			if a, r, rm := e.proxy.count(allocPath), e.proxy.count(renewPath), e.proxy.count(removePath); a != 1 || r != 0 || rm != 1 {
				t.Errorf("sent %d Alloc, %d Renew, %d Remove; want 1, 0, 1", a, r, rm)
			}
			if ls := e.storeLeases(); len(ls) != 0 {
				t.Errorf("the grant was not given back: %+v", ls)
			}
			if _, err := s.NextID(); err == nil {
				t.Error("NextID succeeded")
			}
			select {
			case <-s.Done():
			default:
				t.Error("Done not closed")
			}
			e.expectNoFatal()
		})
	}
}

// Open gives up when its context ends, with the context's error.
func TestOpenEndsWithItsContext(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	e.proxy.set(allocPath, status(http.StatusServiceUnavailable, "STORE_UNAVAILABLE"))
	s, _ := client.New(e.config())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Open(ctx) }()
	if !e.clk.WaitPending(1, wait) {
		t.Fatal("no backoff timer")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "STORE_UNAVAILABLE") {
		t.Fatalf("Open = %v, want context.Canceled with the last error", err)
	}
	if len(e.pending()) != 0 {
		t.Errorf("timers left: %v", e.pending())
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed")
	}
}

// Close during Open's backoff ends Open with ErrClosed.
func TestCloseDuringOpen(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	e.proxy.set(allocPath, drop)
	s, _ := client.New(e.config())
	done := openAsync(s)
	if !e.clk.WaitPending(1, wait) {
		t.Fatal("no backoff timer")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Open = %v, want ErrClosed", err)
	}
	if n := e.proxy.count(removePath); n != 0 {
		t.Errorf("%d Remove sent for a session that held nothing", n)
	}
}

func TestConfigChecks(t *testing.T) {
	ok := client.Config{ServerURL: "http://127.0.0.1:1", APIKey: "k"}
	if _, err := client.New(ok); err != nil {
		t.Fatalf("New does no I/O and accepts an unreachable server: %v", err)
	}
	for _, c := range []client.Config{
		{APIKey: "k"},
		{ServerURL: "127.0.0.1:8080", APIKey: "k"},
		{ServerURL: "http://x"},
		{ServerURL: "http://x", APIKey: "k", Count: protocol.MaxCount + 1},
		{ServerURL: "http://x", APIKey: "k", Count: -1},
		{ServerURL: "http://x", APIKey: "k", BackoffMultiplier: 0.5},
		{ServerURL: "http://x", APIKey: "k", Requester: idkeeper.Requester{MachineID: "m"}},
	} {
		if _, err := client.New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
	s, _ := client.New(ok)
	if _, err := s.NextID(); !errors.Is(err, client.ErrNotOpen) {
		t.Errorf("NextID before Open = %v, want ErrNotOpen", err)
	}
	if err := s.Check(); !errors.Is(err, client.ErrNotOpen) {
		t.Errorf("Check before Open = %v, want ErrNotOpen", err)
	}
	if s.Generator(0).NodeID() != -1 {
		t.Error("a generator has a node ID before Open")
	}
}

func equalJSON(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return false
		}
		for k, v := range a {
			if !equalJSON(v, bm[k]) {
				return false
			}
		}
		return true
	case []any:
		bs, ok := b.([]any)
		if !ok || len(a) != len(bs) {
			return false
		}
		for i := range a {
			if !equalJSON(a[i], bs[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}

// Close while Open waits for its first Renew: Open returns ErrClosed and Close
// gives the lease back.
func TestCloseDuringFirstRenewReleasesTheLease(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	e.proxy.set(renewPath, hang)
	s, _ := client.New(e.config())
	done := openAsync(s)
	for deadline := time.Now().Add(wait); e.proxy.count(renewPath) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no renew sent")
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Open = %v, want ErrClosed", err)
	}
	if n := e.proxy.count(removePath); n != 1 {
		t.Fatalf("%d Remove sent, want 1", n)
	}
	if ls := e.storeLeases(); len(ls) != 0 {
		t.Fatalf("leases left: %+v", ls)
	}
	e.expectNoFatal()
}
