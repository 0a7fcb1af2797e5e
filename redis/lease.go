package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// Status reads the generation, the fencing counter, the pool size and the clock in
// one script, as idkeeper.LeaseStore says.
func (s *Store) Status(ctx context.Context) (idkeeper.StoreStatus, error) {
	v, err := s.run(ctx, scriptStatus, []string{s.keys.meta}, false, s.nowArg())
	if err != nil {
		return idkeeper.StoreStatus{}, wrap("status", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 9 {
		return idkeeper.StoreStatus{}, fmt.Errorf("redis: status: unexpected reply %v", v)
	}
	now, ok := a[6].(int64)
	if !ok {
		return idkeeper.StoreStatus{}, fmt.Errorf("redis: status: unexpected reply %v", v)
	}
	st := idkeeper.StoreStatus{Now: fromMs(now)}
	if st.Fence, err = optionalUint(a[4]); err != nil {
		return idkeeper.StoreStatus{}, fmt.Errorf("redis: status: %w", err)
	}
	if _, ok := a[0].(string); !ok {
		return st, nil // not initialised: no generation, no pool
	}
	if st.Generation, err = generationReply(a[:4]); err != nil {
		return idkeeper.StoreStatus{}, fmt.Errorf("redis: status: %w", err)
	}
	nodes, err := optionalUint(a[5])
	if err != nil {
		return idkeeper.StoreStatus{}, fmt.Errorf("redis: status: %w", err)
	}
	st.Initialised = true
	if nodes == 0 {
		return st, nil
	}
	first, err := optionalUint(a[7])
	if err != nil {
		return idkeeper.StoreStatus{}, fmt.Errorf("redis: status: %w", err)
	}
	st.Pool = idkeeper.PoolSpec{First: idkeeper.NodeID(first), Nodes: int(nodes), Layout: idkeeper.DefaultLayout}
	if l, ok := a[8].(string); ok {
		if st.Pool.Layout, err = idkeeper.ParseLayout(l); err != nil {
			return idkeeper.StoreStatus{}, fmt.Errorf("redis: status: the stored layout: %w", err)
		}
	}
	return st, nil
}

// poolArgs are the script arguments of pool p: its first node ID, its layout's
// canonical text and the default layout's (that of a store without a stored
// layout).
func poolArgs(p idkeeper.PoolSpec) []any {
	return []any{int(p.First), idkeeper.FormatLayout(p.LayoutOrDefault()), idkeeper.FormatLayout(idkeeper.DefaultLayout)}
}

// poolMismatch is the PoolMismatch of the error reply IDKPOOL <first> <size>
// <layout> of a script asked for pool asked.
func poolMismatch(r *scriptReply, asked idkeeper.PoolSpec) error {
	f := strings.Fields(r.arg)
	if len(f) != 3 {
		return fmt.Errorf("redis: malformed reply %s %s", r.word, r.arg)
	}
	first, err1 := strconv.Atoi(f[0])
	nodes, err2 := strconv.Atoi(f[1])
	l, err3 := idkeeper.ParseLayout(f[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("redis: reply %s %s: %w", r.word, r.arg, err)
	}
	return idkeeper.PoolMismatch(idkeeper.PoolSpec{First: idkeeper.NodeID(first), Nodes: nodes, Layout: l}, asked)
}

// Init initialises an empty store, or grows the pool of an initialised one, as
// idkeeper.LeaseStore says. It walks the new node IDs once.
func (s *Store) Init(ctx context.Context, pool idkeeper.PoolSpec) (idkeeper.InitResult, error) {
	if err := pool.Validate(); err != nil {
		return idkeeper.InitResult{}, err
	}
	v, err := s.run(ctx, scriptInit, s.keys.lease, false,
		append([]any{s.nowArg(), pool.Nodes, idkeeper.NewGenerationID()}, poolArgs(pool)...)...)
	if r, ok := asReply(err, errShrink); ok {
		return idkeeper.InitResult{}, idkeeper.ShrinkRefused(uint64(r.n), pool.Nodes)
	}
	if r, ok := asReply(err, errPool); ok {
		return idkeeper.InitResult{}, poolMismatch(r, pool)
	}
	if _, ok := asReply(err, errOldLayout); ok {
		return idkeeper.InitResult{}, s.oldLayout()
	}
	if err != nil {
		return idkeeper.InitResult{}, wrap("init", err)
	}
	g, fresh, err := generationFlagReply(v)
	if err != nil {
		return idkeeper.InitResult{}, fmt.Errorf("redis: init: %w", err)
	}
	if fresh {
		s.log.Info("redis store initialised", "prefix", s.prefix, "pool", pool.String(), "generation", g.ID)
	}
	return idkeeper.InitResult{Generation: g, Fresh: fresh}, nil
}

// Grow adds node IDs up to nodes under the guard, as idkeeper.LeaseStore says.
func (s *Store) Grow(ctx context.Context, g idkeeper.Guard, pool idkeeper.PoolSpec) error {
	if err := pool.Validate(); err != nil {
		return err
	}
	_, err := s.runGuarded(ctx, scriptGrow, "grow", false, g, append([]any{pool.Nodes}, poolArgs(pool)...)...)
	if r, ok := asReply(err, errShrink); ok {
		return idkeeper.ShrinkRefused(uint64(r.n), pool.Nodes)
	}
	if r, ok := asReply(err, errPool); ok {
		return poolMismatch(r, pool)
	}
	return err
}

// Reset makes a store that lost writes safe, as idkeeper.LeaseStore says, in one
// script that walks the pool once. With Options.WaitReplicas it waits for the
// replicas like a grant does: a quarantine lost in a failover would be forgotten.
func (s *Store) Reset(ctx context.Context, p idkeeper.ResetParams) (idkeeper.ResetResult, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.ResetResult{}, err
	}
	v, err := s.run(ctx, scriptReset, s.keys.lease, true, append([]any{s.nowArg(), p.Pool.Nodes, ms(p.Until),
		strconv.FormatUint(p.MinFence, 10), p.Seen.ID, strconv.FormatUint(p.Seen.Number, 10), idkeeper.NewGenerationID()},
		poolArgs(p.Pool)...)...)
	if r, ok := asReply(err, errPool); ok {
		return idkeeper.ResetResult{}, poolMismatch(r, p.Pool)
	}
	if _, ok := asReply(err, errOldLayout); ok {
		return idkeeper.ResetResult{}, s.oldLayout()
	}
	if err != nil {
		return idkeeper.ResetResult{}, wrap("reset", err)
	}
	g, fresh, err := generationFlagReply(v)
	if err != nil {
		return idkeeper.ResetResult{}, fmt.Errorf("redis: reset: %w", err)
	}
	s.log.Warn("redis store reset: every node ID quarantined and its watermark floor raised",
		"until", protocol.Millis(p.Until), "minFence", p.MinFence, "prefix", s.prefix,
		"generation", g.Number, "newGeneration", fresh)
	return idkeeper.ResetResult{Generation: g, NewGeneration: fresh}, nil
}

// generationReply decodes {id, number, origin, at} of a script.
func generationReply(a []any) (idkeeper.Generation, error) {
	id, ok := a[0].(string)
	if !ok || id == "" {
		return idkeeper.Generation{}, fmt.Errorf("malformed generation %v", a)
	}
	number, err := optionalUint(a[1])
	if err != nil {
		return idkeeper.Generation{}, err
	}
	origin, _ := a[2].(string)
	var at int64
	switch x := a[3].(type) {
	case int64:
		at = x
	case string:
		if at, err = strconv.ParseInt(x, 10, 64); err != nil {
			return idkeeper.Generation{}, fmt.Errorf("malformed generation time %q", x)
		}
	default:
		return idkeeper.Generation{}, fmt.Errorf("malformed generation %v", a)
	}
	return idkeeper.Generation{ID: id, Number: number, Origin: idkeeper.Origin(origin), At: fromMs(at)}, nil
}

// generationFlagReply decodes {id, number, origin, at, flag} of Init and Reset.
func generationFlagReply(v any) (idkeeper.Generation, bool, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 5 {
		return idkeeper.Generation{}, false, fmt.Errorf("unexpected reply %v", v)
	}
	g, err := generationReply(a[:4])
	if err != nil {
		return idkeeper.Generation{}, false, err
	}
	flag, ok := a[4].(int64)
	if !ok {
		return idkeeper.Generation{}, false, fmt.Errorf("unexpected reply %v", v)
	}
	return g, flag == 1, nil
}

// Alloc grants p.Count node IDs to p.Requester, as idkeeper.LeaseStore says,
// without scanning the pool.
func (s *Store) Alloc(ctx context.Context, g idkeeper.Guard, p idkeeper.AllocParams) (idkeeper.Grant, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	v, err := s.runGuarded(ctx, scriptAlloc, "alloc", true, g, p.Requester.Key(), p.KeyID, p.Count,
		p.First.Milliseconds(), max(p.MaxNodes, 0), encodeClient(p.Client))
	if r, ok := asReply(err, errMismatch); ok {
		return idkeeper.Grant{}, idkeeper.CountMismatch(r.n, p.Count)
	}
	if r, ok := asReply(err, errQuota); ok {
		held, cool := r.n, 0
		if f := strings.Fields(r.arg); len(f) == 2 {
			held, _ = strconv.Atoi(f[0])
			cool, _ = strconv.Atoi(f[1])
		}
		return idkeeper.Grant{}, idkeeper.QuotaExceededCooling(p.MaxNodes, held, cool, p.Count)
	}
	if r, ok := asReply(err, errExhausted); ok {
		return idkeeper.Grant{}, idkeeper.Exhausted(p.Count, r.n)
	}
	if r, ok := asReply(err, errFenceMax); ok {
		return idkeeper.Grant{}, fmt.Errorf("redis: alloc: %w", idkeeper.FenceCeiling(uint64(r.n), p.Count))
	}
	if err != nil {
		return idkeeper.Grant{}, err
	}
	return grantReply(v, p.Requester, false)
}

// Renew handles the claims and extends every lease of p.Requester, as
// idkeeper.LeaseStore says.
func (s *Store) Renew(ctx context.Context, g idkeeper.Guard, p idkeeper.RenewParams) (idkeeper.Grant, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	args := []any{p.Requester.Key(), p.KeyID, p.Duration.Milliseconds(), p.Grace.Milliseconds()}
	claims := slices.Clone(p.Claims)
	slices.SortStableFunc(claims, func(a, b idkeeper.Claim) int { return cmp.Compare(a.NodeID, b.NodeID) })
	for _, c := range claims {
		if !c.Possible() {
			continue
		}
		args = append(args, int(c.NodeID), strconv.FormatUint(c.Token, 10), ms(c.NotBefore), ms(c.ExpiresAt))
	}
	v, err := s.runGuarded(ctx, scriptRenew, "renew", true, g, args...)
	if err != nil {
		return idkeeper.Grant{}, err
	}
	return grantReply(v, p.Requester, true)
}

// Remove releases every lease of p.Requester, as idkeeper.LeaseStore says.
func (s *Store) Remove(ctx context.Context, g idkeeper.Guard, p idkeeper.RemoveParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	minted := ""
	if !p.MintedUpTo.IsZero() {
		minted = strconv.FormatInt(ms(p.MintedUpTo), 10)
	}
	v, err := s.runGuarded(ctx, scriptRemove, "remove", false, g, p.Requester.Key(), p.KeyID, minted)
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("redis: remove: unexpected reply %v", v)
	}
	return int(n), nil
}

// Reclaim deletes the leases past expiry + grace, as idkeeper.LeaseStore says,
// in scripts of at most Options.ReclaimBatch leases each, each checking the guard;
// it stops at the first error, leaving the batches done so far applied.
func (s *Store) Reclaim(ctx context.Context, g idkeeper.Guard, grace time.Duration) (int, error) {
	total := 0
	for {
		v, err := s.runGuarded(ctx, scriptReclaim, "reclaim", false, g, grace.Milliseconds(), s.reclaimBatch)
		if err != nil {
			return total, err
		}
		a, err := ints(v, 2)
		if err != nil {
			return total, err
		}
		total += int(a[0])
		if a[0] < int64(s.reclaimBatch) {
			return total, nil
		}
	}
}

// Quarantine raises the quarantine of node IDs, as idkeeper.LeaseStore says.
func (s *Store) Quarantine(ctx context.Context, g idkeeper.Guard, until time.Time, nodes ...idkeeper.NodeID) error {
	args := []any{ms(until)}
	for _, n := range nodes {
		args = append(args, int(n))
	}
	_, err := s.runGuarded(ctx, scriptQuarantine, "quarantine", false, g, args...)
	if r, ok := asReply(err, errInvalid); ok {
		return idkeeper.OutsidePool(idkeeper.NodeID(r.n))
	}
	return err
}

// Counts returns the state of the pool at the store's now, in O(log n + k), k being
// the ended quarantines not yet promoted (counts.lua).
func (s *Store) Counts(ctx context.Context) (idkeeper.Counts, error) {
	v, err := s.run(ctx, scriptCounts, s.keys.lease, false, s.nowArg())
	if err != nil {
		return idkeeper.Counts{}, wrap("counts", err)
	}
	a, err := ints(v, 8)
	if err != nil {
		return idkeeper.Counts{}, err
	}
	c := idkeeper.Counts{Total: int(a[0]), Remaining: int(a[1]), Leased: int(a[2]), InGrace: int(a[3]),
		Quarantined: int(a[4]), Cooling: int(a[6])}
	if c.Cooling > 0 {
		c.NextReadyAt = time.UnixMilli(a[7]).UTC()
	}
	return c, nil
}

// Leases returns every lease, expired ones included, sorted by NodeID.
func (s *Store) Leases(ctx context.Context) ([]idkeeper.Lease, error) {
	m, err := s.client.HGetAll(ctx, s.keys.leases).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: leases: %w", err)
	}
	out := make([]idkeeper.Lease, 0, len(m))
	for node, rec := range m {
		l, err := parseLease(node, rec)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b idkeeper.Lease) int { return cmp.Compare(a.NodeID, b.NodeID) })
	return out, nil
}

