package idkeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idkeeper/idkeeper/internal/plural"
	"github.com/idkeeper/idkeeper/protocol"
)

// CleanupJob is the name of the cleanup job's lock.
const CleanupJob = "cleanup"

// AllocRequest asks for Count node IDs for a Requester.
type AllocRequest struct {
	Requester Requester
	Count     int        // 1..MaxCount
	ClientNow *time.Time // the client's clock at send time; nil skips the skew check
	RemoteIP  string     // for logs only
	// Key is the authenticated API key: the owner of the new leases, whose
	// MaxNodes quota applies.
	Key APIKey
	// Client is what the client reported about itself (host name, labels): kept
	// in the lease history of a new grant, nothing decided on it.
	Client ClientInfo
}

// RenewRequest extends the leases of a Requester.
type RenewRequest struct {
	Requester Requester
	ClientNow *time.Time
	// Receipts are the receipts of the leases the client holds (Lease.Receipt):
	// the only evidence of handed-out tokens the registry believes.
	Receipts []string
	// FencingTokens are the tokens the client holds, as older clients send them.
	// Nobody can verify a bare token: they are counted and otherwise ignored.
	FencingTokens []uint64
	RemoteIP      string
	KeyID         string // the authenticated API key; it must own the leases
}

// RemoveRequest releases the leases of a Requester.
type RemoveRequest struct {
	Requester Requester
	// MintedUpTo is the highest timestamp the client minted, after draining; zero
	// when unknown. See LeaseStore.Remove.
	MintedUpTo time.Time
	KeyID      string // the authenticated API key; it must own the leases
	RemoteIP   string // for the log and the audit log only
}

