package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"

	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

var _ snapshot.Store = (*Store)(nil)

// snapshotBuckets hold the durable state a snapshot replaces: LoadSnapshot
// deletes every one of them (the sessions with them) and puts in their place those
// it staged.
// The meta bucket is not among them: LoadSnapshot rewrites its keys one by one,
// keeping "version". locks, skew and the idempotency buckets are left alone.
var snapshotBuckets = [][]byte{bucketNodes, bucketLeases, bucketRequesters, bucketKeyHeld, bucketExpiry,
	bucketReady, bucketCooling, bucketQuarantine, bucketAPIKeys,
	bucketUsers, bucketSessions, bucketUserSessions, bucketAllow, bucketAudit, bucketHistory, bucketHistoryEnded,
	bucketKeyCool}

// snapshotCtxEvery is how many records a snapshot emits between two
// checks of its context.
const snapshotCtxEvery = leasetx.CtxEvery

// ReadSnapshot implements snapshot.Store in one read transaction: the
// snapshot is one consistent view of the file, whatever writes while emit runs.
// The transaction stays open until the last record is emitted; bbolt's writers
// go on meanwhile (they wait for it only when the file must grow its memory map).
func (s *Store) ReadSnapshot(ctx context.Context, meta func(snapshot.Meta) error, emit func(snapshot.Record) error) error {
	var cbErr error // an error of meta or emit, returned as it is
	call := func(err error) error {
		cbErr = err
		return err
	}
	n := 0
	out := func(rec snapshot.Record) error {
		if n++; n%snapshotCtxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return call(err)
			}
		}
		if err := emit(rec); err != nil {
			return call(err)
		}
		return nil
	}
	err := s.view(ctx, func(t *txn) error {
		g, ok, err := t.generation()
		if err != nil {
			return err
		}
		if !ok {
			return idkeeper.ErrNotInitialised
		}
		seq, hash, err := auditHead(t)
		if err != nil {
			return err
		}
		pool, err := t.pool()
		if err != nil {
			return err
		}
		m := snapshot.Meta{Generation: g, Fence: t.fence, Nodes: pool.Nodes, First: pool.First, Layout: pool.Layout,
			AuditSeq: seq, AuditHash: hash}
		if err := meta(m); err != nil {
			return call(err)
		}
		for i := t.first; i < t.end(); i++ { // uint64: a pool may end at node 2^32−1
			id := uint32(i)
			r, err := t.node(id)
			if err != nil {
				return err
			}
			st := r.state(id)
			if v := t.leases.Get(nodeKey(id)); v != nil {
				rec, err := decodeLease(v)
				if err != nil {
					return err
				}
				l, err := rec.On(id)
				if err != nil {
					return err
				}
				st.Lease = &l
			}
			if err := out(snapshot.Record{Node: &st}); err != nil {
				return err
			}
		}
		err = t.tx.Bucket(bucketAPIKeys).ForEach(func(k, v []byte) error {
			key, err := decodeAPIKey(string(k), v)
			if err != nil {
				return err
			}
			return out(snapshot.Record{Key: &key})
		})
		if err != nil {
			return err
		}
		if err := forEach(t, bucketUsers, func(k, v []byte) error {
			u, err := decodeUser(string(k), v)
			if err != nil {
				return err
			}
			return out(snapshot.Record{User: &u})
		}); err != nil {
			return err
		}
		if err := forEach(t, bucketAllow, func(k, v []byte) error {
			e, err := decodeAllow(k, v)
			if err != nil {
				return err
			}
			return out(snapshot.Record{Allow: &e})
		}); err != nil {
			return err
		}
		if err := forEach(t, bucketAudit, func(k, v []byte) error {
			e, err := decodeAudit(k, v)
			if err != nil {
				return err
			}
			return out(snapshot.Record{Audit: &e})
		}); err != nil {
			return err
		}
		return histRecords(t, out)
	})
	if cbErr != nil {
		return cbErr
	}
	return err
}

