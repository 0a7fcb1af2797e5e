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
	"github.com/idkeeper/idkeeper/snowflake"
)

const (
	lease    = idkeeper.DefaultLeaseDuration // 48 h
	halfWay  = lease / 2
	loopCap  = client.DefaultRenewLoopDuration
	minRetry = client.DefaultMinRetryInterval
)

// Renew comes at half the lease, and every successful one moves the lease, the
// generators' windows and the next renew.
func TestRenew_AtHalfLease(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	s := e.open(e.config())
	for i := 1; i <= 3; i++ {
		e.clk.Advance(halfWay)
		if n := e.proxy.count(renewPath); n != i+1 {
			t.Fatalf("after %d half-leases: %d renews, want %d", i, n, i+1)
		}
		want := t0.Add(time.Duration(i)*halfWay + lease)
		if got := s.Leases()[0].ExpiresAt; !got.Equal(want) {
			t.Fatalf("lease expires at %v, want %v", got, want)
		}
		if got := s.TimeLeft(); got != lease {
			t.Fatalf("TimeLeft %v, want %v", got, lease)
		}
		if got := e.pending(); !slices.Equal(got, []time.Duration{halfWay, lease}) {
			t.Fatalf("pending %v, want renew in 24h and expiry in 48h", got)
		}
		if _, err := s.NextID(); err != nil {
			t.Fatal(err)
		}
	}
	e.expectNoFatal()
}

// retryAfter is DESIGN §4's retry interval for a lease with left to go.
func retryAfter(left time.Duration) time.Duration { return max(min(loopCap, left/4), minRetry) }

// Transport errors are retried on the formula min(10 min, time left / 4), at least
// 5 s, until the lease runs out locally; then issuing stops and the loss is fatal.
func TestRenew_TransportErrorsRetryOnFormulaUntilExpiry(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	s := e.open(e.config())
	e.proxy.set(renewPath, drop)
	e.clk.Advance(halfWay)
	left, attempts := halfWay, 1
	for left > 0 {
		want := retryAfter(left)
		got := e.pending()
		if !slices.Contains(got, want) || !slices.Contains(got, left) {
			t.Fatalf("%v left: pending %v, want a retry in %v and the expiry in %v", left, got, want, left)
		}
		if _, err := s.NextID(); err != nil {
			t.Fatalf("%v left: NextID: %v", left, err)
		}
		step := min(want, left)
		e.clk.Advance(step)
		left -= step
		if left > 0 {
			attempts++
		}
		if attempts > 1000 {
			t.Fatal("too many retries")
		}
	}
	if n := e.proxy.count(renewPath); n != attempts+1 {
		t.Errorf("%d renews, want %d (the first and %d retries)", n, attempts+1, attempts)
	}
	err := e.expectFatal()
	if !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("fatal %v, want ErrLeaseLost", err)
	}
	if _, err := s.NextID(); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("NextID after expiry: %v", err)
	}
	if s.Close(); e.proxy.count(removePath) != 0 {
		t.Error("Close sent Remove for an expired lease")
	}
	if strings.Count(e.logs.String(), "renew failed; retrying") != attempts {
		t.Errorf("want %d logged retries", attempts)
	}
}

// 5xx, 4xx, malformed 200 bodies and timeouts are retried, never fatal; once the
// server answers again the lease is extended.
func TestRenew_RetriesUntilTheServerAnswers(t *testing.T) {
	cases := []struct {
		name  string
		fault fault
		log   string
	}{
		{"503", status(http.StatusServiceUnavailable, "STORE_UNAVAILABLE"), "STORE_UNAVAILABLE"},
		{"500 without a problem body", func(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
			http.Error(w, "boom", http.StatusInternalServerError)
		}, "500"},
		{"401 key revoked", status(http.StatusUnauthorized, "API_KEY_INVALID"), "renew refused"},
		{"not JSON", malformed(`{"leases":`), "malformed"},
		{"no leases member", malformed(`{"serverUtcNow":"2026-03-01T12:00:00.000Z"}`), "malformed"},
		{"bad time", malformed(`{"leases":[],"serverUtcNow":"yesterday"}`), "malformed"},
		{"timeout", hang, "deadline exceeded"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, idkeeper.Config{})
			cfg := e.config()
			retries := 3
			if c.name == "timeout" {
				cfg.RequestTimeout, retries = time.Second, 1
			}
			s := e.open(cfg)
			e.proxy.set(renewPath, c.fault)
			for i := range retries {
				d := e.pending()[0]
				left := s.TimeLeft() - d
				e.clk.Advance(d)
				if want := retryAfter(left); !slices.Contains(e.pending(), want) {
					t.Fatalf("retry %d: pending %v, want a retry in %v", i, e.pending(), want)
				}
				if !s.Healthy() {
					t.Fatalf("unhealthy while the lease is valid: %v", s.Check())
				}
			}
			if !strings.Contains(e.logs.String(), c.log) {
				t.Errorf("log lacks %q:\n%s", c.log, e.logs)
			}
			e.proxy.set(renewPath, nil)
			at := e.clk.Mono() + e.pending()[0]
			e.clk.Advance(e.pending()[0])
			if got, want := s.Leases()[0].ExpiresAt, t0.Add(at+lease).Truncate(time.Millisecond); !got.Equal(want) {
				t.Errorf("after recovery the lease expires at %v, want %v", got, want)
			}
			if got := e.pending(); !slices.Equal(got, []time.Duration{halfWay, lease}) {
				t.Errorf("after recovery pending %v, want [24h 48h]", got)
			}
			e.expectNoFatal()
		})
	}
}

