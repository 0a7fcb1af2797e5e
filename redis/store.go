package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// DefaultPrefix is the hash tag of every key when Options.Prefix is empty.
const DefaultPrefix = "idkeeper"

// Defaults for zero Options fields.
const (
	DefaultWaitTimeout  = time.Second
	DefaultReclaimBatch = 512
)

// Options configure a Store. The zero value is valid: Redis TIME is the clock, keys
// are tagged {idkeeper}, nothing waits for replicas.
type Options struct {
	// Clock, when set, replaces Redis TIME as the time authority: the scripts get
	// now as an argument. Meant for tests; in production every replica must use
	// the same clock, and Redis TIME is that clock.
	Clock idkeeper.Clock
	// Prefix is the hash tag of every key: "{Prefix}:…". Default DefaultPrefix. It
	// must not contain '{' or '}'. Stores with different prefixes share nothing.
	Prefix string
	// Logger receives store initialisations and resets. Default slog.Default().
	Logger *slog.Logger
	// Client, when set, is used instead of a client dialled from Open's url; Close
	// leaves it open. It may be a *goredis.Client, *goredis.ClusterClient or a
	// failover client.
	Client goredis.UniversalClient
	// WaitReplicas, when positive, makes every Alloc, Renew and Reset send WAIT
	// WaitReplicas WaitTimeout on the connection that ran the script, and fail with
	// a plain error (STORE_UNAVAILABLE to clients) when fewer replicas acknowledged
	// the write in time. The write stands on the primary then, and retrying is safe:
	// Alloc and Renew are idempotent per requester, and a Reset repeated with the
	// same ResetParams only raises what it raised already and keeps the generation
	// the first one wrote. An acknowledgement means the replicas received the write,
	// not that they persisted it; a failover to one of them keeps it, so a
	// quarantine written by Reset is not lost silently. Requires a *goredis.Client
	// or *goredis.ClusterClient.
	WaitReplicas int
	// WaitTimeout bounds each WAIT. Zero: DefaultWaitTimeout; negative: Open
	// fails.
	WaitTimeout time.Duration
	// ReclaimBatch is the most leases one Reclaim script deletes before Reclaim
	// calls the next one. Zero: DefaultReclaimBatch; negative: Open fails.
	ReclaimBatch int
}

// Store is the idkeeper.Store on Redis. It is safe for concurrent use, and any
// number of Stores (in any number of processes) may share one Redis and prefix.
type Store struct {
	client       goredis.UniversalClient
	ownClient    bool
	prefix       string
	identity     string // Identity's value
	clock        idkeeper.Clock
	log          *slog.Logger
	keys         keys
	waitReplicas int
	waitTimeout  time.Duration
	reclaimBatch int
}

var (
	_ idkeeper.IdentifiedStore = (*Store)(nil)
	_ idkeeper.ReplicatedStore = (*Store)(nil)
)

// Identity names the Redis and the key prefix (idkeeper.IdentifiedStore), without
// credentials, TLS or client options: "redis://HOST:PORT/DB prefix P",
// "redis+sentinel://SENTINEL,…/DB?master_name=NAME prefix P" (the sentinels
// sorted), "redis+cluster://NODE,… prefix P" (the seed nodes sorted).
func (s *Store) Identity() string { return s.identity }

// Open returns a Store on the Redis at url — one server (redis://, rediss://),
// Sentinel (redis+sentinel://, rediss+sentinel://) or a cluster (redis+cluster://,
// rediss+cluster://), in the forms of url.go, query options included — or on
// opts.Client when it is set (url is ignored then). It does no I/O: the client connects on first use, so call Ping
// (or Init) to check the server. On the client Open creates, context deadlines
// bound every call, besides go-redis's own dial, read and write timeouts.
func Open(url string, opts Options) (*Store, error) {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("redis: prefix %q must not contain '{' or '}'", prefix)
	}
	switch {
	case opts.WaitReplicas < 0:
		return nil, fmt.Errorf("redis: WaitReplicas %d is negative", opts.WaitReplicas)
	case opts.WaitTimeout < 0:
		return nil, fmt.Errorf("redis: WaitTimeout %v is negative", opts.WaitTimeout)
	case opts.ReclaimBatch < 0:
		return nil, fmt.Errorf("redis: ReclaimBatch %d is negative", opts.ReclaimBatch)
	}
	s := &Store{
		client:       opts.Client,
		clock:        opts.Clock,
		log:          opts.Logger,
		prefix:       prefix,
		keys:         newKeys(prefix),
		waitReplicas: opts.WaitReplicas,
		waitTimeout:  opts.WaitTimeout,
		reclaimBatch: opts.ReclaimBatch,
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.waitTimeout == 0 {
		s.waitTimeout = DefaultWaitTimeout
	}
	if s.reclaimBatch == 0 {
		s.reclaimBatch = DefaultReclaimBatch
	}
	if s.client == nil {
		c, err := dial(url)
		if err != nil {
			return nil, err
		}
		s.client, s.ownClient = c, true
		s.identity = urlIdentity(url)
	} else {
		s.identity = clientIdentity(s.client)
	}
	s.identity += " prefix " + prefix
	if s.waitReplicas > 0 {
		switch s.client.(type) {
		case *goredis.Client, *goredis.ClusterClient:
		default:
			if s.ownClient {
				s.client.Close()
			}
			return nil, fmt.Errorf("redis: WaitReplicas needs a *Client or *ClusterClient, not %T", s.client)
		}
	}
	return s, nil
}

