package idkeeper_test

import (
	"context"
	"errors"
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

// skewSpy is a store that notes every RecordSkew, with the clock's time, and
// fails them while fail is set.
type skewSpy struct {
	idkeeper.Store
	clk    *fakeclock.Clock
	mu     sync.Mutex
	writes []skewWrite
	fail   bool
}

type skewWrite struct {
	at time.Time
	o  idkeeper.SkewObservation
}

func (s *skewSpy) RecordSkew(ctx context.Context, o idkeeper.SkewObservation, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return errors.New("spy: the store is down")
	}
	s.writes = append(s.writes, skewWrite{at: s.clk.Now(), o: o})
	return s.Store.RecordSkew(ctx, o, ttl)
}

func (s *skewSpy) setFail(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = v
}

// writesOf returns the writes for requester w, or every write when w is nil.
func (s *skewSpy) writesOf(w *idkeeper.Requester) []skewWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []skewWrite
	for _, x := range s.writes {
		if w == nil || x.o.Requester.Key() == w.Key() {
			out = append(out, x)
		}
	}
	return out
}

// newSkewEnv is newEnv over a bolt store behind a skewSpy.
func newSkewEnv(t *testing.T, cfg idkeeper.Config) (*env, *skewSpy) {
	t.Helper()
	clk := fakeclock.New(t0)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	spy := &skewSpy{Store: st, clk: clk}
	return openEnv(t, spy, clk, cfg), spy
}

// Skews of the default grace (10 min): more than 5 min behind warns, more than
// 10 min rejects an Alloc.
const (
	warnSkew   = 6 * time.Minute
	rejectSkew = 11 * time.Minute
)

// alloc asks for one node ID for w with a client clock skew behind the fake clock.
func (e *env) alloc(w idkeeper.Requester, skew time.Duration) error {
	now := e.clk.Now().Add(-skew)
	_, err := e.reg.Alloc(context.Background(), idkeeper.AllocRequest{Requester: w, Count: 1, ClientNow: &now, RemoteIP: "192.0.2.7"})
	return err
}

// renew renews w's leases with a client clock skew behind the fake clock.
func (e *env) renew(t *testing.T, w idkeeper.Requester, skew time.Duration) {
	t.Helper()
	now := e.clk.Now().Add(-skew)
	if _, err := e.reg.Renew(context.Background(), idkeeper.RenewRequest{Requester: w, ClientNow: &now}); err != nil {
		t.Fatalf("renew: %v", err)
	}
}

// recorded returns the store's observation of w; ok is false when it has none.
func (e *env) recorded(t *testing.T, w idkeeper.Requester) (o idkeeper.SkewObservation, ok bool) {
	t.Helper()
	obs, err := e.store.SkewObservations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range obs {
		if o.Requester.Key() == w.Key() {
			return o, true
		}
	}
	return idkeeper.SkewObservation{}, false
}

func (e *env) wantRecorded(t *testing.T, w idkeeper.Requester, level idkeeper.SkewLevel) {
	t.Helper()
	o, ok := e.recorded(t, w)
	if !ok || o.Level != level {
		t.Fatalf("recorded for %s: %+v (%v), want level %q", w.Key(), o, ok, level)
	}
}

func isSkewRejection(err error) bool {
	var ie *idkeeper.Error
	return errors.As(err, &ie) && ie.Code == protocol.CodeClockSkewTooLarge
}

// checkBudget fails when a requester got two writes within one SkewEvery.
func checkBudget(t *testing.T, writes []skewWrite) {
	t.Helper()
	last := map[string]time.Time{}
	for _, w := range writes {
		k := w.o.Requester.Key()
		if at, ok := last[k]; ok && w.at.Sub(at) < idkeeper.SkewEvery {
			t.Fatalf("%s written at %v and again at %v", k, at.Sub(t0), w.at.Sub(t0))
		}
		last[k] = w.at
	}
}

// A healthy observation replaces a stored warning (so an alert on it clears);
// healthy clocks that were never skewed cost no write.
func TestSkewHealthyObservationReplacesWarning(t *testing.T) {
	e, spy := newSkewEnv(t, idkeeper.Config{})
	a, b := who(1), who(2)

	if err := e.alloc(b, 0); err != nil {
		t.Fatal(err)
	}
	e.renew(t, b, time.Second)
	if w := spy.writesOf(nil); len(w) != 0 {
		t.Fatalf("healthy clocks were written: %+v", w)
	}
	if n := idkeeper.SkewBookLen(e.reg); n != 0 {
		t.Fatalf("healthy clocks take %d entries of memory", n)
	}

	if err := e.alloc(a, warnSkew); err != nil {
		t.Fatal(err)
	}
	e.wantRecorded(t, a, idkeeper.SkewWarn)

	// NTP fixed; the next renew, a day later, is healthy: the warning is replaced.
	e.clk.Advance(24 * time.Hour)
	e.renew(t, a, 0)
	e.wantRecorded(t, a, idkeeper.SkewOK)
	if !strings.Contains(e.logs.String(), "clock skew healthy again") {
		t.Fatalf("no line says the skew is healthy again:\n%s", e.logs)
	}

	// Healthy again and again: nothing more to replace.
	e.clk.Advance(time.Hour)
	e.renew(t, a, 0)
	e.clk.Advance(time.Hour)
	e.renew(t, a, -time.Second)
	if w := spy.writesOf(&a); len(w) != 2 {
		t.Fatalf("writes for a: %+v, want the warning and its replacement", w)
	}
	if w := spy.writesOf(&b); len(w) != 0 {
		t.Fatalf("writes for b: %+v", w)
	}
}

