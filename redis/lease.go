package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
)

// Init prepares the pool, as idkeeper.LeaseStore says. On a fresh store it walks
// the pool once, and so does growing it.
func (s *Store) Init(ctx context.Context, nodes int) (idkeeper.InitResult, error) {
	if nodes < 1 {
		return idkeeper.InitResult{}, idkeeper.Invalidf("nodes", "the pool needs at least one node ID, got %d", nodes)
	}
	v, err := s.run(ctx, scriptInit, s.keys.lease, false, s.nowArg(), nodes, newSentinel())
	if r, ok := asReply(err, errShrink); ok {
		return idkeeper.InitResult{}, idkeeper.Invalidf("nodes",
			"the store holds %d node IDs; the pool cannot shrink to %d", r.n, nodes)
	}
	if err != nil {
		return idkeeper.InitResult{}, wrap("init", err)
	}
	sentinel, fresh, err := sentinelReply(v)
	if err != nil {
		return idkeeper.InitResult{}, err
	}
	s.adopt(sentinel)
	if fresh {
		s.log.Info("redis store initialised", "prefix", s.prefix, "nodes", nodes)
	}
	return idkeeper.InitResult{Sentinel: sentinel, Fresh: fresh}, nil
}

// Reset recovers a store that lost writes, as idkeeper.LeaseStore says, in one
// script that walks the pool once.
func (s *Store) Reset(ctx context.Context, old string, p idkeeper.ResetParams) (string, bool, error) {
	if p.Nodes < 1 {
		return "", false, idkeeper.Invalidf("nodes", "the pool needs at least one node ID, got %d", p.Nodes)
	}
	v, err := s.run(ctx, scriptReset, s.keys.lease, false, s.nowArg(), p.Nodes, ms(p.Until),
		strconv.FormatUint(p.MinFence, 10), old, newSentinel())
	if err != nil {
		return "", false, wrap("reset", err)
	}
	sentinel, recovered, err := sentinelReply(v)
	if err != nil {
		return "", false, err
	}
	s.adopt(sentinel)
	if recovered {
		s.log.Warn("redis store reset: every node ID quarantined", "until", idkeeper.Millis(p.Until),
			"minFence", p.MinFence, "prefix", s.prefix)
	} else {
		s.log.Info("redis store already recovered by another replica; adopted its sentinel", "prefix", s.prefix)
	}
	return sentinel, recovered, nil
}

func sentinelReply(v any) (string, bool, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", false, fmt.Errorf("redis: unexpected script reply %v", v)
	}
	sentinel, ok1 := a[0].(string)
	flag, ok2 := a[1].(int64)
	if !ok1 || !ok2 {
		return "", false, fmt.Errorf("redis: unexpected script reply %v", v)
	}
	return sentinel, flag == 1, nil
}

// Alloc grants count node IDs to r, as idkeeper.LeaseStore says, without
// scanning the pool.
func (s *Store) Alloc(ctx context.Context, r idkeeper.Requester, count int, first time.Duration) (idkeeper.Grant, error) {
	if count < 1 {
		return idkeeper.Grant{}, idkeeper.Invalidf("count", "count must be at least 1, got %d", count)
	}
	sentinel, err := s.adopted()
	if err != nil {
		return idkeeper.Grant{}, err
	}
	v, err := s.run(ctx, scriptAlloc, s.keys.lease, true, sentinel, s.nowArg(), r.Key(), count, first.Milliseconds())
	if rep, ok := asReply(err, errMismatch); ok {
		return idkeeper.Grant{}, &idkeeper.Error{
			Code:    idkeeper.CodeRequesterCountMismatch,
			Message: fmt.Sprintf("the requester holds %d node IDs and asked for %d; remove them first", rep.n, count),
			Details: map[string]any{"held": rep.n, "requested": count},
		}
	}
	if rep, ok := asReply(err, errExhausted); ok {
		return idkeeper.Grant{}, &idkeeper.Error{
			Code:    idkeeper.CodeNodeIDsExhausted,
			Message: fmt.Sprintf("%d node IDs requested, %d allocatable", count, rep.n),
			Details: map[string]any{"requested": count, "remaining": rep.n},
		}
	}
	if err != nil {
		return idkeeper.Grant{}, wrap("alloc", err)
	}
	return grantReply(v, r)
}

