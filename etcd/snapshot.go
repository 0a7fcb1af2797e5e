package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/histrec"
	"github.com/idkeeper/idkeeper/internal/leasetx"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// Snapshots (snapshot.Store); the package doc ("Snapshots") describes
// the design.

var _ snapshot.Store = (*Store)(nil)

const (
	// snapshotPage is the most keys one range read of ReadSnapshot or of the
	// swap's reads asks for.
	snapshotPage = 1000
	// stageBatch is the most keys one staging transaction writes: under etcd's
	// default --max-txn-ops (128).
	stageBatch = 100
	// swapTries bounds the swaps a load tries while other writers change the
	// durable keys under it.
	swapTries = 20
)

// durableRanges are the key prefixes (relative to Options.Prefix) of the durable
// state a snapshot replaces, the admin sessions included (a load deletes them);
// durableKeys the single keys. Job locks, skew observations, alert state,
// idempotency records and staging are not among them: a load leaves them alone.
var (
	durableRanges = []string{"node/", "req/", "keyheld/", "keycool/", "expiry/", "ready/", "cooling/", "quar/", "hist/",
		"histend/", "apikey/", "user/", "allow/", "audit/", "session/", "usersession/", "sessionseen/", "sessionexp/"}
	durableKeys = []string{"meta", "audithead"}
)

