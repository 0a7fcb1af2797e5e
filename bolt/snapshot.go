package bolt

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"

	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/idkeeper/idkeeper"
)

var _ idkeeper.SnapshotStore = (*Store)(nil)

// snapshotBuckets hold the durable state a snapshot replaces: LoadSnapshot
// deletes every one of them (the sessions with them) and rebuilds those it needs.
// The meta bucket is not among them: LoadSnapshot rewrites its keys one by one,
// keeping "version". locks, skew and the idempotency buckets are left alone.
var snapshotBuckets = [][]byte{bucketNodes, bucketLeases, bucketRequesters, bucketKeyHeld, bucketExpiry,
	bucketReady, bucketCooling, bucketQuarantine, bucketAPIKeys,
	bucketUsers, bucketSessions, bucketUserSessions, bucketAllow, bucketAudit}

// snapshotCtxEvery is how many records a snapshot reads or writes between two
// checks of its context.
const snapshotCtxEvery = 1024

// ReadSnapshot implements idkeeper.SnapshotStore in one read transaction: the
// snapshot is one consistent view of the file, whatever writes while emit runs.
// The transaction stays open until the last record is emitted; bbolt's writers
// go on meanwhile (they wait for it only when the file must grow its memory map).
func (s *Store) ReadSnapshot(ctx context.Context, meta func(idkeeper.SnapshotMeta) error, emit func(idkeeper.SnapshotRecord) error) error {
	var cbErr error // an error of meta or emit, returned as it is
	call := func(err error) error {
		cbErr = err
		return err
	}
	n := 0
	out := func(rec idkeeper.SnapshotRecord) error {
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
		m := idkeeper.SnapshotMeta{Generation: g, Fence: t.fence, Nodes: int(t.nodeCount), AuditSeq: seq, AuditHash: hash}
		if err := meta(m); err != nil {
			return call(err)
		}
		for id := range uint32(t.nodeCount) {
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
				l, err := rec.lease(id)
				if err != nil {
					return err
				}
				st.Lease = &l
			}
			if err := out(idkeeper.SnapshotRecord{Node: &st}); err != nil {
				return err
			}
		}
		err = t.tx.Bucket(bucketAPIKeys).ForEach(func(k, v []byte) error {
			key, err := decodeAPIKey(string(k), v)
			if err != nil {
				return err
			}
			return out(idkeeper.SnapshotRecord{Key: &key})
		})
		if err != nil {
			return err
		}
		if err := forEach(t, bucketUsers, func(k, v []byte) error {
			u, err := decodeUser(string(k), v)
			if err != nil {
				return err
			}
			return out(idkeeper.SnapshotRecord{User: &u})
		}); err != nil {
			return err
		}
		if err := forEach(t, bucketAllow, func(k, v []byte) error {
			e, err := decodeAllow(k, v)
			if err != nil {
				return err
			}
			return out(idkeeper.SnapshotRecord{Allow: &e})
		}); err != nil {
			return err
		}
		return forEach(t, bucketAudit, func(k, v []byte) error {
			e, err := decodeAudit(k, v)
			if err != nil {
				return err
			}
			return out(idkeeper.SnapshotRecord{Audit: &e})
		})
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

// LoadSnapshot implements idkeeper.SnapshotStore in one write transaction: it
// deletes the buckets of the durable state (snapshotBuckets; the admin sessions go
// with them), then writes meta and every record of src, rebuilding the indexes
// (requesters, key holdings, expiry; every free node filed as ready, cooling or
// quarantined at the store's now, its free order NodeID order), and commits only
// when src ended with io.EOF and every record passed idkeeper.SnapshotChecker and
// the checks of this layout (a requester's leases all of one API key; keys within
// bbolt's limits). On any failure the transaction is rolled back: the file is as
// it was. bbolt keeps the whole transaction in memory until it commits, so a
// snapshot costs about its own size in memory while it loads.
func (s *Store) LoadSnapshot(ctx context.Context, meta idkeeper.SnapshotMeta, src idkeeper.SnapshotSource) error {
	chk, err := idkeeper.NewSnapshotChecker(meta)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var srcErr error // an error of src, returned as it is
	records := 0
	err = wrap(s.db.Update(func(tx *bbolt.Tx) error {
		for _, name := range snapshotBuckets {
			if err := tx.DeleteBucket(name); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
				return err
			}
		}
		if err := createBuckets(tx); err != nil {
			return err
		}
		t := s.begin(tx)
		t.counters = counters{nodeCount: uint64(meta.Nodes), fence: meta.Fence, seq: uint64(meta.Nodes)}
		l := loader{t: t}
		for {
			if records++; records%snapshotCtxEvery == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			rec, err := src.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				srcErr = err
				return err
			}
			if err := chk.Check(rec); err != nil {
				return err
			}
			if err := l.load(rec); err != nil {
				return err
			}
		}
		if err := chk.Done(); err != nil {
			return err
		}
		if err := t.meta.Put(keyGeneration, encodeGeneration(meta.Generation)); err != nil {
			return err
		}
		if meta.AuditSeq == 0 {
			if err := t.meta.Delete(keyAuditHead); err != nil {
				return err
			}
		} else if err := t.meta.Put(keyAuditHead, encodeAuditHead(meta.AuditSeq, meta.AuditHash)); err != nil {
			return err
		}
		t.loaded = counters{} // write every counter: the ones read at begin belong to the deleted state
		return t.flush()
	}))
	if srcErr != nil {
		return srcErr
	}
	if err != nil {
		return err
	}
	s.log.Warn("bolt: loaded a snapshot: the store's whole durable state was replaced",
		"generation", meta.Generation.ID, "number", meta.Generation.Number, "nodes", meta.Nodes, "fence", meta.Fence,
		"records", records-1)
	return nil
}

