package account

import (
	"context"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// The login throttle, per process (each replica counts on its own). A login's
// source is the client's address, an IPv6 address by its /64 (what one host
// usually has); its account is the name typed, known or not. Wrong passwords of
// ChangePassword and ConfirmPassword count as failed logins too.
//
//   - Per (account, source): after LoginPairFailures failures of that pair within
//     LoginThrottleWindow of its first, every login of that account from that
//     source is refused until the window ends, without checking the password.
//     A success clears the pair's count.
//   - Per source, across accounts: after LoginSourceFailures failures within the
//     window of its first, every login from that source is refused until the
//     window ends. A success does not clear it.
//   - Per account, a slow-down that never refuses a source that has not failed:
//     once an account has LoginSlowAfter failures (from any sources, each within
//     LoginThrottleWindow of the next), its logins take turns, one at a time,
//     and each waits slowDelay first: LoginSlowStep, doubled with each further
//     failure, at most LoginSlowMax. Against one account that is at most
//     3600 s / LoginSlowMax = 1,200 guesses an hour per replica however many
//     sources guess. At most LoginQueueMax logins of one account wait at once,
//     and LoginWaitersMax in the process; past LoginQueueFailed waiting, a
//     login from a source that has failed is refused at once.
//   - A known source of an account, one it logged in from with the right
//     password within LoginKnownSourceTTL and that has no failure of its own
//     now, skips the account's slow-down and is never refused for a full table:
//     a flood from fresh addresses cannot keep the account's owner out where
//     they have logged in before. At most LoginKnownSources are remembered;
//     past that the oldest is forgotten (that source then waits its turn).
//
// Refusals are LOGIN_FAILED with Details "retryAfterSeconds". The throttle
// remembers at most LoginThrottleEntries pairs, sources and accounts; entries
// end with their window and are swept when the table is full, but a live one
// is never dropped to make room: while the table is full of live entries, a
// login that needs a new one (a source, pair or account not yet counted) is
// refused with LOGIN_THROTTLE_FULL and a Retry-After until the earliest entry
// ends.
const (
	LoginPairFailures   = 5
	LoginSourceFailures = 20
	LoginThrottleWindow = 15 * time.Minute
	LoginSlowAfter      = 5
	LoginSlowStep       = 250 * time.Millisecond
	LoginSlowMax        = 3 * time.Second
	LoginQueueFailed    = 8
	LoginQueueMax       = 32
	LoginWaitersMax     = 1024
	// LoginThrottleEntries bounds the table. An entry takes about 210 bytes with
	// the longest name (64 bytes) and an IPv6 /64, the map's share included, so a
	// full table holds about 50 MiB. Each new entry costs its sender a password
	// check (Argon2id; password.MaxConcurrent at once, 50–150 ms of a core per
	// lane each with the default parameters): filling the table within one
	// LoginThrottleWindow takes over 90 checks a second, more than a replica
	// makes.
	LoginThrottleEntries = 250_000
	LoginKnownSourceTTL  = 30 * 24 * time.Hour
	LoginKnownSources    = 50_000
)

// throttleKey names an entry: a pair (kind 'p'), a source ('s') or an account
// ('u').
type throttleKey struct {
	kind    byte
	account string
	source  string
}

// tally is one entry's count.
type tally struct {
	fails   int       // failures in the window
	pending int       // attempts begun and not ended: counted as failures until they end
	start   time.Time // pair, source: the window's first failure; account: its last failure
	// An account's slowed logins: the turn one of them holds (capacity 1), and
	// how many wait for it.
	turn    chan struct{}
	waiting int
}

// end is when the entry's window ends; the zero time for one without failures.
func (c *tally) end() time.Time {
	if c.fails == 0 {
		return time.Time{}
	}
	return c.start.Add(LoginThrottleWindow)
}

type throttle struct {
	mu       sync.Mutex
	seen     map[throttleKey]*tally
	capacity int       // LoginThrottleEntries unless a test says otherwise
	swept    time.Time // the last sweep of a full table
	nextEnd  time.Time // the earliest end of a live entry at that sweep
	waiting  int       // slowed logins waiting, in all accounts
	full     atomic.Uint64
	// known holds, per (account, source) pair, until when it is a known source
	// (the last success + LoginKnownSourceTTL).
	known map[throttleKey]time.Time
}

// loginAttempt is one counted attempt, between throttle.begin and its end.
type loginAttempt struct {
	t                     *throttle
	pair, source, account throttleKey
	holdsTurn             bool
}

// attempt outcomes.
const (
	attemptFailed    = iota // a wrong password, an unknown or disabled account: a failure
	attemptSucceeded        // the right password: clears the pair
	attemptVoid             // nothing was learnt (a store failure): counts nothing
)

// limitOf is the failures after which the entry of kind refuses; accounts never
// refuse.
func limitOf(kind byte) int {
	switch kind {
	case 'p':
		return LoginPairFailures
	case 's':
		return LoginSourceFailures
	}
	return math.MaxInt
}

// slowDelay is how long a slowed login of an account with n failures waits.
func slowDelay(n int) time.Duration {
	if n < LoginSlowAfter {
		return 0
	}
	return min(LoginSlowMax, LoginSlowStep<<min(n-LoginSlowAfter, 16))
}

// begin counts a login of account from source, or refuses it: LOGIN_FAILED with
// "retryAfterSeconds" for a throttled pair or source or a full wait queue,
// LOGIN_THROTTLE_FULL for a full table. A slowed login waits here for its turn
// and its delay (sleep), within ctx: one still waiting when ctx ends is refused
// as throttled. The caller ends the attempt it gets.
func (t *throttle) begin(ctx context.Context, now func() time.Time, sleep func(context.Context, time.Duration) error,
	account, source string) (*loginAttempt, error) {
	a := &loginAttempt{t: t, pair: throttleKey{'p', account, source}, source: throttleKey{'s', "", source},
		account: throttleKey{'u', account, ""}}
	keys := [...]throttleKey{a.pair, a.source, a.account}
	t.mu.Lock()
	at := now()
	if t.seen == nil {
		t.seen = map[throttleKey]*tally{}
	}
	var wait time.Duration
	missing := 0
	for _, k := range keys {
		c := t.seen[k]
		if c == nil {
			missing++
			continue
		}
		if c.fails > 0 && !at.Before(c.end()) {
			c.fails, c.start = 0, time.Time{}
		}
		if c.fails+c.pending >= limitOf(k.kind) {
			wait = max(wait, time.Second, c.end().Sub(at))
		}
	}
	if wait > 0 {
		t.mu.Unlock()
		return nil, throttled(wait)
	}
	pc := t.seen[a.pair]
	known := at.Before(t.known[a.pair]) && (pc == nil || pc.fails == 0)
	if missing > 0 && !known && len(t.seen)+missing > t.limit() {
		t.sweep(at)
		if len(t.seen)+missing > t.limit() {
			wait := max(time.Second, t.nextEnd.Sub(at))
			t.mu.Unlock()
			t.full.Add(1)
			e := protocol.Errorf(protocol.CodeLoginThrottleFull, "too many addresses are throttled; logins from new ones are refused for now, retry later")
			e.Details = map[string]any{"retryAfterSeconds": seconds(wait)}
			return nil, e
		}
	}
	var tallies [len(keys)]*tally
	for i, k := range keys {
		c := t.seen[k]
		if c == nil {
			c = &tally{}
			t.seen[k] = c
		}
		c.pending++
		tallies[i] = c
	}
	acct := tallies[2]
	n := acct.fails + acct.pending - 1
	if n < LoginSlowAfter || known {
		t.mu.Unlock()
		return a, nil
	}
	failed := tallies[0].fails > 0 || tallies[1].fails > 0
	if acct.waiting >= LoginQueueMax || t.waiting >= LoginWaitersMax || failed && acct.waiting >= LoginQueueFailed {
		wait := max(time.Second, time.Duration(acct.waiting+1)*slowDelay(n))
		t.mu.Unlock()
		a.end(now(), attemptVoid)
		return nil, throttled(wait)
	}
	if acct.turn == nil {
		acct.turn = make(chan struct{}, 1)
	}
	acct.waiting++
	t.waiting++
	t.mu.Unlock()

	var err error
	select {
	case acct.turn <- struct{}{}:
		a.holdsTurn = true
	case <-ctx.Done():
		err = ctx.Err()
	}
	t.mu.Lock()
	acct.waiting--
	t.waiting--
	// The failures the logins before this one added count: the delay grows
	// while the guessing goes on.
	d := slowDelay(acct.fails + acct.pending - 1)
	queued := acct.waiting
	t.mu.Unlock()
	if err == nil {
		err = sleep(ctx, d)
	}
	if err != nil {
		// The request's deadline came first: a throttled login, not a failure
		// of the server.
		a.end(now(), attemptVoid)
		return nil, throttled(max(time.Second, time.Duration(queued+1)*d))
	}
	return a, nil
}

// limit is the table's capacity.
func (t *throttle) limit() int {
	if t.capacity > 0 {
		return t.capacity
	}
	return LoginThrottleEntries
}

// end ends the attempt with its outcome and reports whether this failure brought
// the pair or the source to its limit. It hands the account's turn on.
func (a *loginAttempt) end(now time.Time, outcome int) (reached bool) {
	t := a.t
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range [...]throttleKey{a.pair, a.source, a.account} {
		c := t.seen[k]
		if c == nil {
			continue // cannot happen: a pending entry is never swept
		}
		c.pending--
		switch {
		case outcome == attemptFailed:
			if c.fails > 0 && !now.Before(c.end()) {
				c.fails = 0
			}
			if c.fails == 0 || k.kind == 'u' {
				c.start = now
			}
			c.fails = min(c.fails+1, math.MaxInt32)
			reached = reached || c.fails == limitOf(k.kind)
		case outcome == attemptSucceeded && k.kind == 'p':
			c.fails, c.start = 0, time.Time{}
			t.remember(k, now)
		}
		if k.kind == 'u' && a.holdsTurn {
			<-c.turn
			a.holdsTurn = false
		}
		if c.fails == 0 && c.pending == 0 && c.waiting == 0 {
			delete(t.seen, k)
		}
	}
	return reached
}

// remember makes pair a known source until now + LoginKnownSourceTTL. A full
// list forgets its expired entries, then the one that expires first: forgetting
// costs only that source's shortcut, never a lock.
func (t *throttle) remember(pair throttleKey, now time.Time) {
	if t.known == nil {
		t.known = map[throttleKey]time.Time{}
	}
	if _, ok := t.known[pair]; !ok && len(t.known) >= LoginKnownSources {
		var oldest throttleKey
		var oldestUntil time.Time
		for k, until := range t.known {
			if !now.Before(until) {
				delete(t.known, k)
			} else if oldestUntil.IsZero() || until.Before(oldestUntil) {
				oldest, oldestUntil = k, until
			}
		}
		if len(t.known) >= LoginKnownSources {
			delete(t.known, oldest)
		}
	}
	t.known[pair] = now.Add(LoginKnownSourceTTL)
}

// sweep deletes the entries whose window has ended, at most once a second, and
// notes the earliest end of those that remain.
func (t *throttle) sweep(now time.Time) {
	if now.Sub(t.swept) < time.Second && now.Before(t.nextEnd) {
		return
	}
	t.swept, t.nextEnd = now, time.Time{}
	for k, c := range t.seen {
		if c.pending > 0 || c.waiting > 0 {
			continue
		}
		end := c.end()
		if !now.Before(end) {
			delete(t.seen, k)
		} else if t.nextEnd.IsZero() || end.Before(t.nextEnd) {
			t.nextEnd = end
		}
	}
	if t.nextEnd.IsZero() {
		t.nextEnd = now.Add(time.Second) // only pending entries: they end within a request
	}
}

// throttled is the refusal of a throttled login.
func throttled(wait time.Duration) *idkeeper.Error {
	e := *errLoginFailed
	e.Details = map[string]any{"retryAfterSeconds": seconds(wait)}
	return &e
}

func seconds(d time.Duration) int { return int(math.Ceil(d.Seconds())) }

// sleepCtx waits d or until ctx ends: Config.Sleep's default.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// addressKey is the throttle's key of a remote address: the address itself, an
// IPv6 one by its /64 (what one host usually has).
func addressKey(remote string) string {
	ip, err := netip.ParseAddr(remote)
	if err != nil {
		return cutBytes(remote, audit.MaxFieldLen)
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.WithZone("").Prefix(64)
		return p.String()
	}
	return ip.String()
}
