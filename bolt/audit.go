package bolt

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// Bounds of the limit arguments of the audit reads and of PruneAudit.
const (
	maxAuditPage  = 1000
	maxAuditPrune = 10000
)

// auditKey is an entry's key: its Seq, big-endian, so key order is Seq order.
func auditKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq) }

// encodeAudit is at | actor | action | target | remoteIP | detail | prev | hash.
func encodeAudit(e audit.Entry) []byte {
	w := newRec(16 + len(e.Actor) + len(e.Action) + len(e.Target) + len(e.RemoteIP) + len(e.Detail) + len(e.Prev) + len(e.Hash))
	w = w.ms(timeMs(e.At)).str(e.Actor).str(e.Action).str(e.Target).str(e.RemoteIP).str(e.Detail)
	return w.str(e.Prev).str(e.Hash)
}

func decodeAudit(k, v []byte) (audit.Entry, error) {
	if len(k) != 8 {
		return audit.Entry{}, fmt.Errorf("corrupt audit key %x", k)
	}
	seq := binary.BigEndian.Uint64(k)
	r := readRec(fmt.Sprintf("audit entry %d", seq), v)
	e := audit.Entry{Seq: seq, At: msTime(r.ms()), Actor: r.str(), Action: r.str(), Target: r.str(),
		RemoteIP: r.str(), Detail: r.str(), Prev: r.str(), Hash: r.str()}
	if err := r.end(); err != nil {
		return audit.Entry{}, err
	}
	return e, nil
}

// encodeAuditHead is the meta "audithead" record: Seq u64 | Hash.
func encodeAuditHead(seq uint64, hash string) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(hash)), seq), hash...)
}

// auditHead reads the head of the log: 0 and "" when no entry was ever appended.
func auditHead(t *txn) (uint64, string, error) {
	v := t.meta.Get(keyAuditHead)
	switch {
	case v == nil:
		return 0, "", nil
	case len(v) < 8:
		return 0, "", fmt.Errorf("corrupt audit head of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), string(v[8:]), nil
}

// AppendAudit implements account.Store: it reads the head and writes the
// entry and the new head in one transaction.
func (s *Store) AppendAudit(ctx context.Context, e audit.Entry) error {
	return s.update(ctx, nil, func(t *txn) error {
		seq, hash, err := auditHead(t)
		if err != nil {
			return err
		}
		if seq == ^uint64(0) || e.Seq != seq+1 || e.Prev != hash {
			return idkeeper.ErrConflict
		}
		b, err := writeBucket(t, bucketAudit)
		if err != nil {
			return err
		}
		if err := b.Put(auditKey(e.Seq), encodeAudit(e)); err != nil {
			return err
		}
		return t.meta.Put(keyAuditHead, encodeAuditHead(e.Seq, e.Hash))
	})
}

// AuditHead implements account.Store.
func (s *Store) AuditHead(ctx context.Context) (seq uint64, hash string, err error) {
	err = s.view(ctx, func(t *txn) error {
		seq, hash, err = auditHead(t)
		return err
	})
	return seq, hash, err
}

// checkLimit refuses a limit outside 1..most.
func checkLimit(limit, most int) error {
	if limit < 1 || limit > most {
		return protocol.Invalidf("limit", "limit must be 1 to %d, not %d", most, limit)
	}
	return nil
}

// auditRange reads up to limit entries from the cursor position (k, v) on, moving
// with next.
func auditRange(k, v []byte, next func() ([]byte, []byte), limit int) ([]audit.Entry, error) {
	out := []audit.Entry{}
	for ; k != nil && len(out) < limit; k, v = next() {
		e, err := decodeAudit(k, v)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// AuditEntries implements account.Store: O(log n + limit). A limit outside
// 1..1000 is an INVALID_REQUEST error.
func (s *Store) AuditEntries(ctx context.Context, from uint64, limit int) ([]audit.Entry, error) {
	if err := checkLimit(limit, maxAuditPage); err != nil {
		return nil, err
	}
	out := []audit.Entry{}
	err := s.view(ctx, func(t *txn) error {
		b := t.tx.Bucket(bucketAudit)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		k, v := c.Seek(auditKey(from))
		var err error
		out, err = auditRange(k, v, c.Next, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AuditEntriesBefore implements account.Store: O(log n + limit). A limit
// outside 1..1000 is an INVALID_REQUEST error.
func (s *Store) AuditEntriesBefore(ctx context.Context, before uint64, limit int) ([]audit.Entry, error) {
	if err := checkLimit(limit, maxAuditPage); err != nil {
		return nil, err
	}
	out := []audit.Entry{}
	err := s.view(ctx, func(t *txn) error {
		b := t.tx.Bucket(bucketAudit)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		var k, v []byte
		if before == 0 {
			k, v = c.Last()
		} else if k, _ = c.Seek(auditKey(before)); k == nil {
			k, v = c.Last() // every entry is below before
		} else {
			k, v = c.Prev()
		}
		var err error
		out, err = auditRange(k, v, c.Prev, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PruneAudit implements account.Store: O(log n + limit). It deletes from the
// oldest entry on and stops at the first entry whose At is not before before, so
// what remains is always an unbroken run up to the head, even where At is out of
// order (a clock stepped back). A limit outside 1..10000 is an INVALID_REQUEST
// error.
func (s *Store) PruneAudit(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := checkLimit(limit, maxAuditPrune); err != nil {
		return 0, err
	}
	n := 0
	err := s.update(ctx, nil, func(t *txn) error {
		n = 0
		b := t.tx.Bucket(bucketAudit)
		if b == nil {
			return nil
		}
		var old [][]byte
		c := b.Cursor()
		for k, v := c.First(); k != nil && len(old) < limit; k, v = c.Next() {
			e, err := decodeAudit(k, v)
			if err != nil {
				return err
			}
			if !e.At.Before(before) {
				break
			}
			old = append(old, append([]byte(nil), k...))
		}
		for _, k := range old {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(old)
		return nil
	})
	return n, err
}
