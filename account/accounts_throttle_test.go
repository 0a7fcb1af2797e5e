package account_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/protocol"
)

// retryAfter is the "retryAfterSeconds" of a throttled refusal, 0 for none.
func retryAfter(err error) int {
	var e *idkeeper.Error
	if !errors.As(err, &e) {
		return 0
	}
	s, _ := e.Details["retryAfterSeconds"].(int)
	return s
}

// Issue #29, finding 4: five wrong passwords locked the account for 15 minutes,
// the right password included, from anywhere. Now they lock that (account,
// source) pair only: the right password from another source still logs in,
// after the account's slow-down.
func TestLogin_WrongPasswordsDoNotLockTheAccount(t *testing.T) {
	e := newAcctEnv(t)
	e.addUser(t, "bob", account.RoleViewer)
	for i := range account.LoginPairFailures {
		_, _, err := e.acc.Login(actx, "bob", "letmein-wrong", "203.0.113.1", "")
		wantCode(t, err, protocol.CodeLoginFailed)
		if retryAfter(err) != 0 {
			t.Fatalf("attempt %d throttled already", i+1)
		}
	}
	before := e.hasher.verifies.Load()
	_, _, err := e.acc.Login(actx, "bob", bobPW, "203.0.113.1", "")
	wantCode(t, err, protocol.CodeLoginFailed)
	if retryAfter(err) != 15*60 {
		t.Fatalf("the locked pair: retry after %d s, want 900: %v", retryAfter(err), err)
	}
	if e.hasher.verifies.Load() != before {
		t.Fatal("a throttled login checked the password")
	}
	// The account is not locked: the right password from another source works,
	// slowed down once the account has LoginSlowAfter failures.
	e.login(t, "bob", bobPW, "203.0.113.2")
	if sum, _ := e.slept.total(); sum != account.LoginSlowStep {
		t.Fatalf("slowed down %v, want %v", sum, account.LoginSlowStep)
	}
	e.login(t, "root", rootPW, "203.0.113.1") // another account from the locked source

	// Five more wrong passwords, each from its own source (the lock-out):
	// the right one from a sixth source still works.
	for i := range 5 {
		_, _, err := e.acc.Login(actx, "bob", "letmein-wrong", fmt.Sprintf("198.51.100.%d", i+1), "")
		wantCode(t, err, protocol.CodeLoginFailed)
	}
	e.login(t, "bob", bobPW, "198.51.100.99")

	// The pair's lock ends with its window.
	e.clk.Set(t0.Add(account.LoginThrottleWindow))
	e.login(t, "bob", bobPW, "203.0.113.1")

	// A success clears the pair's count.
	for range 2 {
		for range account.LoginPairFailures - 1 {
			_, _, err := e.acc.Login(actx, "bob", "letmein-wrong", "203.0.113.5", "")
			wantCode(t, err, protocol.CodeLoginFailed)
		}
		e.login(t, "bob", bobPW, "203.0.113.5")
	}
	var throttled int
	for _, a := range e.auditLog(t) {
		if strings.Contains(a.Detail, "throttled") {
			throttled++
		}
	}
	if throttled != 1 {
		t.Fatalf("%d audit entries say throttled, want 1", throttled)
	}
}

func TestLogin_ThrottlePerSource(t *testing.T) {
	e := newAcctEnv(t)
	e.addUser(t, "bob", account.RoleViewer)
	// Spread over names, each below its pair's limit; IPv6 addresses count by /64.
	for i := range account.LoginSourceFailures {
		ip := "2001:db8:1:2::" + string(rune('a'+i%6))
		_, _, err := e.acc.Login(actx, "user"+string(rune('a'+i)), "letmein-wrong", ip, "")
		wantCode(t, err, protocol.CodeLoginFailed)
	}
	before := e.hasher.verifies.Load()
	_, _, err := e.acc.Login(actx, "bob", bobPW, "2001:db8:1:2::ffff", "")
	wantCode(t, err, protocol.CodeLoginFailed)
	if e.hasher.verifies.Load() != before || retryAfter(err) == 0 {
		t.Fatalf("a throttled source: %v, password checked %t", err, e.hasher.verifies.Load() != before)
	}
	e.login(t, "bob", bobPW, "2001:db8:1:3::1") // another /64
	e.login(t, "bob", bobPW, "192.0.2.7")
	e.clk.Advance(account.LoginThrottleWindow)
	e.login(t, "bob", bobPW, "2001:db8:1:2::1")
}