// A rejection fixed within the minute of its write: the healthy observations are
// held back by the write budget, then written once the minute is over, by the
// requester's own next call, by another requester's call or by the flush.
func TestSkewHealthyAfterRejectionWithinTheMinute(t *testing.T) {
	for _, how := range []string{"own call", "other call", "flush"} {
		t.Run(how, func(t *testing.T) {
			e, spy := newSkewEnv(t, idkeeper.Config{})
			a, b := who(1), who(2)
			if err := e.alloc(a, rejectSkew); !isSkewRejection(err) {
				t.Fatalf("alloc: %v, want CLOCK_SKEW_TOO_LARGE", err)
			}
			e.wantRecorded(t, a, idkeeper.SkewReject)

			// The client's retry 9 s later, after NTP was fixed, and its first renew.
			e.clk.Advance(9 * time.Second)
			if err := e.alloc(a, 0); err != nil {
				t.Fatal(err)
			}
			e.renew(t, a, 0)
			e.wantRecorded(t, a, idkeeper.SkewReject) // held back: one write a minute
			if n := idkeeper.FlushSkew(context.Background(), e.reg, 10); n != 0 {
				t.Fatalf("flushed %d records before the minute was over", n)
			}

			e.clk.Advance(idkeeper.SkewEvery - 9*time.Second)
			switch how {
			case "own call":
				e.renew(t, a, 0)
			case "other call":
				if err := e.alloc(b, time.Second); err != nil {
					t.Fatal(err)
				}
			case "flush":
				if n := idkeeper.FlushSkew(context.Background(), e.reg, 10); n != 1 {
					t.Fatalf("flushed %d records, want 1", n)
				}
			}
			e.wantRecorded(t, a, idkeeper.SkewOK)
			if w := spy.writesOf(nil); len(w) != 2 {
				t.Fatalf("writes %+v, want the rejection and its replacement", w)
			}
			checkBudget(t, spy.writesOf(nil))
		})
	}
}

// One requester cannot cause more than one store write and one warning line per
// minute, however often it calls; a rejected Alloc is still answered every time,
// and the next line counts the suppressed ones.
func TestSkewRecordAndLogBudget(t *testing.T) {
	e, spy := newSkewEnv(t, idkeeper.Config{})
	a := who(1)
	for i := range 180 {
		e.clk.Advance(time.Second)
		if err := e.alloc(a, rejectSkew+time.Duration(i)*time.Millisecond); !isSkewRejection(err) {
			t.Fatalf("call %d: %v, want CLOCK_SKEW_TOO_LARGE every time", i, err)
		}
	}
	writes := spy.writesOf(nil)
	checkBudget(t, writes)
	if len(writes) != 3 { // at 1 s, 61 s and 121 s
		t.Fatalf("%d writes in 3 minutes, want 3", len(writes))
	}
	logs := e.logs.String()
	if n := strings.Count(logs, "alloc rejected"); n != 3 {
		t.Fatalf("%d warning lines in 3 minutes, want 3:\n%s", n, logs)
	}
	if n := strings.Count(logs, "suppressed=59"); n != 2 {
		t.Fatalf("the later lines do not count the 59 suppressed ones:\n%s", logs)
	}
	// The newest observation (at 180 s) is held back and written once its minute is over.
	e.clk.Advance(time.Second)
	if n := idkeeper.FlushSkew(context.Background(), e.reg, 10); n != 1 {
		t.Fatalf("flushed %d", n)
	}
	if o, _ := e.recorded(t, a); o.ObservedAt != t0.Add(180*time.Second) {
		t.Fatalf("recorded %+v, want the observation made at 180 s", o)
	}

	// Warnings and rejections, alternating with healthy renews, share the budget.
	e.clk.Advance(time.Hour)
	before := len(spy.writesOf(nil))
	for i := range 120 {
		e.clk.Advance(time.Second)
		skew := []time.Duration{warnSkew, 0, rejectSkew, -warnSkew}[i%4]
		e.renew(t, a, skew)
	}
	writes = spy.writesOf(nil)
	checkBudget(t, writes)
	if n := len(writes) - before; n > 2 {
		t.Fatalf("%d writes in 2 minutes", n)
	}
}