// Close closes the client that Open created; a client passed in Options stays open.
func (s *Store) Close() error {
	if !s.ownClient {
		return nil
	}
	return s.client.Close()
}

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: ping: %w", err)
	}
	return nil
}

// Now is Redis TIME (or Options.Clock), truncated to the millisecond.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if s.clock != nil {
		return protocol.Millis(s.clock()), nil
	}
	// A script, not TIME, so that on a cluster the clock is the one of the node the
	// lease scripts run on.
	v, err := scriptNow.Run(ctx, s.client, []string{s.keys.meta}).Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("redis: time: %w", err)
	}
	return fromMs(v), nil
}

// keys are the Redis key names of one prefix; see the package doc.
type keys struct {
	meta, leases, requesters, expiry, watermarks, quarantine string
	ready, cooling, quarantined, freeSeq                     string
	floors, lastTokens, restorable, keyHeld                  string
	locks, apiKeys, skewIndex, skewPrefix                    string
	hist, histIndex, histEnded                               string
	keyCool                                                  string   // the cooling charges (lease.lua's KEYCOOL)
	lease                                                    []string // the KEYS of every lease script, in lease.lua's order
}

func newKeys(prefix string) keys {
	t := "{" + prefix + "}:"
	k := keys{
		meta: t + "meta", leases: t + "leases", requesters: t + "requesters", expiry: t + "expiry",
		watermarks: t + "watermarks", quarantine: t + "quarantine",
		ready: t + "free:ready", cooling: t + "free:cooling", quarantined: t + "free:quarantined",
		freeSeq: t + "free:seq",
		floors:  t + "floors", lastTokens: t + "lasttokens", restorable: t + "restorable", keyHeld: t + "keyheld",
		locks: t + "locks", apiKeys: t + "apikeys", skewIndex: t + "skew-index", skewPrefix: t + "skew:",
		hist: t + "history", histIndex: t + "history:index", histEnded: t + "history:ended",
		keyCool: t + "keycool",
	}
	k.lease = []string{k.meta, k.leases, k.requesters, k.expiry, k.watermarks, k.quarantine,
		k.ready, k.cooling, k.quarantined, k.freeSeq, k.floors, k.lastTokens, k.restorable, k.keyHeld,
		k.hist, k.histIndex, k.histEnded, k.keyCool}
	return k
}

// Indexes of the history keys in keys.lease (lease.lua's HIST, HIDX, HEND), of
// the cooling charges (KEYCOOL), and the number of lease keys.
const (
	leaseHist = 14 + iota
	leaseHistIndex
	leaseHistEnded
	leaseKeyCool
	leaseKeyCount
)

func (k keys) skew(requesterKey string) string { return k.skewPrefix + requesterKey }

// nowArg is the now argument of a script: "" lets the script read Redis TIME.
func (s *Store) nowArg() string {
	if s.clock == nil {
		return ""
	}
	return strconv.FormatInt(ms(s.clock()), 10)
}

// ms is t in Unix milliseconds; the zero time.Time maps to ZERO in common.lua and back.
func ms(t time.Time) int64 { return protocol.Millis(t).UnixMilli() }

func fromMs(v int64) time.Time { return time.UnixMilli(v).UTC() }

// run runs a script; wait adds the replica acknowledgement of Options.WaitReplicas.
func (s *Store) run(ctx context.Context, sc *goredis.Script, keys []string, wait bool, args ...any) (any, error) {
	if !wait || s.waitReplicas == 0 {
		v, err := sc.Run(ctx, s.client, keys, args...).Result()
		return v, scriptError(err)
	}
	c, err := s.primary(ctx)
	if err != nil {
		return nil, err
	}
	v, err := s.runAndWait(ctx, c, sc, keys, args, false)
	if goredis.HasErrorPrefix(err, "NOSCRIPT") {
		v, err = s.runAndWait(ctx, c, sc, keys, args, true)
	}
	return v, scriptError(err)
}

