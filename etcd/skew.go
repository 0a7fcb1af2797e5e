package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// skewDropBatch is the most lapsed observations one transaction drops.
const skewDropBatch = 64

// skewRec is the JSON of one observation, with the time it lapses.
type skewRec struct {
	Requester  string             `json:"requester"` // requester key
	Skew       time.Duration      `json:"skew"`
	Threshold  time.Duration      `json:"threshold"`
	Level      idkeeper.SkewLevel `json:"level"`
	ObservedAt time.Time          `json:"observedAt"`
	RemoteIP   string             `json:"remoteIp,omitempty"`
	Operation  string             `json:"operation,omitempty"`
	Lapse      int64              `json:"lapse"` // Unix ms, Options.Clock
}

func (k keys) skewLapseKey(lapse int64, req string) string {
	return k.skewLapse + hexTime(lapse) + "/" + req
}

// RecordSkew implements idkeeper.SkewStore: the record and its entry in the
// lapse index replace the requester's previous ones in one transaction. The lapse
// is judged by Options.Clock, so no etcd lease is involved; SkewObservations
// drops lapsed observations.
func (s *Store) RecordSkew(ctx context.Context, o idkeeper.SkewObservation, ttl time.Duration) error {
	req := o.Requester.Key()
	key := s.k.skew + req
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for n := 1; ; n++ {
		resp, err := s.c.Get(ctx, key)
		if err != nil {
			return wrap("record skew", err)
		}
		rev, old := int64(0), ""
		if len(resp.Kvs) == 1 {
			var r skewRec
			if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
				return fmt.Errorf("etcd: malformed skew observation of %q: %w", req, err)
			}
			rev, old = resp.Kvs[0].ModRevision, s.k.skewLapseKey(r.Lapse, req)
		}
		lapse := s.nowMs() + ttl.Milliseconds()
		rec, err := jsonString(skewRec{Requester: req, Skew: o.Skew, Threshold: o.Threshold, Level: o.Level,
			ObservedAt: o.ObservedAt.UTC(), RemoteIP: o.RemoteIP, Operation: o.Operation, Lapse: lapse})
		if err != nil {
			return fmt.Errorf("etcd: skew: %w", err)
		}
		ops := []clientv3.Op{clientv3.OpPut(key, rec), clientv3.OpPut(s.k.skewLapseKey(lapse, req), "")}
		if old != "" && old != s.k.skewLapseKey(lapse, req) {
			ops = append(ops, clientv3.OpDelete(old))
		}
		tr, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(ops...).Commit()
		if err != nil {
			return wrap("record skew", err)
		}
		if tr.Succeeded {
			return nil
		}
		if n >= maxConflicts {
			return fmt.Errorf("etcd: record skew: %d attempts in a row lost to other writers", n)
		}
		if err := leasetx.Backoff(ctx, n); err != nil {
			return wrap("record skew", err)
		}
	}
}

// SkewObservations implements idkeeper.SkewStore: it drops the lapsed
// observations the lapse index names (each only while its index entry is the one
// read, so an observation recorded again meanwhile stays), then reads the others
// in key (requester key) order.
func (s *Store) SkewObservations(ctx context.Context) ([]idkeeper.SkewObservation, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	now := s.nowMs()
	lapsed, err := s.c.Get(ctx, s.k.skewLapse, clientv3.WithRange(before(s.k.skewLapse, now+1)), clientv3.WithKeysOnly())
	if err != nil {
		return nil, wrap("skew observations", err)
	}
	for kvs := lapsed.Kvs; len(kvs) > 0; {
		n := min(len(kvs), skewDropBatch)
		ops := make([]clientv3.Op, n)
		for i, e := range kvs[:n] {
			idx := string(e.Key)
			rest := strings.TrimPrefix(idx, s.k.skewLapse)
			if len(rest) < 17 {
				return nil, fmt.Errorf("etcd: malformed skew index key %q", idx)
			}
			ops[i] = clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(idx), "=", e.ModRevision)},
				[]clientv3.Op{clientv3.OpDelete(idx), clientv3.OpDelete(s.k.skew + rest[17:])}, nil)
		}
		if _, err := s.c.Txn(ctx).Then(ops...).Commit(); err != nil {
			return nil, wrap("drop lapsed skew", err)
		}
		kvs = kvs[n:]
	}
	resp, err := s.c.Get(ctx, s.k.skew, clientv3.WithPrefix())
	if err != nil {
		return nil, wrap("skew observations", err)
	}
	out := []idkeeper.SkewObservation{}
	for _, e := range resp.Kvs {
		var r skewRec
		if err := json.Unmarshal(e.Value, &r); err != nil {
			return nil, fmt.Errorf("etcd: malformed skew observation %q: %w", e.Key, err)
		}
		if r.Lapse <= now {
			continue
		}
		req, err := idkeeper.ParseRequesterKey(r.Requester)
		if err != nil {
			return nil, fmt.Errorf("etcd: skew observation %q: %w", e.Key, err)
		}
		out = append(out, idkeeper.SkewObservation{Requester: req, Skew: r.Skew, Threshold: r.Threshold, Level: r.Level,
			ObservedAt: r.ObservedAt.UTC(), RemoteIP: r.RemoteIP, Operation: r.Operation})
	}
	return out, nil
}