// Node returns the state of one node ID; ErrNotFound outside the pool and on a
// store without a generation.
func (s *Store) Node(ctx context.Context, id idkeeper.NodeID) (idkeeper.NodeState, error) {
	if id < 0 {
		return idkeeper.NodeState{}, idkeeper.ErrNotFound
	}
	v, err := s.run(ctx, scriptNode, s.keys.lease, false, int(id))
	if err != nil {
		return idkeeper.NodeState{}, wrap("node", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 8 {
		return idkeeper.NodeState{}, fmt.Errorf("redis: node: unexpected reply %v", v)
	}
	pool, _ := a[0].(int64)
	first, _ := a[7].(int64)
	if int64(id) < first || int64(id) >= first+pool {
		return idkeeper.NodeState{}, idkeeper.ErrNotFound
	}
	st := idkeeper.NodeState{NodeID: id}
	if rec, ok := a[1].(string); ok {
		l, err := parseLease(strconv.Itoa(int(id)), rec)
		if err != nil {
			return idkeeper.NodeState{}, err
		}
		st.Lease = &l
	}
	for i, t := range []*time.Time{&st.Watermark, &st.Floor, &st.QuarantinedUntil} {
		if *t, err = optionalTime(a[2+i]); err != nil {
			return idkeeper.NodeState{}, fmt.Errorf("redis: node %d: %w", id, err)
		}
	}
	if st.LastToken, err = optionalUint(a[5]); err != nil {
		return idkeeper.NodeState{}, fmt.Errorf("redis: node %d: %w", id, err)
	}
	st.Restorable = a[6] == int64(1)
	return st, nil
}

// KeyCooling returns how many node IDs are charged to each API key for cooling,
// as idkeeper.LeaseStore says (key_cooling.lua): O(k) for the k charges kept.
func (s *Store) KeyCooling(ctx context.Context) (map[string]int, error) {
	v, err := s.run(ctx, scriptKeyCooling, s.keys.lease, false, s.nowArg())
	if err != nil {
		return nil, wrap("key cooling", err)
	}
	a, ok := v.([]any)
	if !ok || len(a)%2 != 0 {
		return nil, fmt.Errorf("redis: key cooling: unexpected reply %v", v)
	}
	out := make(map[string]int, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		k, ok1 := a[i].(string)
		n, ok2 := a[i+1].(int64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("redis: key cooling: unexpected reply %v", v)
		}
		out[k] = int(n)
	}
	return out, nil
}

// KeyHoldings returns how many node IDs the leases of each API key hold, from the
// per-key counts the lease scripts keep.
func (s *Store) KeyHoldings(ctx context.Context) (map[string]int, error) {
	m, err := s.client.HGetAll(ctx, s.keys.keyHeld).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: key holdings: %w", err)
	}
	out := make(map[string]int, len(m))
	for k, v := range m {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("redis: malformed holding %q of key %q", v, k)
		}
		if n > 0 {
			out[k] = n
		}
	}
	return out, nil
}

