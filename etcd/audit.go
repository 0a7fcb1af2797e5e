package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/leasetx"
	"github.com/idkeeper/idkeeper/protocol"
)

// The audit log: audit/<seq> (16 hex digits) holds each entry, audithead the Seq
// and Hash of the last entry ever appended. An append is one transaction
// conditioned on the head's revision.

// auditRec is the JSON of an audit entry; At is Unix ms.
type auditRec struct {
	At       int64  `json:"at"`
	Actor    string `json:"actor,omitempty"`
	Action   string `json:"action,omitempty"`
	Target   string `json:"target,omitempty"`
	RemoteIP string `json:"remoteIP,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Prev     string `json:"prev,omitempty"`
	Hash     string `json:"hash,omitempty"`
}

// headRec is the JSON of the audit head.
type headRec struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

func encodeAudit(e audit.Entry) (string, error) {
	return jsonString(auditRec{At: timeMs(e.At), Actor: e.Actor, Action: e.Action, Target: e.Target,
		RemoteIP: e.RemoteIP, Detail: e.Detail, Prev: e.Prev, Hash: e.Hash})
}

func (k keys) auditKey(seq uint64) string { return k.audit + hexU64(seq) }

func (s *Store) decodeAudit(key string, v []byte) (audit.Entry, error) {
	var seq uint64
	if _, err := fmt.Sscanf(key[len(s.k.audit):], "%016x", &seq); err != nil || len(key)-len(s.k.audit) != 16 {
		return audit.Entry{}, fmt.Errorf("etcd: corrupt audit key %q", key)
	}
	var r auditRec
	if err := json.Unmarshal(v, &r); err != nil {
		return audit.Entry{}, fmt.Errorf("etcd: corrupt audit entry %d: %w", seq, err)
	}
	return audit.Entry{Seq: seq, At: msTime(r.At), Actor: r.Actor, Action: r.Action, Target: r.Target,
		RemoteIP: r.RemoteIP, Detail: r.Detail, Prev: r.Prev, Hash: r.Hash}, nil
}

func decodeHead(v []byte) (headRec, error) {
	var h headRec
	if err := json.Unmarshal(v, &h); err != nil {
		return headRec{}, fmt.Errorf("etcd: corrupt audit head: %w", err)
	}
	return h, nil
}

// AppendAudit implements account.Store: the head read, then the entry and
// the new head written in one transaction conditioned on the head's revision.
func (s *Store) AppendAudit(ctx context.Context, e audit.Entry) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.k.auditHead)
	if err != nil {
		return wrap("append audit", err)
	}
	var h headRec
	rev := int64(0)
	if len(resp.Kvs) == 1 {
		if h, err = decodeHead(resp.Kvs[0].Value); err != nil {
			return err
		}
		rev = resp.Kvs[0].ModRevision
	}
	if e.Seq != h.Seq+1 || e.Prev != h.Hash {
		return idkeeper.ErrConflict
	}
	rec, err := encodeAudit(e)
	if err != nil {
		return fmt.Errorf("etcd: audit entry: %w", err)
	}
	head, err := jsonString(headRec{Seq: e.Seq, Hash: e.Hash})
	if err != nil {
		return err
	}
	tr, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.k.auditHead), "=", rev)).
		Then(clientv3.OpPut(s.k.auditHead, head), clientv3.OpPut(s.k.auditKey(e.Seq), rec)).Commit()
	if err != nil {
		return wrap("append audit", err)
	}
	if !tr.Succeeded {
		return idkeeper.ErrConflict
	}
	return nil
}

// AuditHead implements account.Store.
func (s *Store) AuditHead(ctx context.Context) (uint64, string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.k.auditHead)
	if err != nil {
		return 0, "", wrap("audit head", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, "", nil
	}
	h, err := decodeHead(resp.Kvs[0].Value)
	return h.Seq, h.Hash, err
}

func checkLimit(limit, most int) error {
	if limit < 1 || limit > most {
		return protocol.Invalidf("limit", "limit must be 1 to %d, not %d", most, limit)
	}
	return nil
}

func (s *Store) auditRange(ctx context.Context, op, from, end string, limit int, opts ...clientv3.OpOption) ([]audit.Entry, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, from, append([]clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(limit))}, opts...)...)
	if err != nil {
		return nil, wrap(op, err)
	}
	out := make([]audit.Entry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		e, err := s.decodeAudit(string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// AuditEntries implements account.Store: one range read. A limit outside
// 1..1000 is an INVALID_REQUEST error.
func (s *Store) AuditEntries(ctx context.Context, from uint64, limit int) ([]audit.Entry, error) {
	if err := checkLimit(limit, maxAuditPage); err != nil {
		return nil, err
	}
	return s.auditRange(ctx, "audit entries", s.k.auditKey(from), clientv3.GetPrefixRangeEnd(s.k.audit), limit)
}

// AuditEntriesBefore implements account.Store: one range read, descending.
// A limit outside 1..1000 is an INVALID_REQUEST error.
func (s *Store) AuditEntriesBefore(ctx context.Context, before uint64, limit int) ([]audit.Entry, error) {
	if err := checkLimit(limit, maxAuditPage); err != nil {
		return nil, err
	}
	end := clientv3.GetPrefixRangeEnd(s.k.audit)
	if before > 0 {
		end = s.k.auditKey(before)
	}
	return s.auditRange(ctx, "audit entries", s.k.audit, end, limit,
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
}

// PruneAudit implements account.Store: the oldest entries are read at one
// revision and deleted in transactions of adminBatch, each conditioned on the
// revisions of the entries it deletes; when another pruner came first, it reads
// again. A limit outside 1..10000 is an INVALID_REQUEST error.
func (s *Store) PruneAudit(ctx context.Context, beforeT time.Time, limit int) (int, error) {
	if err := checkLimit(limit, maxAuditPrune); err != nil {
		return 0, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	cut := timeMs(beforeT)
	n := 0
	for conflicts := 0; n < limit; {
		resp, err := s.c.Get(ctx, s.k.audit, clientv3.WithPrefix(), clientv3.WithLimit(int64(min(limit-n, adminBatch))))
		if err != nil {
			return n, wrap("prune audit", err)
		}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		stop := false
		for _, kv := range resp.Kvs {
			e, err := s.decodeAudit(string(kv.Key), kv.Value)
			if err != nil {
				return n, err
			}
			if timeMs(e.At) >= cut {
				stop = true
				break
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
		}
		if len(ops) > 0 {
			tr, err := s.c.Txn(ctx).If(cmps...).Then(ops...).Commit()
			if err != nil {
				return n, wrap("prune audit", err)
			}
			if !tr.Succeeded {
				if conflicts++; conflicts >= maxConflicts {
					return n, errors.New("etcd: prune audit: too many attempts lost to other writers")
				}
				if err := leasetx.Backoff(ctx, conflicts); err != nil {
					return n, wrap("prune audit", err)
				}
				continue
			}
			n += len(ops)
		}
		if stop || len(resp.Kvs) < adminBatch || len(ops) == 0 {
			break
		}
	}
	return n, nil
}
