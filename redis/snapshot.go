package redis

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/snapshot"
)

// Snapshots (snapshot.Store).
//
// ReadSnapshot copies every durable key, in one script (COPY, Redis 6.2 or
// later), to keys of its own, "{prefix}:snapshot:<random>:<name>", which lapse by
// themselves (snapshotTTL, renewed while the read goes on); then it reads those
// copies in batches of snapshotBatch records and deletes them. So a snapshot is
// one consistent view of the store, whatever is written meanwhile, at the price
// of a second copy of the durable state in Redis while it is read, and of one
// script that copies it all (Redis does nothing else meanwhile: about as long as
// Reset's walk of the pool, plus the audit log). The API keys, users and
// allow-list are read whole (one HGETALL each), to sort them: they are few.
//
// LoadSnapshot takes the load lock "{prefix}:restore-lock" (SET NX, lapsing after
// snapshotTTL, renewed with the staging keys after every batch), so only one load
// runs at a time; a second one fails at once with an error wrapping
// idkeeper.ErrConflict. It writes meta and the records, snapshotBatch at a time,
// to staging keys "{prefix}:restore:<random>:<name>", under the store's hash tag
// (one Cluster slot), that lapse by themselves should the load die, checking each
// record as it goes (snapshot.Checker; a requester's leases all of one
// key). The free nodes are filed at the store's now, in NodeID order. Then one
// script swaps: it deletes every live durable key and renames each staging key
// into its place, deletes every admin session and releases the lock. Before the
// swap the live keys are untouched; on any failure the staging keys are deleted.
// The swap waits for Options.WaitReplicas as a Reset does; when they do not
// acknowledge it, LoadSnapshot fails although the primary holds the loaded state.
//
// The durable keys are the lease keys (keys.lease, the lease history's
// included), apikeys, users, allowlist, audit, audit-seq and audit-head. Job
// locks, skew observations and idempotency records are not touched. The history
// records come last in a snapshot, read from the copy in (NodeID, Token) order,
// the order of their 't:' members in history:index, snapshotBatch at a time.

var _ snapshot.Store = (*Store)(nil)

var (
	scriptSnapCopy  = plainScript("snapshot_copy")
	scriptSnapKeep  = plainScript("snapshot_keep")
	scriptSnapNodes = leaseScript("snapshot_nodes")
	scriptSnapStage = leaseScript("snapshot_stage")
	scriptSnapSwap  = plainScript("snapshot_swap")
	scriptSnapLock  = plainScript("snapshot_lock")
)

const (
	// snapshotBatch is the most records a snapshot reads or writes in one go.
	snapshotBatch = 1000
	// snapshotTTL is how long a snapshot copy, a load's staging keys and the load
	// lock outlive the last batch that renewed them.
	snapshotTTL = 10 * time.Minute
	// swapTries bounds the swaps a load tries while sessions keep being created
	// for users it did not know of.
	swapTries   = 10
	keyLoadLock = "restore-lock"
)

// durableKeys are the keys of the durable state, the meta first and the lease keys
// in lease.lua's order.
func (s *Store) durableKeys() []string {
	return append(slices.Clone(s.keys.lease), s.keys.apiKeys, s.adminKey(keyUsers), s.adminKey(keyAllowList),
		s.adminKey(keyAudit), s.adminKey(keyAuditSeq), s.adminKey(keyAuditHead))
}

// Indexes of durableKeys past the lease keys.
const (
	durAPIKeys = leaseKeyCount + iota
	durUsers
	durAllow
	durAudit
	durAuditSeq
	durAuditHead
)

// tempKeys are durableKeys renamed for a copy or a staging: "{prefix}:<kind>:<token>:<name>".
func (s *Store) tempKeys(kind, token string) []string {
	base := s.adminKey("")
	keys := s.durableKeys()
	for i, k := range keys {
		keys[i] = base + kind + ":" + token + ":" + strings.TrimPrefix(k, base)
	}
	return keys
}

// cleanup deletes keys after ctx ended or failed, within a few seconds.
func (s *Store) cleanup(ctx context.Context, keys []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.client.Del(ctx, keys...).Err(); err != nil {
		s.log.Warn("redis: could not delete the temporary keys of a snapshot; they lapse by themselves",
			"prefix", s.prefix, "err", err)
	}
}

