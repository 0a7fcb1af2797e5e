// Package idemtest is the contract suite every idkeeper.IdempotencyStore passes. A
// store's test calls Run with a Factory that opens a new, empty store on a fake
// clock:
//
//	func TestIdempotencyContract(t *testing.T) {
//		idemtest.Run(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.IdempotencyStore {
//			return openMyStore(t, clock) // closed by t.Cleanup
//		})
//	}
//
// Time moves only through the fake clock, which starts half a millisecond past a
// whole millisecond, so a store that does not truncate to the millisecond fails.
package idemtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/fakeclock"
)

// Factory opens a new, empty store whose clock is clock and registers its Close
// with t.Cleanup.
type Factory func(t *testing.T, clock idkeeper.Clock) idkeeper.IdempotencyStore

// Purger is the optional Purge of a store that deletes lapsed records only when
// asked (bolt). Redis expires them by itself.
type Purger interface {
	Purge(ctx context.Context) (int, error)
}

// T0 is the suite's start time, a whole millisecond; the clock starts 0.5 ms later.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	lockFor = time.Minute
	ttl     = 24 * time.Hour
)

// Run runs the suite as subtests of t, one after another.
func Run(t *testing.T, open Factory) {
	for _, c := range []struct {
		name string
		fn   func(*env)
	}{
		{"Begin/Fresh", testBeginFresh},
		{"Begin/InFlight", testBeginInFlight},
		{"Begin/OtherFingerprint", testBeginOtherFingerprint},
		{"Begin/ScopesIndependent", testScopesIndependent},
		{"Complete/Replay", testCompleteReplay},
		{"Complete/EmptyResult", testCompleteEmpty},
		{"Complete/NotOurs", testCompleteNotOurs},
		{"Complete/AtLockEdge", testCompleteAtLockEdge},
		{"Abort", testAbort},
		{"Lapse/Marker", testMarkerLapse},
		{"Lapse/Record", testRecordLapse},
		{"Concurrent", testConcurrent},
		{"Invalid", testInvalid},
		{"Purge", testPurge},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := fakeclock.New(T0.Add(500 * time.Microsecond))
			c.fn(&env{T: t, ctx: t.Context(), clock: clock, s: open(t, clock.Now)})
		})
	}
}

type env struct {
	*testing.T
	ctx   context.Context
	clock *fakeclock.Clock
	s     idkeeper.IdempotencyStore
}

// begin calls Begin and fails the test on an error.
func (e *env) begin(scope, fp, token string) (*idkeeper.IdempotencyRecord, bool) {
	e.Helper()
	rec, started, err := e.s.Begin(e.ctx, scope, fp, token, lockFor)
	if err != nil {
		e.Fatalf("Begin(%q, %q, %q): %v", scope, fp, token, err)
	}
	if started != (rec == nil) {
		e.Fatalf("Begin(%q, %q, %q) = %+v, started %v: want a record exactly when not started", scope, fp, token, rec, started)
	}
	return rec, started
}

func (e *env) mustStart(scope, fp, token string) {
	e.Helper()
	if rec, started := e.begin(scope, fp, token); !started {
		e.Fatalf("Begin(%q, %q, %q) did not start; found %+v", scope, fp, token, rec)
	}
}

// mustFind calls Begin with a throw-away token and returns the live record.
func (e *env) mustFind(scope string) *idkeeper.IdempotencyRecord {
	e.Helper()
	rec, started := e.begin(scope, "probe", "probe-token")
	if started {
		e.Fatalf("Begin(%q) started: the record was not live", scope)
	}
	return rec
}

func (e *env) complete(scope, token string, res idkeeper.IdempotencyResult) error {
	e.Helper()
	return e.s.Complete(e.ctx, scope, token, res, ttl)
}

func (e *env) wantLost(err error, what string) {
	e.Helper()
	if !errors.Is(err, idkeeper.ErrIdempotencyMarkerLost) {
		e.Fatalf("%s: %v, want ErrIdempotencyMarkerLost", what, err)
	}
}