// optionalTime decodes a time in ms of a script reply; a missing one (false) is
// the zero time.
func optionalTime(v any) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("malformed time %q", s)
	}
	return fromMs(n), nil
}

// optionalUint decodes a counter of a script reply; a missing one (false) is 0.
func optionalUint(v any) (uint64, error) {
	switch x := v.(type) {
	case int64:
		return uint64(x), nil
	case string:
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed counter %q", x)
		}
		return n, nil
	}
	return 0, nil
}

// parseLease decodes a lease record of the leases hash (see lease.lua):
// "expiresAt,renewedAt,notBefore,token,grantedAt,n,<requester key><key ID>", n
// being the byte length of the requester key.
func parseLease(node, rec string) (idkeeper.Lease, error) {
	id, err := strconv.Atoi(node)
	if err != nil {
		return idkeeper.Lease{}, fmt.Errorf("redis: malformed node ID %q", node)
	}
	l, req, err := decodeLease(rec)
	if err != nil {
		return idkeeper.Lease{}, fmt.Errorf("redis: lease of node %s: %w", node, err)
	}
	if l.Requester, err = idkeeper.ParseRequesterKey(req); err != nil {
		return idkeeper.Lease{}, fmt.Errorf("redis: lease of node %s: %w", node, err)
	}
	l.NodeID = idkeeper.NodeID(id)
	return l, nil
}