// readRange calls fn for every key of [from, end) at revision rev (0: the
// newest), snapshotPage keys a read; it returns the revision it read at.
func (s *Store) readRange(ctx context.Context, op, from, end string, rev int64, keysOnly bool, fn func(key string, val []byte) error) (int64, error) {
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(snapshotPage)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		cctx, cancel := s.bound(ctx)
		resp, err := s.c.Get(cctx, from, opts...)
		cancel()
		if err != nil {
			return rev, wrap(op, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, e := range resp.Kvs {
			if err := fn(string(e.Key), e.Value); err != nil {
				return rev, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// ReadSnapshot implements snapshot.Store from one consistent view: the
// meta record is read first, and every other key at that read's revision
// (clientv3.WithRev), in ranges of snapshotPage keys, so no write made meanwhile
// shows. Options.Timeout bounds each read, not the whole snapshot. etcd keeps that revision until it compacts: a read that outlasts the
// compaction retention (the package doc suggests 5 minutes) fails with
// etcd's "required revision has been compacted", and can be tried again.
func (s *Store) ReadSnapshot(ctx context.Context, meta func(snapshot.Meta) error, emit func(snapshot.Record) error) error {
	var cbErr error // an error of meta or emit, returned as it is
	out := func(rec snapshot.Record) error {
		if err := emit(rec); err != nil {
			cbErr = err
			return err
		}
		return nil
	}
	err := s.readSnapshot(ctx, meta, out, &cbErr)
	if cbErr != nil {
		return cbErr
	}
	return err
}

func (s *Store) readSnapshot(ctx context.Context, metaFn func(snapshot.Meta) error, out func(snapshot.Record) error, cbErr *error) error {
	k := s.k
	tctx, cancel := s.bound(ctx)
	resp, err := s.c.Txn(tctx).Then(clientv3.OpGet(k.meta), clientv3.OpGet(k.auditHead)).Commit()
	cancel()
	if err != nil {
		return wrap("read snapshot", err)
	}
	rev := resp.Header.Revision
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return idkeeper.ErrNotInitialised
	}
	m, err := decodeMeta(kvs[0].Value)
	if err != nil {
		return fmt.Errorf("etcd: read snapshot: %w", err)
	}
	if m.Generation == nil {
		return idkeeper.ErrNotInitialised
	}
	var head headRec
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
		if head, err = decodeHead(kvs[0].Value); err != nil {
			return err
		}
	}
	pool, err := m.pool()
	if err != nil {
		return err
	}
	sm := snapshot.Meta{Generation: m.Generation.generation(), Fence: m.Fence, Nodes: pool.Nodes,
		First: pool.First, Layout: pool.Layout, AuditSeq: head.Seq, AuditHash: head.Hash}
	if err := metaFn(sm); err != nil {
		*cbErr = err
		return err
	}
	next := m.First // uint64: a pool may end at node 2^32−1
	step := func(what, prefix string, fn func(key string, val []byte) error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := s.readRange(ctx, "read snapshot: "+what, prefix, clientv3.GetPrefixRangeEnd(prefix), rev, false, fn)
		return err
	}
	err = step("nodes", k.node, func(key string, val []byte) error {
		id, err := parseID(strings.TrimPrefix(key, k.node))
		if err != nil {
			return fmt.Errorf("etcd: read snapshot: %w", err)
		}
		if uint64(id) != next || uint64(id) >= m.end() {
			return fmt.Errorf("etcd: read snapshot: node record %d where node %d of %d..%d was due", id, next, m.First, m.end()-1)
		}
		next++
		r, err := decodeNode(val)
		if err != nil {
			return fmt.Errorf("etcd: read snapshot: node %d: %w", id, err)
		}
		st, err := r.state(id)
		if err != nil {
			return fmt.Errorf("etcd: read snapshot: node %d: %w", id, err)
		}
		return out(snapshot.Record{Node: &st})
	})
	if err != nil {
		return err
	}
	if next != m.end() {
		return fmt.Errorf("etcd: read snapshot: %d node records for a pool of %d", next-m.First, m.Nodes)
	}
	if err := step("api keys", k.apiKey, func(key string, val []byte) error {
		a, err := decodeAPIKey(strings.TrimPrefix(key, k.apiKey), val)
		if err != nil {
			return err
		}
		return out(snapshot.Record{Key: &a})
	}); err != nil {
		return err
	}
	if err := step("users", k.user, func(key string, val []byte) error {
		u, err := decodeUser(strings.TrimPrefix(key, k.user), val)
		if err != nil {
			return err
		}
		return out(snapshot.Record{User: &u})
	}); err != nil {
		return err
	}
	if err := step("allow-list", k.allow, func(key string, val []byte) error {
		a, err := decodeAllow(val)
		if err != nil {
			return err
		}
		return out(snapshot.Record{Allow: &a})
	}); err != nil {
		return err
	}
	if err := step("audit log", k.audit, func(key string, val []byte) error {
		e, err := s.decodeAudit(key, val)
		if err != nil {
			return err
		}
		return out(snapshot.Record{Audit: &e})
	}); err != nil {
		return err
	}
	return step("history", k.hist, func(key string, val []byte) error {
		h, err := k.decodeHist(key, val)
		if err != nil {
			return fmt.Errorf("etcd: read snapshot: %w", err)
		}
		return out(snapshot.Record{History: &h})
	})
}

// LoadSnapshot implements snapshot.Store: stage, check, swap (the
// package doc, "Snapshots").
func (s *Store) LoadSnapshot(ctx context.Context, sm snapshot.Meta, src snapshot.Source) error {
	chk, err := snapshot.NewChecker(sm)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.loads.Lock()
	defer s.loads.Unlock()
	l := &loader{s: s, ctx: ctx, id: idkeeper.NewGenerationID(), now: s.nowMs(), batch: stageBatch,
		reqs: map[string]holding{}, keyHeld: map[string]int{}}
	if s.loadBatch > 0 {
		l.batch = s.loadBatch
	}
	l.stage = s.k.staging + l.id + "/"
	l.meta = meta{Version: schemaVersion, Generation: genRecOf(sm.Generation), Nodes: uint64(sm.Nodes),
		First: uint64(sm.First), Layout: idkeeper.FormatLayout(sm.Pool().LayoutOrDefault()),
		Fence: sm.Fence, Seq: uint64(sm.Nodes), ReadyFrom: math.MaxUint64}
	// Checked first, to spare staging a snapshot that cannot load; the swap checks
	// again, in its transaction.
	var rev int64
	if err := l.livePool(ctx, sm, &rev); err != nil {
		return err
	}
	finish := func() error {
		if err := l.finish(); err != nil {
			return err
		}
		if l.meta.ReadyFrom == math.MaxUint64 {
			l.meta.ReadyFrom = l.meta.Seq + 1
		}
		return nil
	}
	records, err := leasetx.Load(ctx, chk, src, leasetx.Staging{Start: l.start, Add: l.add, Finish: finish,
		Swap: func() error { return l.swap(sm) }, Drop: l.drop})
	if err != nil {
		return err
	}
	s.readyFrom.Store(l.meta.ReadyFrom)
	s.log.Warn("etcd: loaded a snapshot: the store's whole durable state was replaced",
		"generation", sm.Generation.ID, "number", sm.Generation.Number, "pool", sm.Pool().String(), "fence", sm.Fence,
		"records", records, "prefix", s.k.prefix)
	return nil
}

// loader is one LoadSnapshot: its staging prefix, the marker that proves the
// staging is its own, and what it has staged.
type loader struct {
	s         *Store
	ctx       context.Context
	id        string
	stage     string // staging/<id>/
	markerRev int64  // the CreateRevision of the staging marker
	now       int64
	batch     int
	pending   []clientv3.Op
	staged    int // keys written under the staging prefix, the marker excluded
	meta      meta
	reqs      map[string]holding // requester key -> its leases
	keyHeld   map[string]int     // API key ID -> node IDs its leases hold
}

func (l *loader) marker() string { return l.stage + "~load" }

// ours is the condition of every staging write and of the swap: the staging
// marker is the one this load created (another load deletes stale staging).
func (l *loader) ours() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.marker()), "=", l.markerRev)
}