// server is the client of the node that holds the store's data, for commands
// about the server itself (INFO, CONFIG) that a cluster client would send anywhere.
func (s *Store) server(ctx context.Context) (goredis.Cmdable, error) {
	if _, ok := s.client.(*goredis.ClusterClient); ok {
		return s.primary(ctx)
	}
	return s.client, nil
}

// primary is the client of the node that owns the store's slot: WAIT counts the
// replicas that acknowledged the writes of its own connection, so it must follow
// the script on the same one.
func (s *Store) primary(ctx context.Context) (*goredis.Client, error) {
	switch c := s.client.(type) {
	case *goredis.Client:
		return c, nil
	case *goredis.ClusterClient:
		m, err := c.MasterForKey(ctx, s.keys.meta)
		if err != nil {
			return nil, fmt.Errorf("redis: primary for %s: %w", s.keys.meta, err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("redis: cannot WAIT on a %T", s.client)
}

func (s *Store) runAndWait(ctx context.Context, c *goredis.Client, sc *goredis.Script, keys []string, args []any, eval bool) (any, error) {
	var ev *goredis.Cmd
	var acked func() (int64, error)
	_, _ = c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		if eval {
			ev = sc.Eval(ctx, p, keys, args...)
		} else {
			ev = sc.EvalSha(ctx, p, keys, args...)
		}
		// The concrete pipeline has Wait, which also stretches the read deadline
		// to the WAIT timeout; the Pipeliner interface does not declare it.
		if pw, ok := p.(interface {
			Wait(context.Context, int, time.Duration) *goredis.IntCmd
		}); ok {
			acked = pw.Wait(ctx, s.waitReplicas, s.waitTimeout).Result
		} else {
			acked = p.Do(ctx, "WAIT", s.waitReplicas, s.waitTimeout.Milliseconds()).Int64
		}
		return nil
	})
	v, err := ev.Result()
	if err != nil {
		return nil, err
	}
	n, err := acked()
	if err != nil {
		return nil, fmt.Errorf("redis: WAIT: %w", err)
	}
	if n < int64(s.waitReplicas) {
		return nil, fmt.Errorf("redis: only %d of %d replicas acknowledged the write within %v",
			n, s.waitReplicas, s.waitTimeout)
	}
	return v, nil
}

// A script's error reply starts with one of these words, then its arguments.
const (
	errGuard     = "IDKGUARD"     // <fence> <now> <generation>: the Guard failed
	errNotOwned  = "IDKNOTOWNED"  // the requester's leases belong to another key
	errMismatch  = "IDKMISMATCH"  // <held>
	errQuota     = "IDKQUOTA"     // <held by the key, cooling charges included> <cooling charges>
	errExhausted = "IDKEXHAUSTED" // <remaining>
	errFenceMax  = "IDKFENCEMAX"  // <fence>: the grant would pass MaxFencingToken
	errInvalid   = "IDKINVALID"   // <node>: outside the pool
	errShrink    = "IDKSHRINK"    // <stored pool size>
	errPool      = "IDKPOOL"      // <stored first> <stored size> <stored layout>: another First or layout
	errOldLayout = "IDKOLDLAYOUT" // the keys were written by a build before generations
)

// scriptError maps the error replies of the scripts (words starting IDK) to
// *scriptReply, for the caller to decode; other errors pass unchanged.
func scriptError(err error) error {
	if err == nil {
		return nil
	}
	var re goredis.Error
	if errors.As(err, &re) {
		word, arg, _ := strings.Cut(strings.TrimPrefix(re.Error(), "ERR "), " ")
		if strings.HasPrefix(word, "IDK") {
			n, _ := strconv.Atoi(arg)
			return &scriptReply{word: word, arg: arg, n: n}
		}
	}
	return err
}

// scriptReply is an error reply of a script, before it becomes the error the
// contract names.
type scriptReply struct {
	word, arg string
	n         int
}

func (e *scriptReply) Error() string { return "redis: script: " + e.word + " " + e.arg }

func asReply(err error, word string) (*scriptReply, bool) {
	var r *scriptReply
	if errors.As(err, &r) && r.word == word {
		return r, true
	}
	return nil, false
}

// guardArgs are the first four arguments of a guarded script (lease.lua's guard):
// the generation ID, MinFence, Now in ms ("" when zero) and MaxSkew in ms.
func guardArgs(g idkeeper.Guard) []any {
	now, skew := "", int64(-1)
	if !g.Now.IsZero() {
		now = strconv.FormatInt(ms(g.Now), 10)
	}
	if g.MaxSkew >= 0 {
		// The two clocks are whole milliseconds apart: d > MaxSkew exactly when
		// d > MaxSkew truncated to the millisecond.
		skew = g.MaxSkew.Milliseconds()
	}
	return []any{g.Generation, strconv.FormatUint(g.MinFence, 10), now, skew}
}

// runGuarded runs a guarded lease script with g's arguments and now before args,
// and maps the error replies every guarded script shares: the guard's (through
// Guard.Check, so the error is the one the contract names) and LEASE_NOT_OWNED.
// Other error replies come back as *scriptReply.
func (s *Store) runGuarded(ctx context.Context, sc *goredis.Script, op string, wait bool, g idkeeper.Guard, args ...any) (any, error) {
	v, err := s.run(ctx, sc, s.keys.lease, wait, append(append(guardArgs(g), s.nowArg()), args...)...)
	if err == nil {
		return v, nil
	}
	var r *scriptReply
	if !errors.As(err, &r) {
		return nil, wrap(op, err)
	}
	switch r.word {
	case errGuard:
		return nil, guardError(g, r.arg)
	case errNotOwned:
		return nil, idkeeper.NotOwned()
	}
	return nil, r
}

// guardError rebuilds the guard's failure from the store state the script read:
// "<fence> <now> <generation>" ("" when the store has none).
func guardError(g idkeeper.Guard, arg string) error {
	f, rest, _ := strings.Cut(arg, " ")
	n, gen, _ := strings.Cut(rest, " ")
	fence, err1 := strconv.ParseUint(f, 10, 64)
	now, err2 := strconv.ParseInt(n, 10, 64)
	if err1 == nil && err2 == nil {
		if err := g.Check(gen, fence, fromMs(now)); err != nil {
			return err
		}
	}
	return fmt.Errorf("redis: the store refused the guard (%s)", arg)
}

// oldLayout is the error of Init and Reset on keys a build before generations
// wrote: their records are not read, and not overwritten either.
func (s *Store) oldLayout() error {
	return fmt.Errorf("redis: the keys under {%s} were written by an older idkeeper build (before store "+
		"generations), whose records this build does not read: delete them, or use another prefix, and run "+
		"`idkeeper init`", s.prefix)
}

// ReplicationID is the master_replid of INFO replication of the node that holds
// the store. It changes when a replica is promoted, which can mean lost writes
// (DESIGN §7), but also on every restart of the Redis process, even a clean one
// with the append-only file on (seen on Redis 7.0): a change alone does not prove
// a loss.
func (s *Store) ReplicationID(ctx context.Context) (string, error) {
	c, err := s.server(ctx)
	if err != nil {
		return "", err
	}
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return "", fmt.Errorf("redis: info replication: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "master_replid:"); ok {
			return v, nil
		}
	}
	return "", errors.New("redis: INFO replication has no master_replid")
}

