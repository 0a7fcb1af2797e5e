package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// Cooling charges (idkeeper.LeaseStore.Remove): keycool/<key ID> lists the node
// IDs the key's Removes left cooling, "<node>:<until>:<last token>,…" (decimal),
// until being the fenced watermark the Remove left. A charge counts while until ≥
// now and the node's record still has that lastToken and is free: a grant or a
// restore of the node gives it another token, which ends the charge without
// touching the record. The record is read and written in the key's lease
// transactions (Alloc, Remove), conditioned on the meta record as every lease
// read is; a Remove drops the charges that count no more.

// charge is one entry of a keycool record.
type charge = leasetx.Charge

func decodeCharges(v []byte) ([]charge, error) {
	if len(v) == 0 {
		return nil, nil
	}
	var out []charge
	for _, e := range strings.Split(string(v), ",") {
		f := strings.Split(e, ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("corrupt cooling charge %q", e)
		}
		id, err1 := strconv.ParseUint(f[0], 10, 32)
		until, err2 := strconv.ParseInt(f[1], 10, 64)
		tok, err3 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("corrupt cooling charge %q", e)
		}
		out = append(out, charge{ID: uint32(id), Until: until, Token: tok})
	}
	return out, nil
}

func encodeCharges(cs []charge) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d:%d", c.ID, c.Until, c.Token)
	}
	return b.String()
}

// Charges implements leasetx.Tx: the keycool record of key, with the records
// of the nodes its charges that are not stale name, read ahead in one round
// trip.
func (r rules) Charges(key string) ([]charge, error) {
	v, _, err := r.t.get(r.t.s.k.keyCool + key)
	if err != nil {
		return nil, err
	}
	cs, err := decodeCharges(v)
	if err != nil {
		return nil, err
	}
	return cs, r.t.fetchCharged(cs)
}

// PutCharges implements leasetx.Tx: the record is written whole, or deleted
// when cs is empty.
func (r rules) PutCharges(key string, _, cs []charge) error {
	if len(cs) == 0 {
		r.t.del(r.t.s.k.keyCool + key)
		return nil
	}
	r.t.put(r.t.s.k.keyCool+key, encodeCharges(cs))
	return nil
}

// fetchCharged reads the records of the nodes that cs's charges not stale at
// now name.
func (t *txn) fetchCharged(cs []charge) error {
	var ids []uint32
	for _, c := range cs {
		if c.Until >= t.now {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return t.fetchNodes(ids)
}

// KeyCooling implements idkeeper.LeaseStore: one read of the charges, one of
// their nodes' records, at one revision.
func (s *Store) KeyCooling(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	first := func(*txn) []clientv3.Op {
		return []clientv3.Op{clientv3.OpGet(s.k.keyCool, clientv3.WithPrefix())}
	}
	err := s.update(ctx, "key cooling", nil, first, func(t *txn) error {
		clear(out)
		for i, k := range t.scans[0] {
			cs, err := decodeCharges(t.scanVals[0][i])
			if err != nil {
				return err
			}
			if err := t.fetchCharged(cs); err != nil {
				return err
			}
			live, err := leasetx.LiveCharges(rules{t}, cs)
			if err != nil {
				return err
			}
			if len(live) > 0 {
				out[strings.TrimPrefix(k, s.k.keyCool)] = len(live)
			}
		}
		return nil
	})
	return out, err
}
