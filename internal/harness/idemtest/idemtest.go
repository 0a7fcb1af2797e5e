// Package idemtest is the contract suite every idempotency.Store passes. A
// store's test calls Run with a Factory that opens a new, empty store on a fake
// clock:
//
//	func TestIdempotencyContract(t *testing.T) {
//		idemtest.Run(t, func(t *testing.T, clock idkeeper.Clock) idempotency.Store {
//			return openMyStore(t, clock) // closed by t.Cleanup
//		})
//	}
//
// Time moves only through the fake clock, which starts half a millisecond past a
// whole millisecond, so a store that does not truncate to the millisecond fails.
//
// A store that is also an idempotency.CountingStore (bolt and redis are) runs the
// cases of the cap (Owned) and of Stats too; others skip them.
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
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/protocol"
)

// Factory opens a new, empty store whose clock is clock and registers its Close
// with t.Cleanup.
type Factory func(t *testing.T, clock idkeeper.Clock) idempotency.Store

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
		{"EncodedRecord", testEncodedRecord},
		{"Cap/Refuses", testCapRefuses},
		{"Cap/Lapse", testCapLapse},
		{"Cap/Concurrent", testCapConcurrent},
		{"Cap/OtherOwner", testCapOtherOwner},
		{"Cap/Invalid", testCapInvalid},
		{"Stats", testStats},
		{"Stats/CompactRecord", testStatsCompact},
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
	s     idempotency.Store
}