// forEach calls fn for every key of the named bucket, in key order; a bucket the
// file lacks holds nothing.
func forEach(t *txn, name []byte, fn func(k, v []byte) error) error {
	b := t.tx.Bucket(name)
	if b == nil {
		return nil
	}
	return b.ForEach(fn)
}

// A load's staging bucket (LoadSnapshot): a top-level bucket that nothing but
// LoadSnapshot reads or writes.
//
//	restore-staging  "token" → the load's random ID; "complete" → 1 once every
//	                 record passed the checks and is written
//	  meta           the meta keys the load will write: "generation", "audithead"
//	                 (absent: none), "layout" and the counters ("nodes", "first",
//	                 "fence", "seq", "held", "quarantined", "cooling")
//	  nodes … apikeys, users, allowlist, audit, history, history-ended
//	                 the durable buckets (snapshotBuckets but the sessions), laid
//	                 out as the top-level ones; users, allowlist and audit only when
//	                 a record needs them
var (
	bucketStaging = []byte("restore-staging")
	keyStageToken = []byte("token")
	keyStageDone  = []byte("complete")

	// stagedBuckets are the buckets a load always makes: those of snapshotBuckets
	// that createBuckets makes.
	stagedBuckets = [][]byte{bucketNodes, bucketLeases, bucketRequesters, bucketKeyHeld, bucketExpiry,
		bucketReady, bucketCooling, bucketQuarantine, bucketAPIKeys, bucketHistory, bucketHistoryEnded, bucketKeyCool}
	// stagedMeta are the meta keys a load replaces ("version" stays).
	stagedMeta = [][]byte{keyGeneration, keyAuditHead, keyLayout, keyNodes, keyFirst, keyFence, keySeq, keyHeld, keyQuarantined, keyCooling}
)

const (
	// snapshotBatch and snapshotBatchBytes bound one write transaction of a load:
	// it writes at most snapshotBatch records, and stops at the first that takes
	// the batch to about snapshotBatchBytes.
	snapshotBatch      = 10_000
	snapshotBatchBytes = 4 << 20
)

// LoadSnapshot implements snapshot.Store in bounded write transactions
// and one swap. One load at a time runs (a mutex; bbolt lets one process open the
// file). It first deletes the staging bucket a load that died left behind, and
// makes its own, with meta. It reads src into a batch of at most snapshotBatch
// records (or about snapshotBatchBytes), checking each (snapshot.Checker,
// and the checks of this layout: a requester's leases all of one API key; keys
// within bbolt's limits), and writes each batch in one write transaction into the
// staging bucket, laid out as the live buckets, rebuilding the indexes
// (requesters, key holdings, expiry; every free node filed as ready, cooling or
// quarantined at the store's now when the load began, its free order NodeID
// order). Other writes go on between batches; they never see the staging. When
// src ended with io.EOF and every record passed, one small write transaction
// swaps: it deletes the buckets of the durable state (snapshotBuckets; the admin
// sessions go with them), moves every staged bucket to the top level (Tx.MoveBucket:
// no record is copied), writes the staged meta keys (keeping "version") and
// deletes the staging bucket. Before the swap the live buckets are untouched; on
// any failure the staging bucket is deleted, so the file is as it was. Memory:
// one batch of records and the dirty pages of its transaction, whatever the
// snapshot's size; the file needs room for the old and the new state until the
// swap (bbolt reuses the old state's pages afterwards).
func (s *Store) LoadSnapshot(ctx context.Context, meta snapshot.Meta, src snapshot.Source) error {
	chk, err := snapshot.NewChecker(meta)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	// Checked first, to spare staging a snapshot that cannot load; the swap checks
	// again, in its own transaction.
	err = s.view(ctx, func(t *txn) error {
		live, err := t.pool()
		if err == nil && live.Nodes > 0 && !live.SameSpace(meta.Pool()) {
			err = idkeeper.PoolMismatch(live, meta.Pool())
		}
		return err
	})
	if err != nil {
		return err
	}
	st := &staging{s: s, token: []byte(idkeeper.NewGenerationID()), now: protocol.Millis(s.clock()).UnixMilli(),
		full: snapshotBatch}
	if s.loadBatch > 0 {
		st.full = s.loadBatch
	}
	finish := func() error {
		if err := st.flush(true); err != nil {
			return err
		}
		return ctx.Err()
	}
	records, err := leasetx.Load(ctx, chk, src, leasetx.Staging{Start: func() error { return st.start(meta) }, Add: st.add,
		Finish: finish, Swap: st.swap, Drop: st.drop})
	if err != nil {
		return err
	}
	s.log.Warn("bolt: loaded a snapshot: the store's whole durable state was replaced",
		"generation", meta.Generation.ID, "number", meta.Generation.Number, "pool", meta.Pool().String(), "fence", meta.Fence,
		"records", records)
	return nil
}