// ReadSnapshot implements snapshot.Store from one copy of the store taken
// in one script (see the package's snapshot notes above).
func (s *Store) ReadSnapshot(ctx context.Context, meta func(snapshot.Meta) error, emit func(snapshot.Record) error) error {
	live, cp := s.durableKeys(), s.tempKeys("snapshot", idkeeper.NewGenerationID())
	v, err := s.run(ctx, scriptSnapCopy, append(slices.Clone(live), cp...), false, snapshotTTL.Milliseconds())
	if err != nil {
		return wrap("read snapshot", err)
	}
	if v != int64(1) {
		return idkeeper.ErrNotInitialised
	}
	defer s.cleanup(ctx, cp)
	r := snapReader{s: s, ctx: ctx, cp: cp, emit: emit}

	m, err := r.meta()
	if err != nil {
		return err
	}
	if err := meta(m); err != nil {
		return err
	}
	for from := int(m.First); from < int(m.Pool().End()); from += snapshotBatch {
		if err := r.nodes(from, min(from+snapshotBatch, int(m.Pool().End()))); err != nil {
			return err
		}
	}
	if err := r.hash(durAPIKeys, func(id, rec string) (snapshot.Record, error) {
		k, err := decodeAPIKey(id, rec)
		return snapshot.Record{Key: &k}, err
	}, func(a, b snapshot.Record) int { return strings.Compare(a.Key.ID, b.Key.ID) }); err != nil {
		return err
	}
	if err := r.hash(durUsers, func(name, rec string) (snapshot.Record, error) {
		u, err := decodeUser(name, rec)
		return snapshot.Record{User: &u}, err
	}, func(a, b snapshot.Record) int { return strings.Compare(a.User.Name, b.User.Name) }); err != nil {
		return err
	}
	if err := r.hash(durAllow, func(field, rec string) (snapshot.Record, error) {
		e, err := decodeAllow(field, rec)
		return snapshot.Record{Allow: &e}, err
	}, func(a, b snapshot.Record) int { return a.Allow.Prefix.Compare(b.Allow.Prefix) }); err != nil {
		return err
	}
	if err := r.audit(); err != nil {
		return err
	}
	return r.history()
}

// decodeAllow decodes the allow-list entry of field (its masked prefix).
func decodeAllow(field, rec string) (allowlist.Entry, error) {
	p, err := netip.ParsePrefix(field)
	if err != nil || p != p.Masked() {
		return allowlist.Entry{}, fmt.Errorf("redis: malformed allow entry %q: not a masked prefix", field)
	}
	var r allowRecord
	if err := decodeRecord("allow entry", field, rec, &r); err != nil {
		return allowlist.Entry{}, err
	}
	return allowlist.Entry{Prefix: p, Note: r.Note, CreatedBy: r.CreatedBy, CreatedAt: fromMs(r.CreatedAt)}, nil
}

// snapReader reads the copy cp of a snapshot.
type snapReader struct {
	s    *Store
	ctx  context.Context
	cp   []string
	emit func(snapshot.Record) error
}

// keep renews the copy's lapse time, and fails when it has lapsed already.
func (r *snapReader) keep() error {
	v, err := r.s.run(r.ctx, scriptSnapKeep, r.cp, false, snapshotTTL.Milliseconds())
	if err != nil {
		return wrap("read snapshot", err)
	}
	if v != int64(1) {
		return errors.New("redis: read snapshot: the copy lapsed while it was read (emit took too long)")
	}
	return nil
}

func (r *snapReader) meta() (snapshot.Meta, error) {
	var gen, head *goredis.SliceCmd
	_, err := r.s.client.Pipelined(r.ctx, func(p goredis.Pipeliner) error {
		gen = p.HMGet(r.ctx, r.cp[0], "gen", "gen:number", "gen:origin", "gen:at", "fence", "nodes", "first", "layout")
		head = p.HMGet(r.ctx, r.cp[durAuditHead], "seq", "hash")
		return nil
	})
	if err != nil {
		return snapshot.Meta{}, fmt.Errorf("redis: read snapshot: %w", err)
	}
	a, h := gen.Val(), head.Val()
	bad := func(err error) (snapshot.Meta, error) {
		return snapshot.Meta{}, fmt.Errorf("redis: read snapshot: malformed meta %v %v: %w", a, h, err)
	}
	var m snapshot.Meta
	if m.Generation, err = generationReply(a[:4]); err != nil {
		return bad(err)
	}
	if m.Fence, err = optionalUint(a[4]); err != nil {
		return bad(err)
	}
	nodes, err := optionalUint(a[5])
	if err != nil {
		return bad(err)
	}
	m.Nodes = int(nodes)
	first, err := optionalUint(a[6])
	if err != nil {
		return bad(err)
	}
	m.First, m.Layout = idkeeper.NodeID(first), idkeeper.DefaultLayout
	if l, ok := a[7].(string); ok {
		if m.Layout, err = idkeeper.ParseLayout(l); err != nil {
			return bad(err)
		}
	}
	if m.AuditSeq, err = optionalUint(h[0]); err != nil {
		return bad(err)
	}
	m.AuditHash, _ = h[1].(string)
	return m, nil
}