// begin calls Begin and fails the test on an error.
func (e *env) begin(scope, fp, token string) (*idempotency.Record, bool) {
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
func (e *env) mustFind(scope string) *idempotency.Record {
	e.Helper()
	rec, started := e.begin(scope, "probe", "probe-token")
	if started {
		e.Fatalf("Begin(%q) started: the record was not live", scope)
	}
	return rec
}

func (e *env) complete(scope, token string, res idempotency.Stored) error {
	e.Helper()
	return e.s.Complete(e.ctx, scope, token, res, ttl)
}

func (e *env) wantLost(err error, what string) {
	e.Helper()
	if !errors.Is(err, idempotency.ErrMarkerLost) {
		e.Fatalf("%s: %v, want ErrIdempotencyMarkerLost", what, err)
	}
}

var result = idempotency.Stored{
	Outcome:  201,
	Metadata: map[string][]string{"Content-Type": {"application/json"}, "Link": {"</a>", "</b>"}},
	Body:     []byte("{\"ids\":[1,2]}\x00\xff binary"),
}

func testBeginFresh(e *env) {
	e.mustStart("s", "fp", "t1")
}

func testBeginInFlight(e *env) {
	e.mustStart("s", "fp", "t1")
	e.clock.Advance(10 * time.Second)
	rec, _ := e.begin("s", "fp", "t2")
	want := idempotency.Record{
		Scope: "s", Fingerprint: "fp", State: idempotency.InFlight,
		CreatedAt: T0, LockedUntil: T0.Add(lockFor), ExpiresAt: T0.Add(lockFor),
	}
	checkRecord(e, rec, want)
}

func testBeginOtherFingerprint(e *env) {
	e.mustStart("s", "fp1", "t1")
	if rec, _ := e.begin("s", "fp2", "t2"); rec.Fingerprint != "fp1" || rec.State != idempotency.InFlight {
		e.Fatalf("Begin with another fingerprint = %+v, want the in-flight record of fp1", rec)
	}
	if err := e.complete("s", "t1", result); err != nil {
		e.Fatal(err)
	}
	if rec, _ := e.begin("s", "fp2", "t3"); rec.Fingerprint != "fp1" || rec.State != idempotency.Completed {
		e.Fatalf("Begin with another fingerprint = %+v, want the completed record of fp1", rec)
	}
}

func testScopesIndependent(e *env) {
	e.mustStart("a", "fp", "t1")
	e.mustStart("b", "fp", "t1")
	if err := e.complete("a", "t1", result); err != nil {
		e.Fatal(err)
	}
	if rec := e.mustFind("b"); rec.State != idempotency.InFlight {
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
	checkRecord(e, rec, idempotency.Record{
		Scope: "s", Fingerprint: "fp", State: idempotency.Completed,
		Outcome: result.Outcome, Metadata: result.Metadata, Body: result.Body,
		CreatedAt: T0, ExpiresAt: protocol.Millis(done).Add(ttl),
	})
}

func testCompleteEmpty(e *env) {
	e.mustStart("s", "fp", "t1")
	if err := e.complete("s", "t1", idempotency.Stored{Outcome: 204}); err != nil {
		e.Fatal(err)
	}
	rec := e.mustFind("s")
	if rec.State != idempotency.Completed || rec.Outcome != 204 || len(rec.Metadata) != 0 || len(rec.Body) != 0 {
		e.Fatalf("record = %+v, want completed 204 without header or body", rec)
	}
}

func testCompleteNotOurs(e *env) {
	e.wantLost(e.complete("s", "t1", result), "Complete of an absent scope")
	e.mustStart("s", "fp", "t1")
	e.wantLost(e.complete("s", "t2", result), "Complete with another token")
	if rec := e.mustFind("s"); rec.State != idempotency.InFlight {
		e.Fatalf("record after a foreign Complete = %+v, want in flight", rec)
	}
	if err := e.complete("s", "t1", result); err != nil {
		e.Fatal(err)
	}
	e.wantLost(e.complete("s", "t1", idempotency.Stored{Outcome: 500}), "a second Complete")
	if rec := e.mustFind("s"); rec.Outcome != result.Outcome {
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
	if rec := e.mustFind("s"); rec.State != idempotency.InFlight {
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
	if rec := e.mustFind("s"); rec.State != idempotency.Completed || rec.Fingerprint != "fp2" {
		e.Fatalf("record after aborting a completed one = %+v, want it kept", rec)
	}
}

func testMarkerLapse(e *env) {
	e.mustStart("s", "fp", "t1")
	e.clock.Advance(lockFor - time.Millisecond)
	if rec := e.mustFind("s"); rec.State != idempotency.InFlight {
		e.Fatalf("record 1 ms before the marker lapses = %+v", rec)
	}
	now := e.clock.Advance(time.Millisecond)
	e.mustStart("s", "fp2", "t2")
	e.wantLost(e.complete("s", "t1", result), "Complete by the lapsed marker's owner")
	if err := e.s.Abort(e.ctx, "s", "t1"); err != nil {
		e.Fatal(err)
	}
	rec := e.mustFind("s")
	checkRecord(e, rec, idempotency.Record{
		Scope: "s", Fingerprint: "fp2", State: idempotency.InFlight, CreatedAt: protocol.Millis(now),
		LockedUntil: protocol.Millis(now).Add(lockFor), ExpiresAt: protocol.Millis(now).Add(lockFor),
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
	if rec := e.mustFind("s"); rec.State != idempotency.Completed {
		e.Fatalf("record 1 ms before it lapses = %+v", rec)
	}
	e.clock.Advance(time.Millisecond)
	e.mustStart("s", "fp2", "t2")
	if rec := e.mustFind("s"); rec.State != idempotency.InFlight || rec.Fingerprint != "fp2" || rec.Body != nil {
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
			case rec.State != idempotency.InFlight:
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
			err := e.s.Complete(e.ctx, "s", fmt.Sprintf("t%d", i), idempotency.Stored{Outcome: 200 + i}, ttl)
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, idempotency.ErrMarkerLost) {
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
	if rec := e.mustFind("s"); fmt.Sprintf("t%d", rec.Outcome-200) != winners[0] {
		e.Fatalf("stored outcome %d, want the winner %s's", rec.Outcome, winners[0])
	}
}

func testInvalid(e *env) {
	long := string(bytes.Repeat([]byte("x"), idempotency.MaxScopeLen+1))
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
		{"Complete/Outcome", func() error { return e.s.Complete(e.ctx, "s", "t", idempotency.Stored{Outcome: 0}, ttl) }},
		{"Complete/ZeroTTL", func() error { return e.s.Complete(e.ctx, "s", "t", result, 0) }},
		{"Abort/EmptyScope", func() error { return e.s.Abort(e.ctx, "", "t") }},
	} {
		if err := c.call(); protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
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
	if rec := e.mustFind("a"); rec.State != idempotency.Completed {
		e.Fatalf("completed record after Purge = %+v", rec)
	}
	if n, err := p.Purge(e.ctx); err != nil || n != 0 {
		e.Fatalf("second Purge = %d, %v; want 0", n, err)
	}
}

func checkRecord(e *env, got *idempotency.Record, want idempotency.Record) {
	e.Helper()
	if got == nil {
		e.Fatalf("no record, want %+v", want)
	}
	ok := got.Scope == want.Scope && got.Fingerprint == want.Fingerprint && got.State == want.State &&
		got.Outcome == want.Outcome && bytes.Equal(got.Body, want.Body) &&
		maps.EqualFunc(got.Metadata, want.Metadata, slices.Equal) &&
		got.CreatedAt.Equal(want.CreatedAt) && got.LockedUntil.Equal(want.LockedUntil) && got.ExpiresAt.Equal(want.ExpiresAt)
	if !ok {
		e.Fatalf("record\n got %+v\nwant %+v", *got, want)
	}
}

// counting returns the store as a CountingStore, or skips the case.
func (e *env) counting() idempotency.CountingStore {
	e.Helper()
	c, ok := e.s.(idempotency.CountingStore)
	if !ok {
		e.Skip("the store does not count records")
	}
	return c
}

func beginOn(e *env, s idempotency.Store, scope, token string) (*idempotency.Record, bool, error) {
	e.Helper()
	rec, started, err := s.Begin(e.ctx, scope, "fp", token, lockFor)
	if err == nil && started != (rec == nil) {
		e.Fatalf("Begin(%q) = %+v, started %v: want a record exactly when not started", scope, rec, started)
	}
	return rec, started, err
}

func mustStartOn(e *env, s idempotency.Store, scope, token string) {
	e.Helper()
	if rec, started, err := beginOn(e, s, scope, token); err != nil || !started {
		e.Fatalf("Begin(%q): started %v, %+v, %v; want a new marker", scope, started, rec, err)
	}
}

// wantFull checks that Begin of scope on s is refused for a full owner of max
// records whose earliest record lapses in retryAfter seconds.
func wantFull(e *env, s idempotency.Store, scope string, max, retryAfter int) {
	e.Helper()
	rec, started, err := beginOn(e, s, scope, "refused")
	ce, ok := errors.AsType[*idempotency.CapError](err)
	if !ok {
		e.Fatalf("Begin(%q) on a full owner: %+v, %v, %v; want an *idempotency.CapError", scope, rec, started, err)
	}
	if ce.MaxRecords != max || ce.RetryAfter != retryAfter {
		e.Fatalf("refusal %+v, want MaxRecords %d, RetryAfter %d", *ce, max, retryAfter)
	}
}

// testEncodedRecord: a record holds any header name, HeaderEncoding included,
// and a binary body, byte for byte.
func testEncodedRecord(e *env) {
	res := idempotency.Stored{Outcome: 200,
		Metadata: map[string][]string{"Content-Type": {"application/json"}, idempotency.HeaderEncoding: {"gateway.ids/1"}},
		Body:     []byte{'n', 0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00, 0xff, 0x07}}
	e.mustStart("s", "fp", "t1")
	if err := e.complete("s", "t1", res); err != nil {
		e.Fatal(err)
	}
	rec := e.mustFind("s")
	if rec.Outcome != 200 || !bytes.Equal(rec.Body, res.Body) || !maps.EqualFunc(rec.Metadata, res.Metadata, slices.Equal) {
		e.Fatalf("encoded record read back as %+v, want %+v", rec, res)
	}
}

// testCapRefuses: an owner holds at most max live records, markers and completed
// ones alike; a scope with a live record is answered whatever the owner holds;
// Abort frees a place.
func testCapRefuses(e *env) {
	c := e.counting()
	o := c.Owned("owner-a", 3)
	for _, s := range []string{"s1", "s2", "s3"} {
		mustStartOn(e, o, s, "t-"+s)
	}
	if err := o.Complete(e.ctx, "s1", "t-s1", result, ttl); err != nil {
		e.Fatal(err)
	}
	e.clock.Advance(10 * time.Second)
	// The markers of s2 and s3 lapse at T0+lockFor, 50 s from now.
	wantFull(e, o, "s4", 3, 50)
	if rec, started, err := beginOn(e, o, "s1", "t-x"); err != nil || started || rec.State != idempotency.Completed {
		e.Fatalf("Begin of a completed scope of a full owner = %+v, %v, %v; want the record", rec, started, err)
	}
	if rec, started, err := beginOn(e, o, "s2", "t-x"); err != nil || started || rec.State != idempotency.InFlight {
		e.Fatalf("Begin of an in-flight scope of a full owner = %+v, %v, %v; want the marker", rec, started, err)
	}
	wantFull(e, o, "s4", 3, 50) // the refusal wrote nothing
	// Without a cap the owner may exceed it; with one it stays full.
	mustStartOn(e, c.Owned("owner-a", 0), "s5", "t-s5")
	wantFull(e, c.Owned("owner-a", 4), "s4", 4, 50)
	if err := o.Abort(e.ctx, "s2", "t-s2"); err != nil {
		e.Fatal(err)
	}
	wantFull(e, o, "s4", 3, 50)
	if err := o.Abort(e.ctx, "s5", "t-s5"); err != nil {
		e.Fatal(err)
	}
	mustStartOn(e, o, "s4", "t-s4")
	wantFull(e, o, "s6", 3, 50)
}

// testCapLapse: a record stops counting the moment it lapses.
func testCapLapse(e *env) {
	o := e.counting().Owned("owner", 2)
	mustStartOn(e, o, "s1", "t1")
	mustStartOn(e, o, "s2", "t2")
	if err := o.Complete(e.ctx, "s2", "t2", result, ttl); err != nil {
		e.Fatal(err)
	}
	e.clock.Advance(lockFor - time.Millisecond)
	wantFull(e, o, "s3", 2, 1)
	e.clock.Advance(time.Millisecond) // s1's marker lapses; s2 lives for ttl
	mustStartOn(e, o, "s3", "t3")
	wantFull(e, o, "s4", 2, 60)
	// The lapsed scope itself starts afresh and counts again.
	e.clock.Advance(lockFor)
	mustStartOn(e, o, "s1", "t1b")
	wantFull(e, o, "s4", 2, 60)
	e.clock.Advance(ttl)
	mustStartOn(e, o, "s4", "t4")
	mustStartOn(e, o, "s5", "t5")
}

// testCapConcurrent: concurrent Begins of new scopes never take an owner past
// its cap.
func testCapConcurrent(e *env) {
	const n, max = 40, 5
	o := e.counting().Owned("owner", max)
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		started, refused int
	)
	for i := range n {
		wg.Go(func() {
			_, ok, err := o.Begin(e.ctx, fmt.Sprintf("s%d", i), "fp", fmt.Sprintf("t%d", i), lockFor)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.As(err, new(*idempotency.CapError)):
				refused++
			case err != nil:
				e.Errorf("Begin: %v", err)
			case ok:
				started++
			}
		})
	}
	wg.Wait()
	if started != max || refused != n-max {
		e.Fatalf("%d concurrent Begins for an owner of %d: %d started, %d refused", n, max, started, refused)
	}
}

// testCapOtherOwner: owners are counted apart, and one owner's view does not
// settle another's marker.
func testCapOtherOwner(e *env) {
	c := e.counting()
	a, b := c.Owned("a", 1), c.Owned("b", 1)
	mustStartOn(e, a, "sa", "ta")
	mustStartOn(e, b, "sb", "tb")
	wantFull(e, a, "sa2", 1, 60)
	e.wantLost(b.Complete(e.ctx, "sa", "ta", result, ttl), "Complete through another owner's view")
	if err := b.Abort(e.ctx, "sa", "ta"); err != nil {
		e.Fatal(err)
	}
	if rec := e.mustFind("sa"); rec.State != idempotency.InFlight {
		e.Fatalf("another owner's Abort changed the marker: %+v", rec)
	}
	if err := a.Complete(e.ctx, "sa", "ta", result, ttl); err != nil {
		e.Fatalf("Complete by the owner: %v", err)
	}
}

func testCapInvalid(e *env) {
	c := e.counting()
	long := string(bytes.Repeat([]byte("o"), idempotency.MaxScopeLen+1))
	for name, s := range map[string]idempotency.Store{"LongOwner": c.Owned(long, 1), "NegativeCap": c.Owned("o", -1)} {
		if _, _, err := s.Begin(e.ctx, "s", "fp", "t", lockFor); protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
			e.Errorf("%s: Begin: %v, want INVALID_REQUEST", name, err)
		}
		if err := s.Abort(e.ctx, "s", "t"); protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
			e.Errorf("%s: Abort: %v, want INVALID_REQUEST", name, err)
		}
	}
}

func (e *env) stats(c idempotency.CountingStore) (records, size int64) {
	e.Helper()
	records, size, err := c.Stats(e.ctx)
	if err != nil {
		e.Fatalf("Stats: %v", err)
	}
	return records, size
}

// testStats: Stats counts the live records of every owner and their bytes, and
// forgets a record within a minute of its lapse.
func testStats(e *env) {
	c := e.counting()
	if r, b := e.stats(c); r != 0 || b != 0 {
		e.Fatalf("Stats of an empty store = %d records, %d bytes", r, b)
	}
	o := c.Owned("owner", 10)
	mustStartOn(e, o, "s1", "t1")
	mustStartOn(e, o, "s2", "t2")
	e.mustStart("s3", "fp", "t3") // the plain methods: the owner ""
	r, markers := e.stats(c)
	if r != 3 || markers <= 0 || markers > 3*1024 {
		e.Fatalf("Stats with 3 markers = %d records, %d bytes", r, markers)
	}
	big := idempotency.Stored{Outcome: 200, Body: bytes.Repeat([]byte("x"), 10_000)}
	if err := o.Complete(e.ctx, "s1", "t1", big, ttl); err != nil {
		e.Fatal(err)
	}
	r, withBody := e.stats(c)
	// The marker's token and lock time go; a store may keep a binary body as
	// base64, 4/3 of its bytes.
	if r != 3 || withBody-markers < 10_000-256 || withBody-markers > 10_000*4/3+1024 {
		e.Fatalf("Stats after storing 10,000 bytes = %d records, %d bytes (from %d)", r, withBody, markers)
	}
	if err := o.Abort(e.ctx, "s2", "t2"); err != nil {
		e.Fatal(err)
	}
	if err := e.s.Abort(e.ctx, "s3", "t3"); err != nil {
		e.Fatal(err)
	}
	if r, b := e.stats(c); r != 1 || b <= 10_000 || b >= withBody {
		e.Fatalf("Stats after two Aborts = %d records, %d bytes; want 1 record of more than 10,000 bytes", r, b)
	}
	e.clock.Advance(ttl + time.Minute)
	if r, b := e.stats(c); r != 0 || b != 0 {
		e.Fatalf("Stats a minute after every record lapsed = %d records, %d bytes", r, b)
	}
	// Lapsed records are replaced and counted afresh.
	mustStartOn(e, o, "s1", "t1c")
	if r, _ := e.stats(c); r != 1 {
		e.Fatalf("Stats after reusing a lapsed scope = %d records, want 1", r)
	}
}

// testStatsCompact: the bytes of a record are its own, within a small overhead:
// a record of a 64-byte body, as the gateway stores a batch of IDs, takes well
// under a kilobyte.
func testStatsCompact(e *env) {
	c := e.counting()
	o := c.Owned("gateway.ids.issue:0123456789abcdef0123456789abcdef", 1000)
	scope := "gateway.ids.issue:" + string(bytes.Repeat([]byte("ab"), 32))
	fp := string(bytes.Repeat([]byte("f0"), 32))
	if _, started, err := o.Begin(e.ctx, scope, fp, "0123456789abcdef0123456789abcdef", lockFor); err != nil || !started {
		e.Fatalf("Begin: %v, %v", started, err)
	}
	res := idempotency.Stored{Outcome: 200,
		Metadata: map[string][]string{"Content-Type": {"application/json"}, idempotency.HeaderEncoding: {"gateway.ids/1"}},
		Body:     bytes.Repeat([]byte{0x81}, 64)}
	if err := o.Complete(e.ctx, scope, "0123456789abcdef0123456789abcdef", res, ttl); err != nil {
		e.Fatal(err)
	}
	r, b := e.stats(c)
	e.Logf("one record of a 64-byte body: %d bytes", b)
	if r != 1 || b < 64+int64(len(scope)+len(fp)) || b > 1024 {
		e.Fatalf("Stats = %d records, %d bytes; want 1 record of %d to 1024 bytes", r, b, 64+len(scope)+len(fp))
	}
}