// staging is one load: its token, its instant and its batch of records.
type staging struct {
	s     *Store
	token []byte
	now   int64 // Unix ms: the free nodes are filed at this instant
	batch []snapshot.Record
	size  int // about the bytes of batch
	full  int // records of a full batch
}

// start deletes a stale staging bucket and makes the load's own, with the
// buckets every load makes and meta.
func (st *staging) start(m snapshot.Meta) error {
	stale := false
	err := st.s.db.Update(func(tx *bbolt.Tx) error {
		switch err := tx.DeleteBucket(bucketStaging); {
		case err == nil:
			stale = true
		case !errors.Is(err, berrors.ErrBucketNotFound):
			return err
		}
		b, err := tx.CreateBucket(bucketStaging)
		if err != nil {
			return err
		}
		if err := b.Put(keyStageToken, st.token); err != nil {
			return err
		}
		for _, name := range append([][]byte{bucketMeta}, stagedBuckets...) {
			if _, err := b.CreateBucket(name); err != nil {
				return err
			}
		}
		t := newTxn(tx, b.Bucket, st.now)
		if err := t.meta.Put(keyGeneration, encodeGeneration(m.Generation)); err != nil {
			return err
		}
		if m.AuditSeq > 0 {
			if err := t.meta.Put(keyAuditHead, encodeAuditHead(m.AuditSeq, m.AuditHash)); err != nil {
				return err
			}
		}
		if err := t.meta.Put(keyLayout, []byte(idkeeper.FormatLayout(m.Pool().LayoutOrDefault()))); err != nil {
			return err
		}
		t.counters = counters{nodeCount: uint64(m.Nodes), first: uint64(m.First), fence: m.Fence, seq: uint64(m.Nodes)}
		return t.putCounters()
	})
	if err != nil {
		return wrap(err)
	}
	if stale {
		st.s.log.Warn("bolt: deleted the staging bucket of a snapshot load that did not finish")
	}
	return nil
}

// bucket returns the load's staging bucket, or an error when the file holds none
// or another's.
func (st *staging) bucket(tx *bbolt.Tx) (*bbolt.Bucket, error) {
	b := tx.Bucket(bucketStaging)
	if b == nil || !bytes.Equal(b.Get(keyStageToken), st.token) {
		return nil, errors.New("load snapshot: the staging bucket of the load was deleted or replaced")
	}
	return b, nil
}

// add appends rec to the batch, and writes the batch when it is full.
func (st *staging) add(rec snapshot.Record) error {
	st.batch = append(st.batch, rec)
	st.size += recordSize(rec)
	if len(st.batch) < st.full && st.size < snapshotBatchBytes {
		return nil
	}
	return st.flush(false)
}