// Registry is the lease policy over a Store: validation, ownership, clock-skew
// checks, store-reset detection and recovery (DESIGN §7), receipts and the cleanup
// job. Its methods are safe for concurrent use.
type Registry struct {
	store    Store
	cfg      Config
	log      *slog.Logger
	obs      Observer
	receipts *receiptSigner // nil without a secret

	state stateSaver // the replica's state, kept through cfg.State

	genMu     sync.RWMutex
	gen       Generation // the generation adopted; zero before
	recoverMu sync.Mutex // serialises recoveries and adoptions

	phase     atomic.Pointer[Phase]
	mismatch  atomic.Pointer[Error] // the POOL_MISMATCH of PhasePoolMismatch
	clockOK   atomic.Bool
	clockSkew atomic.Int64 // store − own, ns, last measured
	touched   sync.Map     // API key ID → time.Time of the last TouchAPIKey

	skew skewBook // per requester: the clock-skew record and warning budget (skew.go)

	machines machineWatch // the machine watch's warning times (machines.go)

	audit *auditLog // nil without Config.Audit (auditlog.go)

	jobs      jobBook                        // the last run of each periodic job (jobruns.go)
	lastReset atomic.Pointer[RecoveredReset] // the last reset this replica recovered (adminread.go)

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewRegistry returns a Registry over store. It validates cfg (a *RangeError names a
// setting outside its range) and does no I/O.
func NewRegistry(store Store, cfg Config) (*Registry, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Owner == "" {
		cfg.Owner = DefaultOwner()
	}
	r := &Registry{store: store, cfg: cfg, log: cfg.Logger, obs: cfg.Observer, state: stateSaver{keeper: cfg.State},
		audit: newAuditLog(cfg)}
	if len(cfg.ReceiptSecret) > 0 {
		r.receipts = &receiptSigner{secret: slices.Clone(cfg.ReceiptSecret)}
	}
	// Trusted until a check says otherwise, and so reported with the first phase.
	r.clockOK.Store(true)
	r.setPhase(PhaseStarting)
	return r, nil
}

// DefaultOwner returns a new Config.Owner: "host:pid:random", different for
// every call.
func DefaultOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Config returns the registry's settings with defaults filled in.
func (r *Registry) Config() Config { return r.cfg }

// Layout is the bit layout clients must mint with.
func (r *Registry) Layout() Layout { return r.cfg.Layout }

// Generation is the store generation the registry adopted; zero before.
func (r *Registry) Generation() Generation {
	r.genMu.RLock()
	defer r.genMu.RUnlock()
	return r.gen
}

// Alloc grants node IDs (LeaseStore.Alloc) after checking the request and the
// client's clock. Errors: INVALID_REQUEST, CLOCK_SKEW_TOO_LARGE (skew > grace, when
// grace > 0), LEASE_NOT_OWNED, REQUESTER_COUNT_MISMATCH, API_KEY_QUOTA_EXCEEDED,
// NODE_IDS_EXHAUSTED, and the 503s of Serving, STORE_CLOCK_SKEW and
// STORE_UNAVAILABLE.
func (r *Registry) Alloc(ctx context.Context, req AllocRequest) (g Grant, err error) {
	start := time.Now()
	defer func() { r.obs.Operation("alloc", protocol.ErrorCode(err), time.Since(start)) }()
	if err := req.Requester.Validate(); err != nil {
		return Grant{}, err
	}
	if req.Count < 1 {
		return Grant{}, protocol.Invalidf("count", "count must be at least 1, got %d", req.Count)
	}
	if most := min(protocol.MaxCount, r.cfg.Nodes); req.Count > most {
		msg := fmt.Sprintf("count %d is above the most one request may ask, %d", req.Count, protocol.MaxCount)
		if most < protocol.MaxCount {
			msg = fmt.Sprintf("count %d is larger than the pool of %s", req.Count, plural.N(most, "node ID", "node IDs"))
		}
		return Grant{}, &Error{Code: protocol.CodeCountTooLarge, Field: "count", Message: msg, Details: map[string]any{"maxCount": most}}
	}
	if err := r.Serving(); err != nil {
		return Grant{}, err
	}
	if err := r.clockVerified(); err != nil {
		return Grant{}, err
	}
	if req.ClientNow != nil {
		now, err := r.store.Now(ctx)
		if err != nil {
			return Grant{}, Unavailable(err)
		}
		if err := r.checkSkew(ctx, "alloc", req.Key.ID, req.Requester, now, *req.ClientNow, req.RemoteIP); err != nil {
			return Grant{}, err
		}
	}
	quota, _ := r.KeyQuota(req.Key)
	p := AllocParams{Requester: req.Requester, KeyID: req.Key.ID, Count: req.Count, First: r.cfg.FirstLease, MaxNodes: quota,
		Client: req.Client}
	known := r.state.maxToken() // new grants get tokens above it (auditGrant)
	err = r.mutate(ctx, "alloc", true, func(ctx context.Context, gd Guard) error {
		g, err = r.store.Alloc(ctx, gd, p)
		return err
	})
	if err != nil {
		return Grant{}, err
	}
	if err := r.learnToken(ctx, g.Fence); err != nil {
		return Grant{}, err
	}
	r.sign(g.Leases)
	r.log.Info("alloc", "requester", req.Requester, "keyId", req.Key.ID, "count", req.Count,
		"nodes", nodeRanges(nodeIDs(g.Leases)), "remoteIp", req.RemoteIP)
	r.noteCooling(req, g)
	r.auditGrant(ctx, req, g, known)
	return g, nil
}

// KeyQuota is the quota that applies to k (AllocParams.MaxNodes): its own
// (APIKey.MaxNodes) when it has one, else the server-wide default
// (DefaultKeyQuota), and then dflt is true; 0 when neither (no quota).
func (r *Registry) KeyQuota(k APIKey) (n int, dflt bool) {
	if k.MaxNodes > 0 {
		return k.MaxNodes, false
	}
	if d := r.DefaultKeyQuota(); d > 0 {
		return d, true
	}
	return 0, false
}

// DefaultKeyQuota is the quota of keys without their own
// (Config.KeyMaxNodesDefault resolved): 0 when there is none.
func (r *Registry) DefaultKeyQuota() int {
	if r.cfg.KeyMaxNodesDefault != KeyQuotaQuarter {
		return r.cfg.KeyMaxNodesDefault
	}
	return DefaultKeyMaxNodes(r.resetPool().Nodes)
}

// Renew extends every lease of the requester to the full lease duration. It is never
// rejected for clock skew. An empty Grant.Leases means the requester holds nothing.
// The receipts are checked: a verified one is evidence (a store whose counter is
// below its token lost writes, DESIGN §7) and, after a reset, a claim that restores
// the holder's lease; one that does not verify is logged, counted and ignored.
// Errors: INVALID_REQUEST, LEASE_NOT_OWNED, and the 503s of Serving,
// STORE_CLOCK_SKEW and STORE_UNAVAILABLE.
func (r *Registry) Renew(ctx context.Context, req RenewRequest) (g Grant, err error) {
	start := time.Now()
	defer func() { r.obs.Operation("renew", protocol.ErrorCode(err), time.Since(start)) }()
	if err := req.Requester.Validate(); err != nil {
		return Grant{}, err
	}
	for i, t := range req.FencingTokens {
		if t < 1 || t > MaxFencingToken {
			return Grant{}, protocol.Invalidf(fmt.Sprintf("fencingTokens[%d]", i), "fencing tokens are between 1 and 2^53-1")
		}
	}
	if err := r.Serving(); err != nil {
		return Grant{}, err
	}
	if err := r.clockVerified(); err != nil {
		return Grant{}, err
	}
	claims := r.verify(req)
	raised := false
	for _, c := range claims {
		// A verified receipt proves its token was handed out: the guard below then
		// finds a store that never reached it, however this replica missed it.
		raised = r.state.raiseToken(c.Token) || raised
	}
	if raised {
		if err := r.syncState(ctx); err != nil {
			return Grant{}, err
		}
	}
	p := RenewParams{Requester: req.Requester, KeyID: req.KeyID, Duration: r.cfg.LeaseDuration, Grace: r.cfg.Grace, Claims: claims}
	err = r.mutate(ctx, "renew", true, func(ctx context.Context, gd Guard) error {
		g, err = r.store.Renew(ctx, gd, p)
		return err
	})
	if err != nil {
		return Grant{}, err
	}
	if req.ClientNow != nil {
		// Renew is never refused for skew: a renewing client is safe, refusing it would
		// turn a cluster-wide NTP fault into an outage.
		_ = r.checkSkew(ctx, "renew", req.KeyID, req.Requester, g.Now, *req.ClientNow, req.RemoteIP)
	}
	if len(g.Restored) > 0 {
		r.obs.Evidence("restored", len(g.Restored))
		r.log.Warn("leases restored from their receipts after a store reset", "requester", req.Requester,
			"keyId", req.KeyID, "nodes", nodeRanges(g.Restored))
	}
	if len(g.Contested) > 0 {
		r.obs.Evidence("contested", len(g.Contested))
		r.log.Error("node IDs claimed twice after a store reset: both holders stopped, the node IDs quarantined",
			"requester", req.Requester, "keyId", req.KeyID, "nodes", nodeRanges(g.Contested))
	}
	r.auditRenew(ctx, req, g)
	if err := r.learnToken(ctx, g.Fence); err != nil {
		return Grant{}, err
	}
	r.sign(g.Leases)
	return g, nil
}

// verify turns the request's receipts into claims, counting and logging what it
// must ignore: receipts that do not verify, and bare fencing tokens.
func (r *Registry) verify(req RenewRequest) []Claim {
	if n := len(req.FencingTokens); n > 0 && len(req.Receipts) == 0 {
		r.obs.Evidence("bare_token", n)
	}
	if r.receipts == nil || len(req.Receipts) == 0 {
		if len(req.Receipts) > 0 {
			r.obs.Evidence("bad_receipt", len(req.Receipts))
		}
		return nil
	}
	claims := make([]Claim, 0, len(req.Receipts))
	bad := 0
	for _, s := range req.Receipts {
		c, err := r.receipts.verify(s, req.Requester, req.KeyID)
		if err != nil {
			bad++
			continue
		}
		claims = append(claims, c)
	}
	if bad > 0 {
		r.obs.Evidence("bad_receipt", bad)
		r.log.Warn("renew with receipts that do not verify: ignored (another replica's secret, or forged)",
			"requester", req.Requester, "keyId", req.KeyID, "bad", bad, "remoteIp", req.RemoteIP)
	}
	return claims
}

// sign sets the receipt of every lease.
func (r *Registry) sign(ls []Lease) {
	if r.receipts == nil {
		return
	}
	for i := range ls {
		ls[i].Receipt = r.receipts.sign(ls[i])
	}
}

// Remove releases every lease of the requester at once and returns how many.
// Errors: INVALID_REQUEST, LEASE_NOT_OWNED, and the 503s of Serving and
// STORE_UNAVAILABLE.
func (r *Registry) Remove(ctx context.Context, req RemoveRequest) (n int, err error) {
	start := time.Now()
	defer func() { r.obs.Operation("remove", protocol.ErrorCode(err), time.Since(start)) }()
	if err := req.Requester.Validate(); err != nil {
		return 0, err
	}
	if err := r.Serving(); err != nil {
		return 0, err
	}
	p := RemoveParams{Requester: req.Requester, KeyID: req.KeyID, MintedUpTo: req.MintedUpTo}
	err = r.mutate(ctx, "remove", false, func(ctx context.Context, gd Guard) error {
		n, err = r.store.Remove(ctx, gd, p)
		return err
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		r.log.Info("remove", "requester", req.Requester, "keyId", req.KeyID, "released", n)
	}
	r.auditRemove(ctx, req, n)
	return n, nil
}

// Remaining returns the state of the pool.
func (r *Registry) Remaining(ctx context.Context) (Counts, error) {
	if err := r.Serving(); err != nil {
		return Counts{}, err
	}
	sctx, end := r.trace(ctx, "store.counts")
	c, err := r.store.Counts(sctx)
	end(err)
	if err != nil {
		return Counts{}, r.storeErr(err)
	}
	return c, nil
}

// guard is the Guard of a guarded call now: the adopted generation, the highest
// token known, and, when clocked, the registry's clock to compare the store's with.
func (r *Registry) guard(clocked bool) Guard {
	g := Guard{Generation: r.Generation().ID, MinFence: r.state.maxToken()}
	if clocked {
		g.Now, g.MaxSkew = r.cfg.Clock(), r.cfg.StoreClockTolerance
	}
	return g
}

// mutate runs op under a guard, traced as the store call "store."+name. When the
// guard finds the store reset or missing writes, it recovers the store (DESIGN
// §7) and runs op once more; a stale grant is never returned. When it finds the
// clocks apart, it stops serving Alloc, Renew and cleanup until the probe finds
// them agreeing again.
func (r *Registry) mutate(ctx context.Context, name string, clocked bool, op func(context.Context, Guard) error) error {
	call := func(gd Guard) error {
		ctx, end := r.trace(ctx, "store."+name)
		err := op(ctx, gd)
		end(err)
		return err
	}
	gd := r.guard(clocked)
	err := call(gd)
	if errors.Is(err, ErrStoreReset) {
		if err := r.recoverReset(ctx, err.Error(), gd.Generation); err != nil {
			return err
		}
		err = call(r.guard(clocked))
	}
	if errors.Is(err, ErrStoreClockSkew) {
		r.clockDisagrees(err)
		return r.clockErr()
	}
	if errors.Is(err, ErrStoreReset) {
		return Unavailable(err) // reset again at once: let the client retry
	}
	return r.storeErr(err)
}

// learnToken raises the highest token known to t (the store's counter after a
// grant) and makes it durable before the grant is answered, so that a store that
// loses the grant is caught even if this replica restarts meanwhile.
func (r *Registry) learnToken(ctx context.Context, t uint64) error {
	if !r.state.raiseToken(t) {
		return nil
	}
	return r.syncState(ctx)
}

func (r *Registry) syncState(ctx context.Context) error {
	if err := r.state.Sync(ctx); err != nil {
		return &Error{Code: protocol.CodeStoreUnavailable, Message: "the registry cannot save its state; retry later",
			Err: fmt.Errorf("save the replica state: %w", err)}
	}
	return nil
}

func (r *Registry) storeErr(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return Unavailable(err)
}

// nodeRanges is ids, sorted, as a log value: runs of consecutive node IDs as
// ranges, "0-99,105,107-110", so that an Alloc of a thousand node IDs is one short
// attribute.
type nodeRanges []NodeID

// LogValue implements slog.LogValuer.
func (ids nodeRanges) LogValue() slog.Value { return slog.StringValue(ids.String()) }

func (ids nodeRanges) String() string {
	sorted := slices.Sorted(slices.Values(ids))
	var b strings.Builder
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] <= sorted[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(sorted[i])))
		if sorted[j] != sorted[i] {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(int(sorted[j])))
		}
		i = j + 1
	}
	return b.String()
}

func nodeIDs(ls []Lease) []NodeID {
	ids := make([]NodeID, len(ls))
	for i, l := range ls {
		ids[i] = l.NodeID
	}
	return slices.Clip(ids)
}

// Store is the store the registry keeps its leases and keys on (New's store).
func (r *Registry) Store() Store { return r.store }