// start deletes the staging of loads that did not finish, then creates this
// one's marker.
func (l *loader) start() error {
	ctx, cancel := l.s.bound(l.ctx)
	defer cancel()
	k := l.s.k
	del, err := l.s.c.Delete(ctx, k.staging, clientv3.WithPrefix())
	if err != nil {
		return wrap("load snapshot", err)
	}
	if del.Deleted > 0 {
		l.s.log.Warn("etcd: deleted the staging keys of a snapshot load that did not finish", "keys", del.Deleted,
			"prefix", k.prefix)
	}
	put, err := l.s.c.Put(ctx, l.marker(), strconv.FormatInt(l.now, 10))
	if err != nil {
		return wrap("load snapshot", err)
	}
	l.markerRev = put.Header.Revision
	return nil
}

// drop deletes the load's staging keys after a failure; should that fail too,
// the next load deletes them.
func (l *loader) drop() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), 30*time.Second)
	defer cancel()
	_, err := l.s.c.Txn(ctx).If(l.ours()).Then(clientv3.OpDelete(l.stage, clientv3.WithPrefix())).Commit()
	if err != nil {
		l.s.log.Warn("etcd: could not delete the staging keys of a failed snapshot load; the next load deletes them",
			"err", err, "prefix", l.s.k.prefix)
	}
}

// put stages val for the live key key (a key under Options.Prefix).
func (l *loader) put(key, val string) error {
	l.pending = append(l.pending, clientv3.OpPut(l.stage+strings.TrimPrefix(key, l.s.k.prefix), val))
	if len(l.pending) >= l.batch {
		return l.flush()
	}
	return nil
}

// flush writes the pending keys in one transaction conditioned on the marker.
func (l *loader) flush() error {
	if len(l.pending) == 0 {
		return nil
	}
	ctx, cancel := l.s.bound(l.ctx)
	defer cancel()
	resp, err := l.s.c.Txn(ctx).If(l.ours()).Then(l.pending...).Commit()
	if err != nil {
		return wrap("load snapshot", err)
	}
	if !resp.Succeeded {
		return errors.New("etcd: load snapshot: the staging keys of the load were deleted (by another load?)")
	}
	l.staged += len(l.pending)
	clear(l.pending)
	l.pending = l.pending[:0]
	return nil
}