// loader writes the records of a snapshot into an emptied file.
type loader struct {
	t                   *txn
	users, allow, audit *bbolt.Bucket // made by the first record that needs them
}

func (l *loader) load(rec idkeeper.SnapshotRecord) error {
	var err error
	switch {
	case rec.Node != nil:
		return l.node(rec.Node)
	case rec.Key != nil:
		k := rec.Key
		if len(k.ID) > bbolt.MaxKeySize {
			return idkeeper.Invalidf("snapshot", "API key ID of %d bytes: this store keeps at most %d", len(k.ID), bbolt.MaxKeySize)
		}
		v, err := json.Marshal(apiKeyRecOf(*k))
		if err != nil {
			return err
		}
		return l.t.tx.Bucket(bucketAPIKeys).Put([]byte(k.ID), v)
	case rec.User != nil:
		u := rec.User
		if len(u.Name) > bbolt.MaxKeySize {
			return idkeeper.Invalidf("snapshot", "user name of %d bytes: this store keeps at most %d", len(u.Name), bbolt.MaxKeySize)
		}
		if l.users == nil {
			if l.users, err = writeBucket(l.t, bucketUsers); err != nil {
				return err
			}
		}
		return l.users.Put([]byte(u.Name), encodeUser(*u))
	case rec.Allow != nil:
		if l.allow == nil {
			if l.allow, err = writeBucket(l.t, bucketAllow); err != nil {
				return err
			}
		}
		return l.allow.Put(allowKey(rec.Allow.Prefix), encodeAllow(*rec.Allow))
	case rec.Audit != nil:
		if l.audit == nil {
			if l.audit, err = writeBucket(l.t, bucketAudit); err != nil {
				return err
			}
		}
		return l.audit.Put(auditKey(rec.Audit.Seq), encodeAudit(*rec.Audit))
	}
	return nil
}

// node writes one node: a held one with its lease and index entries, a free one
// filed as its state calls for at now, its free sequence its NodeID + 1.
func (l *loader) node(n *idkeeper.NodeState) error {
	t, id := l.t, uint32(n.NodeID)
	r := nodeRec{watermark: timeMs(n.Watermark), quarUntil: timeMs(n.QuarantinedUntil), floor: timeMs(n.Floor),
		lastToken: n.LastToken, restorable: n.Restorable}
	if n.Lease == nil {
		r.freeSeq = uint64(id) + 1
		return t.place(id, &r)
	}
	ls := n.Lease
	if len(ls.KeyID)+1 > bbolt.MaxKeySize {
		return idkeeper.Invalidf("snapshot", "the lease of node %d names an API key ID of %d bytes: this store keeps at most %d",
			id, len(ls.KeyID), bbolt.MaxKeySize-1)
	}
	lr := leaseRec{notBefore: timeMs(ls.NotBefore), expiresAt: timeMs(ls.ExpiresAt), grantedAt: timeMs(ls.GrantedAt),
		renewedAt: timeMs(ls.RenewedAt), token: ls.FencingToken, requester: ls.Requester.Key(), keyID: ls.KeyID}
	if len(lr.requester) > math.MaxUint16 {
		return idkeeper.Invalidf("snapshot", "the lease of node %d has a requester key of %d bytes", id, len(lr.requester))
	}
	r.place = placeHeld
	if err := t.putNode(id, r); err != nil {
		return err
	}
	if err := t.leases.Put(nodeKey(id), lr.encode()); err != nil {
		return err
	}
	if err := t.expiry.Put(timeNodeKey(lr.expiresAt, id), nil); err != nil {
		return err
	}
	t.held++
	if err := t.keyHolds(lr.keyID, 1); err != nil {
		return err
	}
	ids, err := t.heldBy(lr.requester)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		other, err := t.lease(ids[0])
		if err != nil {
			return err
		}
		if other.keyID != lr.keyID {
			return idkeeper.Invalidf("snapshot", "requester %s holds node %d with API key %q and node %d with %q: "+
				"a requester's leases belong to one key", ls.Requester, ids[0], other.keyID, id, lr.keyID)
		}
	}
	// Nodes come in NodeID order, so appending keeps the entry sorted.
	return t.reqs.Put([]byte(lr.requester), encodeIDs(append(ids, id)))
}