// Renew answering 200 with an empty list is the definite "holds nothing": issuing
// stops at once, OnFatal gets ErrLeaseLost, Done closes, and Close sends nothing.
func TestRenew_EmptyListIsFatal(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	cfg := e.config()
	s := e.open(cfg)
	e.removeBehindBack(s)
	if _, err := s.NextID(); err != nil {
		t.Fatalf("before the renew the session cannot know: %v", err)
	}
	e.clk.Advance(halfWay)
	err := e.expectFatal()
	if !errors.Is(err, client.ErrLeaseLost) || !strings.Contains(err.Error(), "empty list") {
		t.Fatalf("fatal %v", err)
	}
	if _, err := s.NextID(); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("NextID after the loss: %v", err)
	}
	if s.Healthy() || !errors.Is(s.Err(), client.ErrLeaseLost) {
		t.Fatalf("healthy %v, Err %v", s.Healthy(), s.Err())
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed")
	}
	if len(e.pending()) != 0 {
		t.Errorf("timers left: %v", e.pending())
	}
	if err := s.Close(); err != nil || e.proxy.count(removePath) != 0 {
		t.Fatalf("Close = %v with %d Remove sent; want nil and none", err, e.proxy.count(removePath))
	}
}

// A Renew answer with fewer, other or re-granted node IDs than the session holds is
// fatal: which of them is still valid cannot be told.
func TestRenew_WithOtherLeasesIsFatal(t *testing.T) {
	cases := []struct {
		name string
		edit func(ls []any) []any
		want string
	}{
		{"fewer leases than generators", func(ls []any) []any { return ls[:1] }, "node IDs"},
		{"another node ID", func(ls []any) []any {
			ls[0].(map[string]any)["nodeId"] = float64(4000)
			return ls
		}, "node IDs"},
		{"another fencing token", func(ls []any) []any {
			ls[1].(map[string]any)["fencingToken"] = float64(999)
			return ls
		}, "fencing token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, idkeeper.Config{})
			cfg := e.config()
			cfg.Count = 2
			s := e.open(cfg)
			e.proxy.set(renewPath, rewrite(func(m map[string]any) {
				m["leases"] = c.edit(m["leases"].([]any))
			}))
			e.clk.Advance(halfWay)
			err := e.expectFatal()
			if !errors.Is(err, client.ErrLeaseLost) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("fatal %v, want ErrLeaseLost about %s", err, c.want)
			}
			if _, err := s.Generator(1).NextID(); !errors.Is(err, client.ErrLeaseLost) {
				t.Fatalf("NextID: %v", err)
			}
		})
	}
}

// A renewed lease that has already expired by the local wall clock is fatal.
func TestRenewedLeaseExpiredLocallyIsFatal(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	s := e.open(e.config())
	e.clk.StepWall(lease + time.Hour) // the local clock jumps ahead past the renewed expiry
	if _, err := s.NextID(); !errors.Is(err, snowflake.ErrWindowEnded) {
		t.Fatalf("NextID with the clock past the window: %v, want ErrWindowEnded", err)
	}
	if err := s.Check(); !errors.Is(err, snowflake.ErrWindowEnded) {
		t.Fatalf("Check = %v, want ErrWindowEnded: health follows issuing", err)
	}
	e.clk.Advance(halfWay)
	err := e.expectFatal()
	if !errors.Is(err, client.ErrLeaseLost) || !strings.Contains(err.Error(), "already past by the local clock") {
		t.Fatalf("fatal %v", err)
	}
}

// The lease ends on the monotonic clock: issuing is refused from the deadline on
// even when no timer has run (a starved process), and the loss is reported when
// the timers get to run; a renew that runs late cannot revive it.
func TestLocalExpiryBlocksIssuingAtOnce(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	s := e.open(e.config())
	e.clk.Jump(lease - time.Millisecond) // no timer runs: not even the renew at 24h
	if _, err := s.NextID(); err != nil {
		t.Fatalf("1 ms before the deadline: %v", err)
	}
	e.clk.Jump(time.Millisecond)
	if _, err := s.NextID(); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("at the deadline: NextID %v, want ErrLeaseLost", err)
	}
	if err := s.NextIDs(make([]int64, 10)); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("at the deadline: NextIDs %v, want ErrLeaseLost", err)
	}
	if s.Healthy() {
		t.Fatal("healthy past the deadline")
	}
	e.expectNoFatal()
	renews := e.proxy.count(renewPath)
	e.clk.Advance(0) // the overdue timers run now
	if err := e.expectFatal(); !errors.Is(err, client.ErrLeaseLost) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("fatal %v", err)
	}
	if e.proxy.count(renewPath) != renews {
		t.Error("a renew was sent after the deadline")
	}
	if _, err := s.NextID(); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("NextID: %v", err)
	}
}