// Concurrent wrong passwords from one source cannot get past the pair's limit.
func TestLogin_ThrottleConcurrent(t *testing.T) {
	e := newAcctEnv(t)
	e.addUser(t, "bob", account.RoleViewer)
	before := e.hasher.verifies.Load()
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() {
			_, _, err := e.acc.Login(actx, "bob", "letmein-wrong", "192.0.2.1", "")
			if protocol.ErrorCode(err) != protocol.CodeLoginFailed {
				t.Errorf("err %v", err)
			}
		})
	}
	wg.Wait()
	if n := e.hasher.verifies.Load() - before; n != account.LoginPairFailures {
		t.Fatalf("%d passwords checked, want %d", n, account.LoginPairFailures)
	}
}

// The slow-down: each failure past LoginSlowAfter doubles the wait of the
// account's next login, up to LoginSlowMax; it ends LoginThrottleWindow after the
// last failure. It bounds the guessing rate of one account however many sources
// guess.
func TestLogin_SlowDown(t *testing.T) {
	for n, want := range map[int]time.Duration{0: 0, 4: 0, 5: 250 * time.Millisecond, 6: 500 * time.Millisecond,
		7: time.Second, 8: 2 * time.Second, 9: 3 * time.Second, 1000: 3 * time.Second, 1 << 30: 3 * time.Second} {
		if got := account.LoginSlowDelay(n); got != want {
			t.Errorf("slowDelay(%d) = %v, want %v", n, got, want)
		}
	}
	e := newAcctEnv(t)
	e.addUser(t, "bob", account.RoleViewer)
	const guesses = 200
	start := e.clk.Now()
	for i := range guesses {
		ip := fmt.Sprintf("2001:db8:%x:%x::1", i/65536, i%65536) // a /64 each: no pair or source limit
		_, _, err := e.acc.Login(actx, "bob", "letmein-wrong", ip, "")
		wantCode(t, err, protocol.CodeLoginFailed)
		if retryAfter(err) != 0 {
			t.Fatalf("guess %d refused: %v", i, err)
		}
	}
	// Every guess past the first LoginSlowAfter waited its delay: against one
	// account, at most 3600 s / LoginSlowMax guesses an hour after the first few.
	var want time.Duration
	for n := range guesses {
		want += account.LoginSlowDelay(n)
	}
	sum, slowed := e.slept.total()
	if sum != want || slowed != guesses-account.LoginSlowAfter {
		t.Fatalf("slowed %d guesses by %v, want %d by %v", slowed, sum, guesses-account.LoginSlowAfter, want)
	}
	if took := e.clk.Now().Sub(start); took < time.Duration(guesses-account.LoginSlowAfter-4)*account.LoginSlowMax {
		t.Fatalf("%d guesses in %v", guesses, took)
	}
	// Another account is not slowed; this one still is, for the right password
	// from a clean source too, which logs in.
	e.login(t, "root", rootPW, "192.0.2.1")
	if s, _ := e.slept.total(); s != sum {
		t.Fatalf("root was slowed by %v", s-sum)
	}
	e.login(t, "bob", bobPW, "192.0.2.1")
	if s, _ := e.slept.total(); s-sum != account.LoginSlowMax {
		t.Fatalf("bob's right password slowed by %v, want %v", s-sum, account.LoginSlowMax)
	}
	// A window without failures ends the slow-down.
	e.clk.Advance(account.LoginThrottleWindow)
	sum, _ = e.slept.total()
	e.login(t, "bob", bobPW, "192.0.2.1")
	if s, _ := e.slept.total(); s != sum {
		t.Fatalf("slowed by %v after a quiet window", s-sum)
	}
}