// recordSize is about the bytes rec takes in memory.
func recordSize(rec snapshot.Record) int {
	n := 256
	switch {
	case rec.Node != nil && rec.Node.Lease != nil:
		l := rec.Node.Lease
		n += len(l.KeyID) + len(l.Requester.Key())
	case rec.Key != nil:
		n += len(rec.Key.ID) + len(rec.Key.Hash) + len(rec.Key.Description) + len(rec.Key.CreatedBy)
	case rec.User != nil:
		n += len(rec.User.Name) + len(rec.User.PasswordHash) + len(rec.User.CreatedBy) + len(rec.User.Webhook)
	case rec.Allow != nil:
		n += len(rec.Allow.Note) + len(rec.Allow.CreatedBy)
	case rec.Audit != nil:
		a := rec.Audit
		n += len(a.Actor) + len(a.Action) + len(a.Target) + len(a.RemoteIP) + len(a.Detail) + len(a.Prev) + len(a.Hash)
	case rec.History != nil:
		h := rec.History
		n += len(h.Requester.MachineID) + len(h.Requester.Instance) + len(h.KeyID) + len(h.Client.Host)
		for k, v := range h.Client.Labels {
			n += len(k) + len(v) + 32
		}
	}
	return n
}

// flush writes the batch into the staging bucket in one write transaction; last
// marks the staging complete with it.
func (st *staging) flush(last bool) error {
	if len(st.batch) == 0 && !last {
		return nil
	}
	err := st.s.db.Update(func(tx *bbolt.Tx) error {
		b, err := st.bucket(tx)
		if err != nil {
			return err
		}
		t := newTxn(tx, b.Bucket, st.now)
		l := loader{t: t, stage: b}
		for _, rec := range st.batch {
			if err := l.load(rec); err != nil {
				return err
			}
		}
		if err := t.flush(); err != nil {
			return err
		}
		if last {
			return b.Put(keyStageDone, []byte{1})
		}
		return nil
	})
	clear(st.batch)
	st.batch, st.size = st.batch[:0], 0
	return wrap(err)
}

// swap replaces the durable state with the complete staging, in one write
// transaction; when the live store holds a pool with another First or layout than
// the staged one, it returns idkeeper.PoolMismatch and changes nothing.
func (st *staging) swap() error {
	return wrap(st.s.db.Update(func(tx *bbolt.Tx) error {
		b, err := st.bucket(tx)
		if err != nil {
			return err
		}
		if b.Get(keyStageDone) == nil {
			return errors.New("load snapshot: the staging is not complete")
		}
		live, err := st.s.begin(tx).pool()
		if err != nil {
			return err
		}
		staged, err := newTxn(tx, b.Bucket, st.now).pool()
		if err != nil {
			return err
		}
		if live.Nodes > 0 && !live.SameSpace(staged) {
			return idkeeper.PoolMismatch(live, staged)
		}
		stagedM := b.Bucket(bucketMeta)
		meta := tx.Bucket(bucketMeta)
		for _, k := range stagedMeta {
			if v := stagedM.Get(k); v == nil {
				err = meta.Delete(k)
			} else {
				err = meta.Put(k, bytes.Clone(v))
			}
			if err != nil {
				return err
			}
		}
		for _, name := range snapshotBuckets {
			if err := tx.DeleteBucket(name); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
				return err
			}
			// The sessions are never staged: they stay deleted.
			if err := tx.MoveBucket(name, b, nil); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
				return err
			}
		}
		return tx.DeleteBucket(bucketStaging)
	}))
}

// drop deletes the load's staging bucket after a failure, in a transaction of its
// own; should that fail too, the next load deletes it.
func (st *staging) drop() {
	err := st.s.db.Update(func(tx *bbolt.Tx) error {
		if _, err := st.bucket(tx); err != nil {
			return nil // not the load's any more
		}
		return tx.DeleteBucket(bucketStaging)
	})
	if err != nil {
		st.s.log.Warn("bolt: could not delete the staging bucket of a failed snapshot load; the next load deletes it",
			"err", err)
	}
}

// loader writes the records of a snapshot into the staging bucket stage, within
// one transaction t on its buckets.
type loader struct {
	t                   *txn
	stage               *bbolt.Bucket
	users, allow, audit *bbolt.Bucket // made by the first record that needs them
}