// Renew extends every lease of r, as idkeeper.LeaseStore says.
func (s *Store) Renew(ctx context.Context, r idkeeper.Requester, d time.Duration) (idkeeper.Grant, error) {
	sentinel, err := s.adopted()
	if err != nil {
		return idkeeper.Grant{}, err
	}
	v, err := s.run(ctx, scriptRenew, s.keys.lease, true, sentinel, s.nowArg(), r.Key(), d.Milliseconds())
	if err != nil {
		return idkeeper.Grant{}, wrap("renew", err)
	}
	return grantReply(v, r)
}

// Remove releases every lease of r, as idkeeper.LeaseStore says.
func (s *Store) Remove(ctx context.Context, r idkeeper.Requester, mintedUpTo time.Time) (int, error) {
	sentinel, err := s.adopted()
	if err != nil {
		return 0, err
	}
	minted := ""
	if !mintedUpTo.IsZero() {
		minted = strconv.FormatInt(ms(mintedUpTo), 10)
	}
	v, err := s.run(ctx, scriptRemove, s.keys.lease, false, sentinel, s.nowArg(), r.Key(), minted)
	if err != nil {
		return 0, wrap("remove", err)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("redis: remove: unexpected reply %v", v)
	}
	return int(n), nil
}

// Reclaim deletes the leases past expiry + grace, as idkeeper.LeaseStore says,
// in scripts of at most Options.ReclaimBatch leases each; it stops at the first
// error, leaving the batches done so far applied.
func (s *Store) Reclaim(ctx context.Context, grace time.Duration) (int, error) {
	sentinel, err := s.adopted()
	if err != nil {
		return 0, err
	}
	total := 0
	for {
		v, err := s.run(ctx, scriptReclaim, s.keys.lease, false, sentinel, s.nowArg(), grace.Milliseconds(), s.reclaimBatch)
		if err != nil {
			return total, wrap("reclaim", err)
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
func (s *Store) Quarantine(ctx context.Context, until time.Time, nodes ...idkeeper.NodeID) error {
	sentinel, err := s.adopted()
	if err != nil {
		return err
	}
	args := []any{sentinel, s.nowArg(), ms(until)}
	for _, n := range nodes {
		if n < 0 {
			return idkeeper.Invalidf("nodes", "node ID %d is outside the pool", n)
		}
		args = append(args, int(n))
	}
	_, err = s.run(ctx, scriptQuarantine, s.keys.lease, false, args...)
	if rep, ok := asReply(err, errInvalid); ok {
		return idkeeper.Invalidf("nodes", "node ID %s is outside the pool", rep.arg)
	}
	if err != nil {
		return wrap("quarantine", err)
	}
	return nil
}

// Counts returns the state of the pool at the store's now, in O(log n).
func (s *Store) Counts(ctx context.Context) (idkeeper.Counts, error) {
	v, err := s.run(ctx, scriptCounts, s.keys.lease, false, s.nowArg())
	if err != nil {
		return idkeeper.Counts{}, wrap("counts", err)
	}
	a, err := ints(v, 6)
	if err != nil {
		return idkeeper.Counts{}, err
	}
	return idkeeper.Counts{Total: int(a[0]), Remaining: int(a[1]), Leased: int(a[2]), InGrace: int(a[3]), Quarantined: int(a[4])}, nil
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
	slices.SortFunc(out, func(a, b idkeeper.Lease) int { return int(a.NodeID - b.NodeID) })
	return out, nil
}

// Node returns the state of one node ID; ErrNotFound outside the pool.
func (s *Store) Node(ctx context.Context, id idkeeper.NodeID) (idkeeper.NodeState, error) {
	if id < 0 {
		return idkeeper.NodeState{}, idkeeper.ErrNotFound
	}
	v, err := s.run(ctx, scriptNode, s.keys.lease, false, int(id))
	if err != nil {
		return idkeeper.NodeState{}, wrap("node", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return idkeeper.NodeState{}, fmt.Errorf("redis: node: unexpected reply %v", v)
	}
	if pool, _ := a[0].(int64); int64(id) >= pool {
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
	if st.Watermark, err = optionalTime(a[2]); err != nil {
		return idkeeper.NodeState{}, err
	}
	if st.QuarantinedUntil, err = optionalTime(a[3]); err != nil {
		return idkeeper.NodeState{}, err
	}
	return st, nil
}

func optionalTime(v any) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("redis: malformed time %q", s)
	}
	return fromMs(n), nil
}

// parseLease decodes a lease record of the leases hash (see lease.lua).
func parseLease(node, rec string) (idkeeper.Lease, error) {
	f := strings.SplitN(rec, ",", 6)
	if len(f) != 6 {
		return idkeeper.Lease{}, fmt.Errorf("redis: malformed lease record of node %s", node)
	}
	var n [6]int64
	var err error
	if n[0], err = strconv.ParseInt(node, 10, 64); err != nil {
		return idkeeper.Lease{}, fmt.Errorf("redis: malformed node ID %q", node)
	}
	for i := 0; i < 5; i++ {
		if n[i+1], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return idkeeper.Lease{}, fmt.Errorf("redis: malformed lease record of node %s", node)
		}
	}
	r, err := idkeeper.ParseRequesterKey(f[5])
	if err != nil {
		return idkeeper.Lease{}, fmt.Errorf("redis: lease of node %s: %w", node, err)
	}
	return lease(r, n[0], n[1], n[2], n[3], n[4], n[5]), nil
}

func lease(r idkeeper.Requester, node, nb, exp, tok, granted, renewed int64) idkeeper.Lease {
	return idkeeper.Lease{
		NodeID:       idkeeper.NodeID(node),
		Requester:    r,
		NotBefore:    fromMs(nb),
		ExpiresAt:    fromMs(exp),
		FencingToken: uint64(tok),
		GrantedAt:    fromMs(granted),
		RenewedAt:    fromMs(renewed),
	}
}

// grantReply decodes {now, fence, node, notBefore, expiresAt, token, granted,
// renewed, …}. The leases come sorted by node ID from the scripts.
func grantReply(v any, r idkeeper.Requester) (idkeeper.Grant, error) {
	a, err := ints(v, -1)
	if err != nil {
		return idkeeper.Grant{}, err
	}
	if len(a) < 2 || (len(a)-2)%6 != 0 {
		return idkeeper.Grant{}, fmt.Errorf("redis: unexpected grant reply of %d values", len(a))
	}
	r.StartedAt = idkeeper.Millis(r.StartedAt)
	g := idkeeper.Grant{Now: fromMs(a[0]), Fence: uint64(a[1]), Leases: []idkeeper.Lease{}}
	for i := 2; i < len(a); i += 6 {
		g.Leases = append(g.Leases, lease(r, a[i], a[i+1], a[i+2], a[i+3], a[i+4], a[i+5]))
	}
	slices.SortFunc(g.Leases, func(x, y idkeeper.Lease) int { return int(x.NodeID - y.NodeID) })
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

// wrap names the operation on a failing store's error; ErrStoreReset passes as is.
func wrap(op string, err error) error {
	if errors.Is(err, idkeeper.ErrStoreReset) {
		return err
	}
	if errors.Is(err, goredis.Nil) {
		return fmt.Errorf("redis: %s: unexpected nil reply", op)
	}
	return fmt.Errorf("redis: %s: %w", op, err)
}