var result = idkeeper.IdempotencyResult{
	Status: 201,
	Header: map[string][]string{"Content-Type": {"application/json"}, "Link": {"</a>", "</b>"}},
	Body:   []byte("{\"ids\":[1,2]}\x00\xff binary"),
}

func testBeginFresh(e *env) {
	e.mustStart("s", "fp", "t1")
}

func testBeginInFlight(e *env) {
	e.mustStart("s", "fp", "t1")
	e.clock.Advance(10 * time.Second)
	rec, _ := e.begin("s", "fp", "t2")
	want := idkeeper.IdempotencyRecord{
		Scope: "s", Fingerprint: "fp", State: idkeeper.IdempotencyInFlight,
		CreatedAt: T0, LockedUntil: T0.Add(lockFor), ExpiresAt: T0.Add(lockFor),
	}
	checkRecord(e, rec, want)
}

func testBeginOtherFingerprint(e *env) {
	e.mustStart("s", "fp1", "t1")
	if rec, _ := e.begin("s", "fp2", "t2"); rec.Fingerprint != "fp1" || rec.State != idkeeper.IdempotencyInFlight {
		e.Fatalf("Begin with another fingerprint = %+v, want the in-flight record of fp1", rec)
	}
	if err := e.complete("s", "t1", result); err != nil {
		e.Fatal(err)
	}
	if rec, _ := e.begin("s", "fp2", "t3"); rec.Fingerprint != "fp1" || rec.State != idkeeper.IdempotencyCompleted {
		e.Fatalf("Begin with another fingerprint = %+v, want the completed record of fp1", rec)
	}
}

func testScopesIndependent(e *env) {
	e.mustStart("a", "fp", "t1")
	e.mustStart("b", "fp", "t1")
	if err := e.complete("a", "t1", result); err != nil {
		e.Fatal(err)
	}
	if rec := e.mustFind("b"); rec.State != idkeeper.IdempotencyInFlight {
		e.Fatalf("scope b = %+v after completing scope a", rec)
	}
}

func testCompleteReplay(e *env) {
	e.mustStart("s", "fp", "t1")
	done := e.clock.Advance(3 * time.Second)
	if err := e.complete("s", "t1", result); err != nil {
		e.Fatalf("Complete: %v", err)
	}
	e.clock.Advance(time.Hour)
	rec, _ := e.begin("s", "fp", "t2")
	checkRecord(e, rec, idkeeper.IdempotencyRecord{
		Scope: "s", Fingerprint: "fp", State: idkeeper.IdempotencyCompleted,
		Status: result.Status, Header: result.Header, Body: result.Body,
		CreatedAt: T0, ExpiresAt: idkeeper.Millis(done).Add(ttl),
	})
}

func testCompleteEmpty(e *env) {
	e.mustStart("s", "fp", "t1")
	if err := e.complete("s", "t1", idkeeper.IdempotencyResult{Status: 204}); err != nil {
		e.Fatal(err)
	}
	rec := e.mustFind("s")
	if rec.State != idkeeper.IdempotencyCompleted || rec.Status != 204 || len(rec.Header) != 0 || len(rec.Body) != 0 {
		e.Fatalf("record = %+v, want completed 204 without header or body", rec)
	}
}

func testCompleteNotOurs(e *env) {
	e.wantLost(e.complete("s", "t1", result), "Complete of an absent scope")
	e.mustStart("s", "fp", "t1")
	e.wantLost(e.complete("s", "t2", result), "Complete with another token")
	if rec := e.mustFind("s"); rec.State != idkeeper.IdempotencyInFlight {
		e.Fatalf("record after a foreign Complete = %+v, want in flight", rec)
	}
	if err := e.complete("s", "t1", result); err != nil {
		e.Fatal(err)
	}
	e.wantLost(e.complete("s", "t1", idkeeper.IdempotencyResult{Status: 500}), "a second Complete")
	if rec := e.mustFind("s"); rec.Status != result.Status {
		e.Fatalf("record after a second Complete = %+v, want the first result", rec)
	}
}