// CheckConfig returns a warning for every Redis setting that weakens the store:
// a maxmemory-policy other than noeviction (keys can be evicted), no persistence
// at all (a restart loses every lease), RDB snapshots without the append-only
// file (a crash silently loses the writes since the last snapshot), and CONFIG
// GET failing (settings unknown, e.g. a managed Redis that disables CONFIG). It
// never fails; no warnings means none of these was found.
func (s *Store) CheckConfig(ctx context.Context) []string {
	c, err := s.server(ctx)
	if err != nil {
		return []string{fmt.Sprintf("cannot reach Redis to check its settings: %v", err)}
	}
	cfg := map[string]string{}
	for _, name := range []string{"maxmemory-policy", "appendonly", "save"} {
		m, err := c.ConfigGet(ctx, name).Result()
		if err != nil {
			return []string{fmt.Sprintf("cannot read the Redis settings (CONFIG GET %s: %v): "+
				"make sure maxmemory-policy is noeviction and appendonly is yes", name, err)}
		}
		cfg[name] = m[name]
	}
	var warnings []string
	if p := cfg["maxmemory-policy"]; p != "noeviction" {
		warnings = append(warnings, fmt.Sprintf(
			"Redis maxmemory-policy is %q: Redis may evict lease state; set it to noeviction", p))
	}
	aof, rdb := cfg["appendonly"] == "yes", strings.TrimSpace(cfg["save"]) != ""
	switch {
	case !aof && !rdb:
		warnings = append(warnings, "Redis persists nothing (appendonly no, save \"\"): a restart loses "+
			"every lease and forces a quarantine of the whole pool; set appendonly yes")
	case !aof:
		warnings = append(warnings, "Redis persists only RDB snapshots (appendonly no): a crash loses "+
			"the grants and renewals since the last snapshot; set appendonly yes")
	}
	return warnings
}