// The book is bounded: past its size, idle requesters are evicted (their minute
// over), and only when every entry is busy is a new requester not recorded,
// which is logged once a minute; healthy requesters take no room. Per-requester
// budgets hold throughout.
func TestSkewBookIsBounded(t *testing.T) {
	e, spy := newSkewEnv(t, idkeeper.Config{})
	const size = 8
	idkeeper.SetSkewBookSize(e.reg, size)
	for pid := 1; pid <= size; pid++ {
		if err := e.alloc(who(pid), warnSkew); err != nil {
			t.Fatal(err)
		}
	}
	// Every entry is busy: the next requesters are answered, not recorded.
	for pid := size + 1; pid <= size+3; pid++ {
		if err := e.alloc(who(pid), rejectSkew); !isSkewRejection(err) {
			t.Fatalf("requester %d: %v, want CLOCK_SKEW_TOO_LARGE", pid, err)
		}
		if _, ok := e.recorded(t, who(pid)); ok {
			t.Fatalf("requester %d recorded in a full book", pid)
		}
	}
	if n := strings.Count(e.logs.String(), "not recorded"); n != 1 {
		t.Fatalf("%d lines about unrecorded observations, want 1:\n%s", n, e.logs)
	}
	if n := idkeeper.SkewBookLen(e.reg); n != size {
		t.Fatalf("book holds %d, want %d", n, size)
	}

	// A minute later the old entries are idle: room is made by evicting them.
	e.clk.Advance(idkeeper.SkewEvery)
	if err := e.alloc(who(100), warnSkew); err != nil {
		t.Fatal(err)
	}
	e.wantRecorded(t, who(100), idkeeper.SkewWarn)
	if n := idkeeper.SkewBookLen(e.reg); n > size*3/4+1 {
		t.Fatalf("book holds %d after eviction", n)
	}

	// Many requesters, one per second, skewed or not: the book never outgrows
	// its size, and healthy ones take no room.
	for pid := 1000; pid < 1400; pid++ {
		e.clk.Advance(time.Second)
		skew := warnSkew
		if pid%2 == 0 {
			skew = 0
		}
		if err := e.alloc(who(pid), skew); err != nil {
			t.Fatal(err)
		}
		if n := idkeeper.SkewBookLen(e.reg); n > size {
			t.Fatalf("book holds %d > %d", n, size)
		}
		if skew == 0 {
			if _, ok := e.recorded(t, who(pid)); ok {
				t.Fatalf("healthy requester %d recorded", pid)
			}
		}
	}
	checkBudget(t, spy.writesOf(nil))

	// Once their records lapsed in the store, entries are pruned.
	e.clk.Advance(48*time.Hour + 10*time.Minute + time.Minute)
	if err := e.alloc(who(2000), 0); err != nil {
		t.Fatal(err)
	}
	if n := idkeeper.SkewBookLen(e.reg); n != 0 {
		t.Fatalf("book holds %d after every record lapsed", n)
	}
}

// A write that fails is retried: a failed replacement of a warning is written
// once the store answers again.
func TestSkewFailedWriteIsRetried(t *testing.T) {
	e, spy := newSkewEnv(t, idkeeper.Config{})
	a := who(1)
	if err := e.alloc(a, warnSkew); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Hour)
	spy.setFail(true)
	e.renew(t, a, 0)
	if !strings.Contains(e.logs.String(), "record clock skew") {
		t.Fatalf("the failed write is not logged:\n%s", e.logs)
	}
	spy.setFail(false)
	e.wantRecorded(t, a, idkeeper.SkewWarn)
	e.clk.Advance(idkeeper.SkewEvery)
	if n := idkeeper.FlushSkew(context.Background(), e.reg, 10); n != 1 {
		t.Fatalf("flushed %d, want the failed replacement", n)
	}
	e.wantRecorded(t, a, idkeeper.SkewOK)
}

// Concurrent callers keep every requester's budget (run with -race): eight
// goroutines call at once, for six phases 20 s apart.
func TestSkewBudgetUnderConcurrency(t *testing.T) {
	e, spy := newSkewEnv(t, idkeeper.Config{})
	for phase := range 6 {
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 20 {
					w := who(1 + (g+i)%4)
					now := e.clk.Now().Add(-[]time.Duration{warnSkew, 0, rejectSkew}[(phase+i)%3])
					if _, err := e.reg.Renew(context.Background(), idkeeper.RenewRequest{Requester: w, ClientNow: &now}); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		e.clk.Advance(20 * time.Second)
	}
	writes := spy.writesOf(nil)
	checkBudget(t, writes)
	for pid := 1; pid <= 4; pid++ {
		w := who(pid)
		if n := len(spy.writesOf(&w)); n != 2 {
			t.Errorf("%s written %d times in 2 minutes, want 2 (at 0 and 60 s)", w.Key(), n)
		}
	}
}