func testCompleteAtLockEdge(e *env) {
	e.mustStart("a", "fp", "t1")
	e.mustStart("b", "fp", "t1")
	e.clock.Advance(lockFor - time.Millisecond)
	if err := e.complete("a", "t1", result); err != nil {
		e.Fatalf("Complete 1 ms before the marker lapses: %v", err)
	}
	e.clock.Advance(time.Millisecond)
	e.wantLost(e.complete("b", "t1", result), "Complete as the marker lapses")
}

func testAbort(e *env) {
	if err := e.s.Abort(e.ctx, "s", "t1"); err != nil {
		e.Fatalf("Abort of an absent scope: %v", err)
	}
	e.mustStart("s", "fp", "t1")
	if err := e.s.Abort(e.ctx, "s", "t2"); err != nil {
		e.Fatalf("Abort with another token: %v", err)
	}
	if rec := e.mustFind("s"); rec.State != idkeeper.IdempotencyInFlight {
		e.Fatalf("record after a foreign Abort = %+v", rec)
	}
	if err := e.s.Abort(e.ctx, "s", "t1"); err != nil {
		e.Fatal(err)
	}
	e.wantLost(e.complete("s", "t1", result), "Complete after Abort")
	e.mustStart("s", "fp2", "t3")
	if err := e.complete("s", "t3", result); err != nil {
		e.Fatal(err)
	}
	if err := e.s.Abort(e.ctx, "s", "t3"); err != nil {
		e.Fatal(err)
	}
	if rec := e.mustFind("s"); rec.State != idkeeper.IdempotencyCompleted || rec.Fingerprint != "fp2" {
		e.Fatalf("record after aborting a completed one = %+v, want it kept", rec)
	}
}

func testMarkerLapse(e *env) {
	e.mustStart("s", "fp", "t1")
	e.clock.Advance(lockFor - time.Millisecond)
	if rec := e.mustFind("s"); rec.State != idkeeper.IdempotencyInFlight {
		e.Fatalf("record 1 ms before the marker lapses = %+v", rec)
	}
	now := e.clock.Advance(time.Millisecond)
	e.mustStart("s", "fp2", "t2")
	e.wantLost(e.complete("s", "t1", result), "Complete by the lapsed marker's owner")
	if err := e.s.Abort(e.ctx, "s", "t1"); err != nil {
		e.Fatal(err)
	}
	rec := e.mustFind("s")
	checkRecord(e, rec, idkeeper.IdempotencyRecord{
		Scope: "s", Fingerprint: "fp2", State: idkeeper.IdempotencyInFlight, CreatedAt: idkeeper.Millis(now),
		LockedUntil: idkeeper.Millis(now).Add(lockFor), ExpiresAt: idkeeper.Millis(now).Add(lockFor),
	})
	if err := e.complete("s", "t2", result); err != nil {
		e.Fatalf("Complete by the new owner: %v", err)
	}
}

func testRecordLapse(e *env) {
	e.mustStart("s", "fp", "t1")
	if err := e.complete("s", "t1", result); err != nil {
		e.Fatal(err)
	}
	e.clock.Advance(ttl - time.Millisecond)
	if rec := e.mustFind("s"); rec.State != idkeeper.IdempotencyCompleted {
		e.Fatalf("record 1 ms before it lapses = %+v", rec)
	}
	e.clock.Advance(time.Millisecond)
	e.mustStart("s", "fp2", "t2")
	if rec := e.mustFind("s"); rec.State != idkeeper.IdempotencyInFlight || rec.Fingerprint != "fp2" || rec.Body != nil {
		e.Fatalf("record after the lapse = %+v, want a fresh marker", rec)
	}
}