// nodes emits the node records from..to-1.
func (r *snapReader) nodes(from, to int) error {
	if err := r.keep(); err != nil {
		return err
	}
	v, err := r.s.run(r.ctx, scriptSnapNodes, r.cp[:len(r.s.keys.lease)], false, from, to)
	if err != nil {
		return wrap("read snapshot", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 6*(to-from) {
		return fmt.Errorf("redis: read snapshot: unexpected reply for nodes %d..%d", from, to-1)
	}
	for i := range to - from {
		f := a[6*i : 6*i+6]
		id := from + i
		st := idkeeper.NodeState{NodeID: idkeeper.NodeID(id)}
		if rec, ok := f[0].(string); ok {
			l, err := parseLease(strconv.Itoa(id), rec)
			if err != nil {
				return err
			}
			st.Lease = &l
		}
		for j, t := range []*time.Time{&st.Watermark, &st.Floor, &st.QuarantinedUntil} {
			if *t, err = optionalTime(f[1+j]); err != nil {
				return fmt.Errorf("redis: read snapshot: node %d: %w", id, err)
			}
		}
		if st.LastToken, err = optionalUint(f[4]); err != nil {
			return fmt.Errorf("redis: read snapshot: node %d: %w", id, err)
		}
		st.Restorable = f[5] == int64(1)
		if err := r.emit(snapshot.Record{Node: &st}); err != nil {
			return err
		}
	}
	return nil
}

// hash emits the records of the copy's hash durableKeys[i], decoded by dec and
// sorted with compare.
func (r *snapReader) hash(i int, dec func(field, rec string) (snapshot.Record, error),
	compare func(a, b snapshot.Record) int) error {
	if err := r.keep(); err != nil {
		return err
	}
	m, err := r.s.client.HGetAll(r.ctx, r.cp[i]).Result()
	if err != nil {
		return fmt.Errorf("redis: read snapshot: %w", err)
	}
	recs := make([]snapshot.Record, 0, len(m))
	for f, v := range m {
		rec, err := dec(f, v)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
	}
	slices.SortFunc(recs, compare)
	for _, rec := range recs {
		if err := r.emit(rec); err != nil {
			return err
		}
	}
	return nil
}

// audit emits the audit entries of the copy in Seq order, snapshotBatch at a time.
func (r *snapReader) audit() error {
	keys := []string{r.cp[durAuditSeq], r.cp[durAudit]}
	lo := "-inf"
	for {
		if err := r.keep(); err != nil {
			return err
		}
		v, err := r.s.run(r.ctx, scriptAuditRange, keys, false, lo, "+inf", snapshotBatch, "0")
		if err != nil {
			return wrap("read snapshot", err)
		}
		a, _ := v.([]any)
		if len(a) != 2 {
			return fmt.Errorf("redis: read snapshot: audit entries: reply %v", v)
		}
		seqs, _ := a[0].([]any)
		recs, _ := a[1].([]any)
		if len(seqs) != len(recs) {
			return fmt.Errorf("redis: read snapshot: %d audit seqs, %d records", len(seqs), len(recs))
		}
		for i := range seqs {
			member, _ := seqs[i].(string)
			rec, ok := recs[i].(string)
			if !ok {
				return fmt.Errorf("redis: read snapshot: malformed audit log: entry %q is indexed but missing", member)
			}
			e, err := decodeAudit(member, rec)
			if err != nil {
				return err
			}
			if err := r.emit(snapshot.Record{Audit: &e}); err != nil {
				return err
			}
			lo = "(" + member
		}
		if len(seqs) < snapshotBatch {
			return nil
		}
	}
}