// decodeLease decodes a lease record but for its node ID and requester, whose key
// it returns.
func decodeLease(rec string) (idkeeper.Lease, string, error) {
	f := strings.SplitN(rec, ",", 7)
	if len(f) != 7 {
		return idkeeper.Lease{}, "", errors.New("malformed lease record")
	}
	var n [5]int64
	for i := range n {
		var err error
		if n[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return idkeeper.Lease{}, "", errors.New("malformed lease record")
		}
	}
	size, err := strconv.Atoi(f[5])
	if err != nil || size < 0 || size > len(f[6]) {
		return idkeeper.Lease{}, "", errors.New("malformed lease record")
	}
	return idkeeper.Lease{
		ExpiresAt:    fromMs(n[0]),
		RenewedAt:    fromMs(n[1]),
		NotBefore:    fromMs(n[2]),
		FencingToken: uint64(n[3]),
		GrantedAt:    fromMs(n[4]),
		KeyID:        f[6][size:],
	}, f[6][:size], nil
}

// grantReply decodes {now, fence, node, record, …} of Alloc, or {now, fence,
// #restored, #contested, restored…, contested…, node, record, …} of Renew
// (claims). Every lease is r's.
func grantReply(v any, r idkeeper.Requester, claims bool) (idkeeper.Grant, error) {
	a, ok := v.([]any)
	bad := func() (idkeeper.Grant, error) {
		return idkeeper.Grant{}, fmt.Errorf("redis: unexpected grant reply %v", v)
	}
	next := func() (int64, bool) {
		if len(a) == 0 {
			return 0, false
		}
		n, ok := a[0].(int64)
		a = a[1:]
		return n, ok
	}
	if !ok {
		return bad()
	}
	now, ok1 := next()
	fence, ok2 := next()
	if !ok1 || !ok2 {
		return bad()
	}
	g := idkeeper.Grant{Now: fromMs(now), Fence: uint64(fence), Leases: []idkeeper.Lease{}}
	if claims {
		nr, ok1 := next()
		nc, ok2 := next()
		if !ok1 || !ok2 {
			return bad()
		}
		for i := int64(0); i < nr+nc; i++ {
			id, ok := next()
			if !ok {
				return bad()
			}
			if i < nr {
				g.Restored = append(g.Restored, idkeeper.NodeID(id))
			} else {
				g.Contested = append(g.Contested, idkeeper.NodeID(id))
			}
		}
	}
	r.StartedAt = protocol.Millis(r.StartedAt)
	for len(a) >= 2 {
		node, ok1 := a[0].(string)
		rec, ok2 := a[1].(string)
		a = a[2:]
		id, err := strconv.Atoi(node)
		if !ok1 || !ok2 || err != nil {
			return bad()
		}
		l, _, err := decodeLease(rec)
		if err != nil {
			return idkeeper.Grant{}, fmt.Errorf("redis: lease of node %d: %w", id, err)
		}
		l.NodeID, l.Requester = idkeeper.NodeID(id), r
		g.Leases = append(g.Leases, l)
	}
	if len(a) != 0 {
		return bad()
	}
	slices.SortFunc(g.Leases, func(x, y idkeeper.Lease) int { return cmp.Compare(x.NodeID, y.NodeID) })
	return g, nil
}

// ints decodes an array reply of integers; want < 0 accepts any length.
func ints(v any, want int) ([]int64, error) {
	a, ok := v.([]any)
	if !ok || (want >= 0 && len(a) != want) {
		return nil, fmt.Errorf("redis: unexpected script reply %v", v)
	}
	out := make([]int64, len(a))
	for i, x := range a {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("redis: unexpected script reply %v", v)
		}
		out[i] = n
	}
	return out, nil
}

// wrap names the operation on a failing store's error; the errors of the contract
// (ErrStoreReset, ErrStoreClockSkew, an *idkeeper.Error) pass as they are.
func wrap(op string, err error) error {
	var de *idkeeper.Error
	if errors.Is(err, idkeeper.ErrStoreReset) || errors.Is(err, idkeeper.ErrStoreClockSkew) || errors.As(err, &de) {
		return err
	}
	if errors.Is(err, goredis.Nil) {
		return fmt.Errorf("redis: %s: unexpected nil reply", op)
	}
	return fmt.Errorf("redis: %s: %w", op, err)
}
