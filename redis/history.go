package redis

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// The lease history (idkeeper.HistoryStore). The lease scripts write it in the
// same script as the lease (lease.lua's hist_* helpers); the keys and the record
// format are in the package doc.

var (
	scriptHistoryAt    = leaseScript("history_at")
	scriptHistoryRange = leaseScript("history_range")
	scriptHistoryPrune = leaseScript("history_prune")
)

const (
	// historyAtScan is how many of the store's own grants LeaseAt reads, latest
	// window start at or before t first. One suffices (history_at.lua); the rest is
	// slack.
	historyAtScan = 16
	// historyPruneBatch is the most records one PruneHistory script deletes.
	historyPruneBatch = 256
	// maxHistToken is the largest token a record ID holds (16 digits); every
	// fencing token (at most idkeeper.MaxFencingToken) is below it.
	maxHistToken = 9999999999999999
	// maxHistStart clamps the window starts of the "s:" index members (hist_start16).
	maxHistStart = 9000000000000000
)

// histID is the ID of the record of node's grant with token tok (hist_id):
// "<node, 10 digits>:<token, 16 digits>", so that IDs sort by node, then token.
func histID(node idkeeper.NodeID, tok uint64) string {
	return fmt.Sprintf("%010d:%016d", node, tok)
}

// histNode is the prefix of node's record IDs.
func histNode(node idkeeper.NodeID) string { return fmt.Sprintf("%010d:", node) }

// histStart is the 's:' member of history:index of record id whose window starts
// at nb (ms), as hist_start in lease.lua writes it.
func histStart(id string, nb int64) string {
	return "s:" + id[:11] + fmt.Sprintf("%016d", min(max(nb-zeroMillis, 0), maxHistStart)) + id[10:]
}

// zeroMillis is Go's zero time.Time in Unix ms (ZERO in common.lua).
var zeroMillis = time.Time{}.UnixMilli()

func parseHistID(id string) (idkeeper.NodeID, uint64, error) {
	n, t, ok := strings.Cut(id, ":")
	node, err1 := strconv.ParseUint(n, 10, 32)
	tok, err2 := strconv.ParseUint(t, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("redis: malformed history record ID %q", id)
	}
	return idkeeper.NodeID(node), tok, nil
}