// putNode stages a node's record and its index entry, as txn.putNode writes them.
func (l *loader) putNode(id uint32, r nodeRec) error {
	v := r.encode()
	if err := l.put(l.s.k.nodeKey(id), v); err != nil {
		return err
	}
	return l.put(l.s.k.entry(id, r), v)
}

// add stages one checked record.
func (l *loader) add(rec snapshot.Record) error {
	k := l.s.k
	switch {
	case rec.Node != nil:
		return l.node(rec.Node)
	case rec.Key != nil:
		v, err := encodeAPIKey(*rec.Key)
		if err != nil {
			return err
		}
		return l.put(k.apiKey+rec.Key.ID, v)
	case rec.User != nil:
		v, err := encodeUser(*rec.User)
		if err != nil {
			return err
		}
		return l.put(k.user+rec.User.Name, v)
	case rec.Allow != nil:
		v, err := encodeAllow(*rec.Allow)
		if err != nil {
			return err
		}
		return l.put(l.s.allowKeyOf(rec.Allow.Prefix), v)
	case rec.Audit != nil:
		v, err := encodeAudit(*rec.Audit)
		if err != nil {
			return err
		}
		return l.put(k.auditKey(rec.Audit.Seq), v)
	case rec.History != nil:
		h := rec.History
		r := histrec.Of(*h)
		v, err := jsonString(r)
		if err != nil {
			return err
		}
		node := uint32(h.NodeID)
		if r.End != "" {
			if err := l.put(k.histEndKey(r.EndedAt, node, h.Token), ""); err != nil {
				return err
			}
		}
		return l.put(k.histKey(node, h.Token), v)
	}
	return nil
}

// node stages one node: a held one with its lease, its expiry entry, and its
// share of the requester index and key count (written by finish); a free one
// filed as its state calls for at the load's now, its free sequence its place in
// the pool + 1 (NodeID − First + 1).
func (l *loader) node(n *idkeeper.NodeState) error {
	id := uint32(n.NodeID)
	r := nodeRec{watermark: timeMs(n.Watermark), quarUntil: timeMs(n.QuarantinedUntil), floor: timeMs(n.Floor),
		lastToken: n.LastToken, restorable: n.Restorable}
	if n.Lease == nil {
		r.freeSeq = uint64(id) - l.meta.First + 1
		switch {
		case r.quarUntil > l.now:
			r.place = placeQuarantine
			l.meta.Quarantined++
		case r.fenced() < l.now:
			r.place = placeReady
			l.meta.ReadyFrom = min(l.meta.ReadyFrom, r.freeSeq)
		default:
			r.place = placeCooling
			l.meta.Cooling++
		}
		return l.putNode(id, r)
	}
	ls := n.Lease
	lr := leaseRec{NotBefore: timeMs(ls.NotBefore), ExpiresAt: timeMs(ls.ExpiresAt), GrantedAt: timeMs(ls.GrantedAt),
		RenewedAt: timeMs(ls.RenewedAt), Token: ls.FencingToken, Requester: ls.Requester.Key(), KeyID: ls.KeyID}
	if len(lr.Requester) > math.MaxUint16 {
		return protocol.Invalidf("snapshot", "the lease of node %d has a requester key of %d bytes", id, len(lr.Requester))
	}
	h, ok := l.reqs[lr.Requester]
	if ok && h.KeyID != lr.KeyID {
		return protocol.Invalidf("snapshot", "requester %s holds node %d with API key %q and node %d with %q: "+
			"a requester's leases belong to one key", ls.Requester, h.IDs[0], h.KeyID, id, lr.KeyID)
	}
	h.KeyID = lr.KeyID
	l.reqs[lr.Requester] = h.With(id, lr.Token)
	l.keyHeld[lr.KeyID]++
	l.meta.Held++
	r.place, r.lease = placeHeld, &lr
	return l.putNode(id, r)
}

