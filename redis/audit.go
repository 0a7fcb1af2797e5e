package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

var (
	scriptAuditAppend = plainScript("audit_append")
	scriptAuditRange  = plainScript("audit_range")
	scriptAuditPrune  = plainScript("audit_prune")
)

// Bounds of the audit methods' limits.
const (
	maxAuditPage  = 1000  // AuditEntries, AuditEntriesBefore
	maxAuditPrune = 10000 // PruneAudit
)

// auditRecord is the JSON of one audit entry in the audit hash, keyed by its Seq
// in decimal (which the record repeats, as a check). At is Unix ms.
type auditRecord struct {
	Seq      uint64 `json:"seq"`
	At       int64  `json:"at"`
	Actor    string `json:"actor,omitempty"`
	Action   string `json:"action,omitempty"`
	Target   string `json:"target,omitempty"`
	RemoteIP string `json:"remoteIp,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Prev     string `json:"prev,omitempty"`
	Hash     string `json:"hash"`
}

func (s *Store) auditKeys() (head, entries, index string) {
	return s.adminKey(keyAuditHead), s.adminKey(keyAudit), s.adminKey(keyAuditSeq)
}

// AppendAudit appends e when it extends the log (Seq is the head's + 1, Prev its
// Hash), else returns ErrConflict and writes nothing: one script checks the head
// and writes the entry, its index entry and the new head.
func (s *Store) AppendAudit(ctx context.Context, e audit.Entry) error {
	rec, err := encodeRecord("audit entry", auditRecord{Seq: e.Seq, At: ms(e.At), Actor: e.Actor, Action: e.Action,
		Target: e.Target, RemoteIP: e.RemoteIP, Detail: e.Detail, Prev: e.Prev, Hash: e.Hash})
	if err != nil {
		return err
	}
	head, entries, index := s.auditKeys()
	v, err := s.run(ctx, scriptAuditAppend, []string{head, entries, index}, false,
		strconv.FormatUint(e.Seq, 10), e.Prev, e.Hash, rec)
	if err != nil {
		return wrap("append audit", err)
	}
	if v != int64(1) {
		return idkeeper.ErrConflict
	}
	return nil
}

// AuditHead returns the Seq and Hash of the last entry ever appended, from the
// head hash, which pruning leaves alone; 0 and "" when there never was one.
func (s *Store) AuditHead(ctx context.Context) (uint64, string, error) {
	head, _, _ := s.auditKeys()
	v, err := s.client.HMGet(ctx, head, "seq", "hash").Result()
	if err != nil {
		return 0, "", fmt.Errorf("redis: audit head: %w", err)
	}
	seqStr, ok1 := v[0].(string)
	hash, ok2 := v[1].(string)
	if !ok1 && !ok2 {
		return 0, "", nil
	}
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	if !ok1 || !ok2 || err != nil || seq == 0 {
		return 0, "", fmt.Errorf("redis: malformed audit head %q %q", seqStr, hash)
	}
	return seq, hash, nil
}

func checkAuditLimit(limit, max int) error {
	if limit < 1 || limit > max {
		return protocol.Invalidf("limit", "an audit limit is 1 to %d, got %d", max, limit)
	}
	return nil
}

// AuditEntries returns up to limit (1..1000) entries from Seq from upwards in Seq
// order, pruned ones left out: one script, O(log n + limit).
func (s *Store) AuditEntries(ctx context.Context, from uint64, limit int) ([]audit.Entry, error) {
	if err := checkAuditLimit(limit, maxAuditPage); err != nil {
		return nil, err
	}
	return s.auditRange(ctx, strconv.FormatUint(from, 10), "+inf", limit, false)
}

// AuditEntriesBefore returns up to limit (1..1000) entries with Seq below before
// (0: from the newest), newest first: one script, O(log n + limit).
func (s *Store) AuditEntriesBefore(ctx context.Context, before uint64, limit int) ([]audit.Entry, error) {
	if err := checkAuditLimit(limit, maxAuditPage); err != nil {
		return nil, err
	}
	hi := "+inf"
	if before > 0 {
		hi = "(" + strconv.FormatUint(before, 10)
	}
	return s.auditRange(ctx, "-inf", hi, limit, true)
}

// auditRange reads up to limit entries with Seq between lo and hi (ZRANGEBYSCORE
// bounds), in Seq order or newest first, in one script.
func (s *Store) auditRange(ctx context.Context, lo, hi string, limit int, newestFirst bool) ([]audit.Entry, error) {
	_, entries, index := s.auditKeys()
	rev := "0"
	if newestFirst {
		rev = "1"
	}
	v, err := s.run(ctx, scriptAuditRange, []string{index, entries}, false, lo, hi, limit, rev)
	if err != nil {
		return nil, wrap("audit entries", err)
	}
	r, _ := v.([]any)
	if len(r) != 2 {
		return nil, fmt.Errorf("redis: audit entries: reply %v", v)
	}
	seqs, _ := r[0].([]any)
	recs, _ := r[1].([]any)
	if len(seqs) != len(recs) || len(seqs) > limit {
		return nil, fmt.Errorf("redis: audit entries: %d seqs, %d records", len(seqs), len(recs))
	}
	out := make([]audit.Entry, 0, len(seqs))
	for i := range seqs {
		member, _ := seqs[i].(string)
		rec, ok := recs[i].(string)
		if !ok {
			return nil, fmt.Errorf("redis: malformed audit log: entry %q is indexed but missing", member)
		}
		e, err := decodeAudit(member, rec)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func decodeAudit(member, rec string) (audit.Entry, error) {
	var r auditRecord
	if err := decodeRecord("audit entry", member, rec, &r); err != nil {
		return audit.Entry{}, err
	}
	if seq, err := strconv.ParseUint(member, 10, 64); err != nil || seq != r.Seq || seq == 0 {
		return audit.Entry{}, fmt.Errorf("redis: malformed audit entry %q: it holds Seq %d", member, r.Seq)
	}
	return audit.Entry{Seq: r.Seq, At: fromMs(r.At), Actor: r.Actor, Action: r.Action, Target: r.Target,
		RemoteIP: r.RemoteIP, Detail: r.Detail, Prev: r.Prev, Hash: r.Hash}, nil
}

// PruneAudit deletes the oldest entries whose At is before before, at most limit
// (1..10000) of them, and returns how many. It deletes a run from the oldest
// entry up and stops at the first entry that is not before before, so what stays
// is an unbroken chain up to the head (audit.Verify). It reads pruneBatch entries
// at a time and a script deletes those it picked; entries never change once
// appended, so deciding in Go is safe. The head hash stays.
func (s *Store) PruneAudit(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := checkAuditLimit(limit, maxAuditPrune); err != nil {
		return 0, err
	}
	_, entries, index := s.auditKeys()
	total := 0
	for total < limit {
		batch := min(limit-total, pruneBatch)
		oldest, err := s.auditRange(ctx, "-inf", "+inf", batch, false)
		if err != nil {
			return total, err
		}
		var seqs []any
		for _, e := range oldest {
			if !e.At.Before(before) {
				break
			}
			seqs = append(seqs, strconv.FormatUint(e.Seq, 10))
		}
		if len(seqs) == 0 {
			return total, nil
		}
		v, err := s.run(ctx, scriptAuditPrune, []string{entries, index}, false, seqs...)
		if err != nil {
			return total, wrap("prune audit", err)
		}
		n, ok := v.(int64)
		if !ok {
			return total, fmt.Errorf("redis: prune audit: reply %v", v)
		}
		total += int(n)
		if len(seqs) < len(oldest) || len(oldest) < batch {
			return total, nil // reached an entry to keep, or the head
		}
	}
	return total, nil
}