// The deadline counts the server's lease time from when the request was sent: an
// answer that arrives late shortens the lease, never lengthens it.
func TestDeadlineCountsFromSendTime(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	const late = 4 * time.Minute
	e.proxy.set(allocPath, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		next.ServeHTTP(w, r)
		e.clk.Advance(late) // the answer travels 4 minutes
	})
	e.proxy.set(renewPath, status(http.StatusServiceUnavailable, "STORE_UNAVAILABLE"))
	s := e.open(e.config())
	first := idkeeper.DefaultFirstLease
	if got := s.TimeLeft(); got != first-late {
		t.Fatalf("TimeLeft = %v, want %v (10 min from the send time)", got, first-late)
	}
	e.clk.Jump(first - late - time.Millisecond)
	if _, err := s.NextID(); err != nil {
		t.Fatal(err)
	}
	e.clk.Jump(time.Millisecond)
	if _, err := s.NextID(); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("at send time + 10 min: %v, want ErrLeaseLost", err)
	}

	// The same for Renew: the answer comes 5 minutes after the server renewed.
	e2 := newEnv(t, idkeeper.Config{})
	e2.proxy.set(renewPath, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		next.ServeHTTP(w, r)
		e2.clk.Advance(5 * time.Minute)
	})
	s2 := e2.open(e2.config())
	if got := s2.TimeLeft(); got != lease-5*time.Minute {
		t.Fatalf("TimeLeft after a late renew = %v, want %v", got, lease-5*time.Minute)
	}

	// A renew whose answer comes after the deadline cannot revive the lease, although
	// the server, which reclaims only after grace, renewed it.
	e3 := newEnv(t, idkeeper.Config{})
	e3.proxy.set(renewPath, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		next.ServeHTTP(w, r)
		e3.clk.Advance(11 * time.Minute) // the 10-minute first lease ends on the way
	})
	s3, _ := client.New(e3.config())
	if err := s3.Open(context.Background()); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("Open with the first renew answered after the deadline: %v, want ErrLeaseLost", err)
	}
	e3.expectNoFatal() // Open reports it itself
}

// Remove carries mintedUpTo, and the server makes the node ID reusable at once.
func TestCloseRemovesWithMintedUpTo(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	s := e.open(e.config())
	e.clk.Advance(5 * time.Millisecond)
	if _, err := s.NextID(); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Second) // minted nothing since
	node := s.Leases()[0].NodeID
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rm := e.proxy.requests(removePath)
	if len(rm) != 1 || rm[0]["mintedUpTo"] != "2026-03-01T12:00:00.005Z" {
		t.Fatalf("Remove bodies %v, want one with mintedUpTo 12:00:00.005Z", rm)
	}
	st, err := e.store.Node(context.Background(), idkeeper.NodeID(node))
	if err != nil {
		t.Fatal(err)
	}
	if st.Lease != nil || !st.Watermark.Equal(t0.Add(5*time.Millisecond)) {
		t.Errorf("node after Remove: %+v, want free with watermark t0+5ms", st)
	}
	if len(e.pending()) != 0 {
		t.Errorf("timers left after Close: %v", e.pending())
	}
	if _, err := s.NextID(); !errors.Is(err, client.ErrClosed) || s.Healthy() {
		t.Errorf("after Close: NextID %v, healthy %v", err, s.Healthy())
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A session that minted nothing sends Remove without mintedUpTo; a failed Remove is
// logged and returned, never fatal.
func TestCloseRemoveFailureIsNotFatal(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	s := e.open(e.config())
	e.proxy.set(removePath, status(http.StatusServiceUnavailable, "STORE_UNAVAILABLE"))
	err := s.Close()
	var se *client.ServerError
	if !errors.As(err, &se) || se.Status != 503 {
		t.Fatalf("Close = %v, want the 503", err)
	}
	rm := e.proxy.requests(removePath)
	if _, has := rm[0]["mintedUpTo"]; has || len(rm) != 1 {
		t.Errorf("Remove bodies %v: want one without mintedUpTo", rm)
	}
	if !strings.Contains(e.logs.String(), "remove failed") {
		t.Error("the failure is not logged")
	}
	e.expectNoFatal()
	if !errors.Is(s.Err(), client.ErrClosed) {
		t.Errorf("Err = %v", s.Err())
	}
}