// finish stages the requester index and the key counts, and flushes.
func (l *loader) finish() error {
	k := l.s.k
	for req, h := range l.reqs {
		if err := l.put(k.req+req, encodeHolding(h)); err != nil {
			return err
		}
	}
	for key, n := range l.keyHeld {
		if err := l.put(k.keyHeld+key, strconv.Itoa(n)); err != nil {
			return err
		}
	}
	return l.flush()
}

// swap replaces the durable state with the staged one in one transaction: it puts
// every staged key in its live place, deletes every live durable key the
// snapshot does not hold (the admin sessions among them), writes the meta record
// and the audit head, and deletes the staging keys, on the condition that the
// staging is this load's and that no durable key changed since the swap read
// them. When a writer came between, it reads again, up to swapTries times.
func (l *loader) swap(m snapshot.Meta) error {
	ctx, cancel := l.s.bound(l.ctx)
	defer cancel()
	k := l.s.k
	metaVal, err := jsonString(l.meta)
	if err != nil {
		return err
	}
	var puts []clientv3.Op
	newKeys := map[string]bool{k.meta: true}
	_, err = l.s.readRange(ctx, "load snapshot", l.stage, clientv3.GetPrefixRangeEnd(l.stage), 0, false, func(key string, val []byte) error {
		if key == l.marker() {
			return nil
		}
		live := k.prefix + strings.TrimPrefix(key, l.stage)
		newKeys[live] = true
		puts = append(puts, clientv3.OpPut(live, string(val)))
		return nil
	})
	if err != nil {
		return err
	}
	if len(puts) != l.staged {
		return fmt.Errorf("etcd: load snapshot: %d staged keys, %d written (did another load delete them?)", len(puts), l.staged)
	}
	puts = append(puts, clientv3.OpPut(k.meta, metaVal))
	if m.AuditSeq > 0 {
		head, err := jsonString(headRec{Seq: m.AuditSeq, Hash: m.AuditHash})
		if err != nil {
			return err
		}
		puts = append(puts, clientv3.OpPut(k.auditHead, head))
		newKeys[k.auditHead] = true
	}
	puts = append(puts, clientv3.OpDelete(l.stage, clientv3.WithPrefix()))
	for n := 1; ; n++ {
		// The live durable keys at one revision: those the snapshot does not
		// hold are deleted.
		rev, dels := int64(0), []clientv3.Op{}
		// The live pool at rev, which the transaction's comparisons pin: a store
		// holding another ID space refuses the load.
		if err := l.livePool(ctx, m, &rev); err != nil {
			return err
		}
		for _, p := range durableRanges {
			rev, err = l.s.readRange(ctx, "load snapshot", k.prefix+p, clientv3.GetPrefixRangeEnd(k.prefix+p), rev, true,
				func(key string, _ []byte) error {
					if !newKeys[key] {
						dels = append(dels, clientv3.OpDelete(key))
					}
					return nil
				})
			if err != nil {
				return err
			}
		}
		cmps := []clientv3.Cmp{l.ours()}
		for _, p := range durableRanges {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k.prefix+p), "<", rev+1).WithPrefix())
		}
		for _, key := range durableKeys {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k.prefix+key), "<", rev+1))
			if !newKeys[k.prefix+key] {
				dels = append(dels, clientv3.OpDelete(k.prefix+key))
			}
		}
		resp, err := l.s.c.Txn(ctx).If(cmps...).Then(append(dels, puts...)...).
			Else(clientv3.OpGet(l.marker(), clientv3.WithCountOnly())).Commit()
		if err != nil {
			return wrap("load snapshot", err)
		}
		if resp.Succeeded {
			return nil
		}
		if r := resp.Responses[0].GetResponseRange(); r.Count == 0 {
			return errors.New("etcd: load snapshot: the staging keys of the load were deleted (by another load?)")
		}
		if n >= swapTries {
			return fmt.Errorf("etcd: load snapshot: %d swaps in a row lost to other writers", n)
		}
		if err := leasetx.Backoff(ctx, n); err != nil {
			return wrap("load snapshot", err)
		}
	}
}
