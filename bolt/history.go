package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/histrec"
	"github.com/idkeeper/idkeeper/snapshot"
)

// The lease history (idkeeper.HistoryStore), in two buckets written in the same
// transaction as the lease:
//
//	history        node u32 | token u64 → JSON record (histRec)
//	history-ended  endedAt (sign-flipped) | node u32 | token u64 → ∅   (ended records: PruneHistory)
//
// LeaseAt reads every record of the node (a cursor over its prefix): with the
// default retention and a busy fleet that is a handful per node.

var (
	bucketHistory      = []byte("history")
	bucketHistoryEnded = []byte("history-ended")
)

// histRec is a stored history record (package histrec).
type histRec = histrec.Rec

func histKey(node uint32, token uint64) []byte {
	return binary.BigEndian.AppendUint64(nodeKey(node), token)
}

func decodeHist(k, v []byte) (idkeeper.HistoryRecord, error) {
	var r histRec
	if len(k) != 12 {
		return idkeeper.HistoryRecord{}, fmt.Errorf("a history key of %d bytes", len(k))
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return idkeeper.HistoryRecord{}, fmt.Errorf("history record: %w", err)
	}
	return r.Record(binary.BigEndian.Uint32(k), binary.BigEndian.Uint64(k[4:])), nil
}

// histRaw is the transaction's history buckets as histrec.JSONTable keeps them.
type histRaw struct{ t *txn }

func (h histRaw) GetJSON(node uint32, token uint64) ([]byte, bool, error) {
	v := h.t.hist.Get(histKey(node, token))
	return v, v != nil, nil
}
func (h histRaw) PutJSON(node uint32, token uint64, v []byte) error {
	return h.t.hist.Put(histKey(node, token), v)
}
func (h histRaw) PutEnded(ms int64, node uint32, token uint64) error {
	return h.t.histEnded.Put(endedKey(ms, node, token), nil)
}
func (h histRaw) DeleteEnded(ms int64, node uint32, token uint64) error {
	return h.t.histEnded.Delete(endedKey(ms, node, token))
}

func endedKey(ms int64, node uint32, token uint64) []byte {
	return binary.BigEndian.AppendUint64(timeNodeKey(ms, node), token)
}

// histTable is the transaction's lease history.
func (t *txn) histTable() histrec.JSONTable { return histrec.JSONTable{Raw: histRaw{t}} }

// histLog writes the lease history of this transaction's events.
func (t *txn) histLog() histrec.Log { return histrec.Log{T: t.histTable(), Now: t.now} }

// LeaseAt implements idkeeper.HistoryStore.
func (s *Store) LeaseAt(ctx context.Context, node idkeeper.NodeID, at time.Time) ([]idkeeper.HistoryRecord, error) {
	var out []idkeeper.HistoryRecord
	if node < 0 || int64(node) > int64(^uint32(0)) {
		return out, nil
	}
	err := s.view(ctx, func(t *txn) error {
		prefix := nodeKey(uint32(node))
		c := t.hist.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			h, err := decodeHist(k, v)
			if err != nil {
				return err
			}
			if h.Holds(at) {
				out = append(out, h)
			}
		}
		return nil
	})
	return out, err
}

// NodeHistory implements idkeeper.HistoryStore.
func (s *Store) NodeHistory(ctx context.Context, node idkeeper.NodeID, before uint64, limit int) ([]idkeeper.HistoryRecord, error) {
	if ok, err := histrec.CheckPage(node, limit); err != nil || !ok {
		return nil, err
	}
	var out []idkeeper.HistoryRecord
	err := s.view(ctx, func(t *txn) error {
		id := uint32(node)
		c := t.hist.Cursor()
		// Seek past the last wanted key, then walk back.
		var k, v []byte
		if before == 0 {
			if id == ^uint32(0) {
				k, v = c.Last()
			} else {
				k, v = c.Seek(nodeKey(id + 1))
				if k == nil {
					k, v = c.Last()
				} else {
					k, v = c.Prev()
				}
			}
		} else {
			k, v = c.Seek(histKey(id, before))
			if k == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
		}
		prefix := nodeKey(id)
		for ; k != nil && bytes.HasPrefix(k, prefix) && len(out) < limit; k, v = c.Prev() {
			h, err := decodeHist(k, v)
			if err != nil {
				return err
			}
			if before == 0 || h.Token < before {
				out = append(out, h)
			}
		}
		return nil
	})
	return out, err
}

// PruneHistory implements idkeeper.HistoryStore: one write transaction.
func (s *Store) PruneHistory(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := idkeeper.CheckHistoryLimit(limit, idkeeper.MaxHistoryPrune); err != nil {
		return 0, err
	}
	cut := timeMs(before)
	n := 0
	err := s.update(ctx, nil, func(t *txn) error {
		keys := collect(t.histEnded, func(k []byte) bool { return keyTime(k) < cut }, limit)
		for _, k := range keys {
			node, token := binary.BigEndian.Uint32(k[8:]), binary.BigEndian.Uint64(k[12:])
			if err := t.hist.Delete(histKey(node, token)); err != nil {
				return err
			}
			if err := t.histEnded.Delete(k); err != nil {
				return err
			}
		}
		n = len(keys)
		return nil
	})
	return n, err
}

// HistoryCount implements idkeeper.HistoryStore.
func (s *Store) HistoryCount(ctx context.Context) (int, error) {
	n := 0
	err := s.view(ctx, func(t *txn) error {
		n = t.hist.Stats().KeyN
		return nil
	})
	return n, err
}

// histRecords emits every record in (node, token) order, for ReadSnapshot.
func histRecords(t *txn, out func(snapshot.Record) error) error {
	return t.hist.ForEach(func(k, v []byte) error {
		h, err := decodeHist(k, v)
		if err != nil {
			return err
		}
		return out(snapshot.Record{History: &h})
	})
}

// history writes one record of a snapshot into the staging.
func (l *loader) history(h *idkeeper.HistoryRecord) error {
	return l.t.histTable().Put(uint32(h.NodeID), h.Token, histrec.Of(*h), nil)
}