// blockingSleeper holds every slowed login in Sleep until released, so that
// the test controls the account's wait queue.
type blockingSleeper struct {
	release chan struct{}
	entered atomic.Int64
}

func (b *blockingSleeper) Sleep(ctx context.Context, d time.Duration) error {
	b.entered.Add(1)
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Slowed logins take turns: only one of them checks a password at a time, so
// concurrency does not multiply the guessing rate; the wait queue is bounded,
// refusing sources that failed first and never a clean source before it is full.
func TestLogin_SlowDownQueue(t *testing.T) {
	e := newAcctEnv(t)
	bs := &blockingSleeper{release: make(chan struct{})}
	acc, err := account.New(e.store, e.hasher, account.Config{Clock: e.clk.Now, Logger: quiet, Sleep: bs.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acc.CreateUser(actx, e.root, "bob", account.RoleViewer, bobPW); err != nil {
		t.Fatal(err)
	}
	for i := range account.LoginSlowAfter {
		_, _, err := acc.Login(actx, "bob", "letmein-wrong", fmt.Sprintf("192.0.2.%d", i+1), "")
		wantCode(t, err, protocol.CodeLoginFailed)
	}
	// The account is slowed: the next login holds the turn, blocked in Sleep.
	type result struct {
		ip  string
		err error
	}
	results := make(chan result, 100)
	login := func(ip, pw string) {
		go func() {
			_, _, err := acc.Login(actx, "bob", pw, ip, "")
			results <- result{ip, err}
		}()
	}
	login("198.51.100.1", bobPW)
	waitFor(t, func() bool { return bs.entered.Load() == 1 })
	before := e.hasher.verifies.Load()
	for i := range account.LoginQueueFailed {
		login(fmt.Sprintf("198.51.100.%d", 10+i), bobPW)
	}
	waitFor(t, func() bool { return account.LoginQueueLen(acc, "bob") == account.LoginQueueFailed })
	// A waiting login whose request ends leaves the queue, refused as throttled.
	ctx, cancel := context.WithCancel(actx)
	cancel()
	_, _, err = acc.Login(ctx, "bob", bobPW, "203.0.113.7", "")
	if protocol.ErrorCode(err) != protocol.CodeLoginFailed || retryAfter(err) == 0 {
		t.Fatalf("an ended request: %v", err)
	}
	if n := account.LoginQueueLen(acc, "bob"); n != account.LoginQueueFailed {
		t.Fatalf("%d waiting after a request ended, want %d", n, account.LoginQueueFailed)
	}
	// Past LoginQueueFailed waiting, a source that has failed is refused at once ...
	_, _, err = acc.Login(actx, "bob", bobPW, "192.0.2.1", "")
	if protocol.ErrorCode(err) != protocol.CodeLoginFailed || retryAfter(err) == 0 {
		t.Fatalf("a failed source past the queue: %v", err)
	}
	// ... a clean one waits, up to LoginQueueMax; past it, it is refused too.
	for i := account.LoginQueueFailed; i < account.LoginQueueMax; i++ {
		login(fmt.Sprintf("198.51.100.%d", 10+i), bobPW)
	}
	waitFor(t, func() bool { return account.LoginQueueLen(acc, "bob") == account.LoginQueueMax })
	_, _, err = acc.Login(actx, "bob", bobPW, "198.51.100.200", "")
	if protocol.ErrorCode(err) != protocol.CodeLoginFailed || retryAfter(err) == 0 {
		t.Fatalf("a clean source past the full queue: %v", err)
	}
	if n := e.hasher.verifies.Load() - before; n != 0 {
		t.Fatalf("%d passwords checked while one login held the turn", n)
	}
	// Released, every waiting login of a clean source with the right password
	// logs in, one at a time.
	close(bs.release)
	for range 1 + account.LoginQueueMax {
		if r := <-results; r.err != nil {
			t.Fatalf("%s: %v", r.ip, r.err)
		}
	}
	if account.LoginQueueLen(acc, "bob") != 0 {
		t.Fatal("the queue did not empty")
	}
}

// waitFor polls cond for up to 10 s: liveness only, never correctness.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// A source the account logged in from before skips the account's slow-down and
// a full table: a flood from fresh addresses, each clean for its first guess,
// queues ahead of a stranger but never ahead of the owner where they have
// logged in before. A known source that fails loses the shortcut while its
// failures count.
func TestLogin_KnownSourceSkipsTheQueue(t *testing.T) {
	e := newAcctEnv(t)
	bs := &blockingSleeper{release: make(chan struct{})}
	defer close(bs.release)
	acc, err := account.New(e.store, e.hasher, account.Config{Clock: e.clk.Now, Logger: quiet, Sleep: bs.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acc.CreateUser(actx, e.root, "bob", account.RoleViewer, bobPW); err != nil {
		t.Fatal(err)
	}
	const home = "2001:db8:1::7"
	if _, _, err := acc.Login(actx, "bob", bobPW, home, ""); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Hour)
	for i := range account.LoginSlowAfter {
		_, _, err := acc.Login(actx, "bob", "letmein-wrong", fmt.Sprintf("2001:db8:9:%x::1", i), "")
		wantCode(t, err, protocol.CodeLoginFailed)
	}
	// The flood holds the turn and fills the queue from fresh /64s.
	for i := range account.LoginQueueMax + 1 {
		go func() { _, _, _ = acc.Login(actx, "bob", "letmein-wrong", fmt.Sprintf("2001:db8:a:%x::1", i), "") }()
	}
	waitFor(t, func() bool { return account.LoginQueueLen(acc, "bob") == account.LoginQueueMax })
	_, _, err = acc.Login(actx, "bob", bobPW, "198.51.100.9", "")
	wantCode(t, err, protocol.CodeLoginFailed) // a stranger past the full queue
	entered := bs.entered.Load()
	if _, _, err := acc.Login(actx, "bob", bobPW, "2001:db8:1::8", ""); err != nil { // the same /64
		t.Fatalf("the owner from a known source: %v", err)
	}
	if bs.entered.Load() != entered {
		t.Fatal("the known source waited for the slow-down")
	}
	// A full table refuses new sources, not a known one.
	account.SetLoginThrottleCapacity(acc, account.LoginThrottleLen(acc))
	_, _, err = acc.Login(actx, "bob", bobPW, "203.0.113.5", "")
	wantCode(t, err, protocol.CodeLoginThrottleFull)
	if _, _, err := acc.Login(actx, "bob", bobPW, home, ""); err != nil {
		t.Fatalf("the owner from a known source, the table full: %v", err)
	}
	// A wrong password from the known source suspends its shortcut.
	account.SetLoginThrottleCapacity(acc, 0)
	_, _, err = acc.Login(actx, "bob", "letmein-wrong", home, "")
	wantCode(t, err, protocol.CodeLoginFailed)
	if n := bs.entered.Load(); n != entered {
		t.Fatalf("the known source's wrong password waited: entered %d, want %d", n, entered)
	}
	// Now a failed source past the queue, its right password is refused until
	// its failure ends, as any failed source's.
	_, _, err = acc.Login(actx, "bob", bobPW, home, "")
	if protocol.ErrorCode(err) != protocol.CodeLoginFailed || retryAfter(err) == 0 {
		t.Fatalf("a known source that just failed, past the queue: %v", err)
	}
}