func (l *loader) load(rec snapshot.Record) error {
	var err error
	switch {
	case rec.Node != nil:
		return l.node(rec.Node)
	case rec.Key != nil:
		k := rec.Key
		if len(k.ID) > bbolt.MaxKeySize {
			return protocol.Invalidf("snapshot", "API key ID of %d bytes: this store keeps at most %d", len(k.ID), bbolt.MaxKeySize)
		}
		v, err := json.Marshal(apiKeyRecOf(*k))
		if err != nil {
			return err
		}
		return l.stage.Bucket(bucketAPIKeys).Put([]byte(k.ID), v)
	case rec.User != nil:
		u := rec.User
		if len(u.Name) > bbolt.MaxKeySize {
			return protocol.Invalidf("snapshot", "user name of %d bytes: this store keeps at most %d", len(u.Name), bbolt.MaxKeySize)
		}
		if l.users == nil {
			if l.users, err = l.stage.CreateBucketIfNotExists(bucketUsers); err != nil {
				return err
			}
		}
		return l.users.Put([]byte(u.Name), encodeUser(*u))
	case rec.Allow != nil:
		if l.allow == nil {
			if l.allow, err = l.stage.CreateBucketIfNotExists(bucketAllow); err != nil {
				return err
			}
		}
		return l.allow.Put(allowKey(rec.Allow.Prefix), encodeAllow(*rec.Allow))
	case rec.Audit != nil:
		if l.audit == nil {
			if l.audit, err = l.stage.CreateBucketIfNotExists(bucketAudit); err != nil {
				return err
			}
		}
		return l.audit.Put(auditKey(rec.Audit.Seq), encodeAudit(*rec.Audit))
	case rec.History != nil:
		return l.history(rec.History)
	}
	return nil
}

// node writes one node: a held one with its lease and index entries, a free one
// filed as its state calls for at now, its free sequence its place in the pool + 1
// (NodeID − First + 1).
func (l *loader) node(n *idkeeper.NodeState) error {
	t, id := l.t, uint32(n.NodeID)
	r := nodeRec{watermark: timeMs(n.Watermark), quarUntil: timeMs(n.QuarantinedUntil), floor: timeMs(n.Floor),
		lastToken: n.LastToken, restorable: n.Restorable}
	if n.Lease == nil {
		r.freeSeq = uint64(id) - t.first + 1
		return t.place(id, &r)
	}
	ls := n.Lease
	if len(ls.KeyID)+1 > bbolt.MaxKeySize {
		return protocol.Invalidf("snapshot", "the lease of node %d names an API key ID of %d bytes: this store keeps at most %d",
			id, len(ls.KeyID), bbolt.MaxKeySize-1)
	}
	lr := leaseRec{NotBefore: timeMs(ls.NotBefore), ExpiresAt: timeMs(ls.ExpiresAt), GrantedAt: timeMs(ls.GrantedAt),
		RenewedAt: timeMs(ls.RenewedAt), Token: ls.FencingToken, Requester: ls.Requester.Key(), KeyID: ls.KeyID}
	if len(lr.Requester) > math.MaxUint16 {
		return protocol.Invalidf("snapshot", "the lease of node %d has a requester key of %d bytes", id, len(lr.Requester))
	}
	r.place = placeHeld
	if err := t.putNode(id, r); err != nil {
		return err
	}
	if err := t.leases.Put(nodeKey(id), encodeLease(lr)); err != nil {
		return err
	}
	if err := t.expiry.Put(timeNodeKey(lr.ExpiresAt, id), nil); err != nil {
		return err
	}
	t.held++
	if err := t.keyHolds(lr.KeyID, 1); err != nil {
		return err
	}
	ids, err := t.heldBy(lr.Requester)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		other, err := t.lease(ids[0])
		if err != nil {
			return err
		}
		if other.KeyID != lr.KeyID {
			return protocol.Invalidf("snapshot", "requester %s holds node %d with API key %q and node %d with %q: "+
				"a requester's leases belong to one key", ls.Requester, ids[0], other.KeyID, id, lr.KeyID)
		}
	}
	// Nodes come in NodeID order, so appending keeps the entry sorted.
	return t.reqs.Put([]byte(lr.Requester), encodeIDs(append(ids, id)))
}
