package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/histrec"
)

// The lease history (idkeeper.HistoryStore): a JSON record per grant under
// hist/<node>/<token>, and an entry per ended record under
// histend/<endedAt>/<node>/<token>, written in the lease transactions (the
// package doc).

// pruneBatch is the most records one PruneHistory transaction deletes.
const pruneBatch = 512

// histRec is a stored history record (package histrec).
type histRec = histrec.Rec

// decodeHist decodes the record stored under key.
func (k keys) decodeHist(key string, v []byte) (idkeeper.HistoryRecord, error) {
	node, token, err := k.histIDs(key)
	if err != nil {
		return idkeeper.HistoryRecord{}, err
	}
	var r histRec
	if err := json.Unmarshal(v, &r); err != nil {
		return idkeeper.HistoryRecord{}, fmt.Errorf("history record %s: %w", key, err)
	}
	return r.Record(node, token), nil
}

// histIDs parses hist/<node>/<token>.
func (k keys) histIDs(key string) (uint32, uint64, error) {
	ids, tok, ok := strings.Cut(strings.TrimPrefix(key, k.hist), "/")
	node, err := parseID(ids)
	if !ok || err != nil || len(tok) != 16 {
		return 0, 0, fmt.Errorf("malformed history key %q", key)
	}
	var token uint64
	if _, err := fmt.Sscanf(tok, "%x", &token); err != nil {
		return 0, 0, fmt.Errorf("malformed history key %q", key)
	}
	return node, token, nil
}

// histRaw is the transaction's history keys as histrec.JSONTable keeps them.
type histRaw struct{ t *txn }

func (h histRaw) GetJSON(node uint32, token uint64) ([]byte, bool, error) {
	return h.t.get(h.t.s.k.histKey(node, token))
}
func (h histRaw) PutJSON(node uint32, token uint64, v []byte) error {
	h.t.put(h.t.s.k.histKey(node, token), string(v))
	return nil
}
func (h histRaw) PutEnded(ms int64, node uint32, token uint64) error {
	h.t.put(h.t.s.k.histEndKey(ms, node, token), "")
	return nil
}
func (h histRaw) DeleteEnded(ms int64, node uint32, token uint64) error {
	h.t.del(h.t.s.k.histEndKey(ms, node, token))
	return nil
}

// histLog writes the lease history of this transaction's events.
func (t *txn) histLog() histrec.Log {
	return histrec.Log{T: histrec.JSONTable{Raw: histRaw{t}}, Now: t.now}
}

// LeaseAt implements idkeeper.HistoryStore: one range read of the node's records
// (with the default retention and a busy fleet, a handful per node).
func (s *Store) LeaseAt(ctx context.Context, node idkeeper.NodeID, at time.Time) ([]idkeeper.HistoryRecord, error) {
	var out []idkeeper.HistoryRecord
	if node < 0 || int64(node) > int64(^uint32(0)) {
		return out, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.k.hist+hexID(uint32(node))+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, wrap("lease at", err)
	}
	for _, e := range resp.Kvs {
		h, err := s.k.decodeHist(string(e.Key), e.Value)
		if err != nil {
			return nil, err
		}
		if h.Holds(at) {
			out = append(out, h)
		}
	}
	return out, nil
}

// NodeHistory implements idkeeper.HistoryStore: one range read, newest token first.
func (s *Store) NodeHistory(ctx context.Context, node idkeeper.NodeID, before uint64, limit int) ([]idkeeper.HistoryRecord, error) {
	if ok, err := histrec.CheckPage(node, limit); err != nil || !ok {
		return nil, err
	}
	var out []idkeeper.HistoryRecord
	ctx, cancel := s.bound(ctx)
	defer cancel()
	from := s.k.hist + hexID(uint32(node)) + "/"
	end := clientv3.GetPrefixRangeEnd(from)
	if before > 0 {
		end = s.k.histKey(uint32(node), before)
	}
	resp, err := s.c.Get(ctx, from, clientv3.WithRange(end), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend),
		clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, wrap("node history", err)
	}
	for _, e := range resp.Kvs {
		h, err := s.k.decodeHist(string(e.Key), e.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// PruneHistory implements idkeeper.HistoryStore, in transactions of at most
// pruneBatch records. Each is a lease transaction (it rewrites the meta record),
// so a record that a Renew reopens meanwhile is never deleted.
func (s *Store) PruneHistory(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := idkeeper.CheckHistoryLimit(limit, idkeeper.MaxHistoryPrune); err != nil {
		return 0, err
	}
	cut := timeMs(before)
	total := 0
	for total < limit {
		batch := min(pruneBatch, limit-total)
		n := 0
		first := func(*txn) []clientv3.Op {
			return []clientv3.Op{clientv3.OpGet(s.k.histEnd, clientv3.WithRange(s.k.histEnd+hexTime(cut)),
				clientv3.WithLimit(int64(batch)), clientv3.WithKeysOnly())}
		}
		err := s.update(ctx, "prune history", nil, first, func(t *txn) error {
			ended := t.scans[0]
			for _, k := range ended {
				parts := strings.Split(strings.TrimPrefix(k, s.k.histEnd), "/")
				if len(parts) != 3 {
					return fmt.Errorf("malformed history end key %q", k)
				}
				t.del(k)
				t.del(s.k.hist + parts[1] + "/" + parts[2])
			}
			n = len(ended)
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < batch {
			break
		}
	}
	return total, nil
}

// HistoryCount implements idkeeper.HistoryStore: a count of the records' keys,
// which etcd takes from its index without reading the records.
func (s *Store) HistoryCount(ctx context.Context) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.k.hist, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, wrap("history count", err)
	}
	return int(resp.Count), nil
}