// clientRecord is the JSON of a ClientInfo in a history record.
type clientRecord struct {
	Host   string            `json:"host,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// encodeClient is the client part of a history record: "" when c is zero, else
// its JSON (at most a few KiB: ClientInfo.Validate bounds it).
func encodeClient(c idkeeper.ClientInfo) string {
	if c.IsZero() {
		return ""
	}
	b, err := json.Marshal(clientRecord{Host: c.Host, Labels: c.Labels})
	if err != nil {
		panic("redis: encoding a client: " + err.Error()) // strings only: cannot fail
	}
	return string(b)
}

// encodeHistory encodes a record as the scripts keep it (see lease.lua):
// "windowEnd,endedAt,mintedUpTo,end,notBefore,grantedAt,fromReceipt,r,k,<requester
// key><key ID><client>".
func encodeHistory(h idkeeper.HistoryRecord) string {
	req := h.Requester.Key()
	return strings.Join([]string{
		strconv.FormatInt(ms(h.WindowEnd), 10), strconv.FormatInt(ms(h.EndedAt), 10),
		strconv.FormatInt(ms(h.MintedUpTo), 10), string(h.End), strconv.FormatInt(ms(h.NotBefore), 10),
		strconv.FormatInt(ms(h.GrantedAt), 10), flag(h.FromReceipt), strconv.Itoa(len(req)), strconv.Itoa(len(h.KeyID)),
		req + h.KeyID + encodeClient(h.Client),
	}, ",")
}

// decodeHistory decodes the record rec of ID id.
func decodeHistory(id, rec string) (idkeeper.HistoryRecord, error) {
	node, tok, err := parseHistID(id)
	if err != nil {
		return idkeeper.HistoryRecord{}, err
	}
	bad := func(why string) (idkeeper.HistoryRecord, error) {
		return idkeeper.HistoryRecord{}, fmt.Errorf("redis: malformed history record %s: %s", id, why)
	}
	f := strings.SplitN(rec, ",", 10)
	if len(f) != 10 {
		return bad("too few fields")
	}
	var t [6]int64
	for i, j := range []int{0, 1, 2, 4, 5} {
		if t[i], err = strconv.ParseInt(f[j], 10, 64); err != nil {
			return bad("a malformed time")
		}
	}
	r, err1 := strconv.Atoi(f[7])
	k, err2 := strconv.Atoi(f[8])
	rest := f[9]
	if err1 != nil || err2 != nil || r < 0 || k < 0 || r+k > len(rest) || (f[6] != "0" && f[6] != "1") {
		return bad("malformed lengths")
	}
	h := idkeeper.HistoryRecord{NodeID: node, Token: tok, KeyID: rest[r : r+k],
		WindowEnd: fromMs(t[0]), EndedAt: fromMs(t[1]), MintedUpTo: fromMs(t[2]), End: idkeeper.LeaseEnd(f[3]),
		NotBefore: fromMs(t[3]), GrantedAt: fromMs(t[4]), FromReceipt: f[6] == "1"}
	if h.Requester, err = idkeeper.ParseRequesterKey(rest[:r]); err != nil {
		return bad(err.Error())
	}
	if c := rest[r+k:]; c != "" {
		var cr clientRecord
		if err := json.Unmarshal([]byte(c), &cr); err != nil {
			return bad("malformed client: " + err.Error())
		}
		h.Client = idkeeper.ClientInfo{Host: cr.Host, Labels: cr.Labels}
	}
	return h, nil
}

// historyPairs decodes {id, record, ...} of a history script; a missing record
// (false) is an error: the indexes and the records disagree.
func historyPairs(v any) ([]idkeeper.HistoryRecord, error) {
	a, ok := v.([]any)
	if !ok || len(a)%2 != 0 {
		return nil, fmt.Errorf("redis: unexpected history reply %v", v)
	}
	out := make([]idkeeper.HistoryRecord, 0, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		id, ok1 := a[i].(string)
		rec, ok2 := a[i+1].(string)
		if !ok1 {
			return nil, fmt.Errorf("redis: unexpected history reply %v", v)
		}
		if !ok2 {
			return nil, fmt.Errorf("redis: malformed history: record %s is indexed but missing", id)
		}
		h, err := decodeHistory(id, rec)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// inPool reports whether node can have records: a node ID of some pool.
func inPool(node idkeeper.NodeID) bool {
	return node >= 0 && int64(node) <= int64(idkeeper.MaxPoolNodes)
}

// LeaseAt returns the records of node whose window holds t, as
// idkeeper.HistoryStore says, from one script (history_at.lua): of the store's own
// grants it reads a few with the latest window starts at or before t, of those
// learned from receipts every one of node's.
func (s *Store) LeaseAt(ctx context.Context, node idkeeper.NodeID, t time.Time) ([]idkeeper.HistoryRecord, error) {
	if !inPool(node) {
		return nil, nil
	}
	v, err := s.run(ctx, scriptHistoryAt, s.keys.lease, false, int64(node), ms(t), historyAtScan)
	if err != nil {
		return nil, wrap("lease at", err)
	}
	hs, err := historyPairs(v)
	if err != nil {
		return nil, err
	}
	hs = slices.DeleteFunc(hs, func(h idkeeper.HistoryRecord) bool { return !h.Holds(t) })
	slices.SortFunc(hs, func(a, b idkeeper.HistoryRecord) int { return cmp.Compare(a.Token, b.Token) })
	return hs, nil
}

// NodeHistory returns up to limit records of node, newest token first, as
// idkeeper.HistoryStore says: one lex range of the 't:' members of history:index.
func (s *Store) NodeHistory(ctx context.Context, node idkeeper.NodeID, before uint64, limit int) ([]idkeeper.HistoryRecord, error) {
	if err := idkeeper.CheckHistoryLimit(limit, idkeeper.MaxHistoryPage); err != nil {
		return nil, err
	}
	if !inPool(node) {
		return nil, nil
	}
	hi := "(t:" + strings.TrimSuffix(histNode(node), ":") + ";"
	if before > 0 && before <= maxHistToken {
		hi = "(t:" + histID(node, before)
	}
	v, err := s.run(ctx, scriptHistoryRange, s.keys.lease, false, "REV", hi, "(t:"+histNode(node), limit, "")
	if err != nil {
		return nil, wrap("node history", err)
	}
	return historyPairs(v)
}

// PruneHistory deletes up to limit records that ended before before, as
// idkeeper.HistoryStore says, in scripts of at most historyPruneBatch records
// each, oldest end first: O(k log n) for k of n records. It stops at the first
// error, leaving the batches done so far deleted.
func (s *Store) PruneHistory(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := idkeeper.CheckHistoryLimit(limit, idkeeper.MaxHistoryPrune); err != nil {
		return 0, err
	}
	// Records end on whole milliseconds: one ends before before exactly when it
	// ends before cut, before rounded up to the millisecond.
	c := protocol.Millis(before)
	cut := c.UnixMilli()
	if c.Before(before) {
		cut++
	}
	total := 0
	for total < limit {
		batch := min(historyPruneBatch, limit-total)
		v, err := s.run(ctx, scriptHistoryPrune, s.keys.lease, false, cut, batch)
		if err != nil {
			return total, wrap("prune history", err)
		}
		n, ok := v.(int64)
		if !ok {
			return total, fmt.Errorf("redis: prune history: unexpected reply %v", v)
		}
		total += int(n)
		if int(n) < batch {
			break
		}
	}
	return total, nil
}

// HistoryCount returns how many records the history holds.
func (s *Store) HistoryCount(ctx context.Context) (int, error) {
	n, err := s.client.HLen(ctx, s.keys.hist).Result()
	if err != nil {
		return 0, fmt.Errorf("redis: history count: %w", err)
	}
	return int(n), nil
}

// history emits the history records of a snapshot's copy in (NodeID, Token)
// order, snapshotBatch at a time.
func (r *snapReader) history() error {
	keys := r.cp[:leaseKeyCount]
	lo := "(t:"
	for {
		if err := r.keep(); err != nil {
			return err
		}
		v, err := r.s.run(r.ctx, scriptHistoryRange, keys, false, "FWD", lo, "(t;", snapshotBatch, "copy")
		if err != nil {
			return wrap("read snapshot", err)
		}
		hs, err := historyPairs(v)
		if err != nil {
			return err
		}
		for i := range hs {
			if err := r.emit(snapshot.Record{History: &hs[i]}); err != nil {
				return err
			}
		}
		if len(hs) < snapshotBatch {
			return nil
		}
		lo = "(t:" + histID(hs[len(hs)-1].NodeID, hs[len(hs)-1].Token)
	}
}