func testConcurrent(e *env) {
	const n = 50
	var (
		mu      sync.Mutex
		winners []string
		wg      sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			token := fmt.Sprintf("t%d", i)
			rec, started, err := e.s.Begin(e.ctx, "s", "fp", token, lockFor)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				e.Errorf("Begin: %v", err)
			case started:
				winners = append(winners, token)
			case rec.State != idkeeper.IdempotencyInFlight:
				e.Errorf("concurrent Begin found %+v", rec)
			}
		})
	}
	wg.Wait()
	if len(winners) != 1 {
		e.Fatalf("%d of %d concurrent Begins started: %v", len(winners), n, winners)
	}
	var lost int
	for i := range n {
		wg.Go(func() {
			err := e.s.Complete(e.ctx, "s", fmt.Sprintf("t%d", i), idkeeper.IdempotencyResult{Status: 200 + i}, ttl)
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, idkeeper.ErrIdempotencyMarkerLost) {
				lost++
			} else if err != nil {
				e.Errorf("Complete: %v", err)
			}
		})
	}
	wg.Wait()
	if lost != n-1 {
		e.Fatalf("%d concurrent Completes lost, want %d", lost, n-1)
	}
	if rec := e.mustFind("s"); fmt.Sprintf("t%d", rec.Status-200) != winners[0] {
		e.Fatalf("stored status %d, want the winner %s's", rec.Status, winners[0])
	}
}

func testInvalid(e *env) {
	long := string(bytes.Repeat([]byte("x"), idkeeper.MaxIdempotencyScopeLen+1))
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Begin/EmptyScope", func() error { _, _, err := e.s.Begin(e.ctx, "", "fp", "t", lockFor); return err }},
		{"Begin/LongScope", func() error { _, _, err := e.s.Begin(e.ctx, long, "fp", "t", lockFor); return err }},
		{"Begin/EmptyFingerprint", func() error { _, _, err := e.s.Begin(e.ctx, "s", "", "t", lockFor); return err }},
		{"Begin/EmptyToken", func() error { _, _, err := e.s.Begin(e.ctx, "s", "fp", "", lockFor); return err }},
		{"Begin/ZeroLock", func() error { _, _, err := e.s.Begin(e.ctx, "s", "fp", "t", 0); return err }},
		{"Complete/EmptyToken", func() error { return e.s.Complete(e.ctx, "s", "", result, ttl) }},
		{"Complete/Status", func() error { return e.s.Complete(e.ctx, "s", "t", idkeeper.IdempotencyResult{Status: 0}, ttl) }},
		{"Complete/ZeroTTL", func() error { return e.s.Complete(e.ctx, "s", "t", result, 0) }},
		{"Abort/EmptyScope", func() error { return e.s.Abort(e.ctx, "", "t") }},
	} {
		if err := c.call(); idkeeper.ErrorCode(err) != idkeeper.CodeInvalidRequest {
			e.Errorf("%s: %v, want INVALID_REQUEST", c.name, err)
		}
	}
}

func testPurge(e *env) {
	p, ok := e.s.(Purger)
	if !ok {
		e.Skip("the store expires records by itself")
	}
	for _, s := range []string{"a", "b", "c"} {
		e.mustStart(s, "fp", "t")
	}
	if err := e.complete("a", "t", result); err != nil {
		e.Fatal(err)
	}
	e.clock.Advance(lockFor)
	n, err := p.Purge(e.ctx)
	if err != nil || n != 2 {
		e.Fatalf("Purge = %d, %v; want the 2 lapsed markers", n, err)
	}
	if rec := e.mustFind("a"); rec.State != idkeeper.IdempotencyCompleted {
		e.Fatalf("completed record after Purge = %+v", rec)
	}
	if n, err := p.Purge(e.ctx); err != nil || n != 0 {
		e.Fatalf("second Purge = %d, %v; want 0", n, err)
	}
}

func checkRecord(e *env, got *idkeeper.IdempotencyRecord, want idkeeper.IdempotencyRecord) {
	e.Helper()
	if got == nil {
		e.Fatalf("no record, want %+v", want)
	}
	ok := got.Scope == want.Scope && got.Fingerprint == want.Fingerprint && got.State == want.State &&
		got.Status == want.Status && bytes.Equal(got.Body, want.Body) &&
		maps.EqualFunc(got.Header, want.Header, slices.Equal) &&
		got.CreatedAt.Equal(want.CreatedAt) && got.LockedUntil.Equal(want.LockedUntil) && got.ExpiresAt.Equal(want.ExpiresAt)
	if !ok {
		e.Fatalf("record\n got %+v\nwant %+v", *got, want)
	}
}
