package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
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
type charge struct {
	id    uint32
	until int64
	token uint64
}

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
		out = append(out, charge{id: uint32(id), until: until, token: tok})
	}
	return out, nil
}

func encodeCharges(cs []charge) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d:%d", c.id, c.until, c.token)
	}
	return b.String()
}

// charges returns key's keycool entries.
func (t *txn) charges(key string) ([]charge, error) {
	v, _, err := t.get(t.s.k.keyCool + key)
	if err != nil {
		return nil, err
	}
	return decodeCharges(v)
}

// liveCharges returns those of cs that count at now, reading the records of
// their nodes.
func (t *txn) liveCharges(cs []charge) ([]charge, error) {
	var ids []uint32
	for _, c := range cs {
		if c.until >= t.now {
			ids = append(ids, c.id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if err := t.fetchNodes(ids); err != nil {
		return nil, err
	}
	var live []charge
	for _, c := range cs {
		if c.until < t.now {
			continue
		}
		r, err := t.node(c.id)
		if err != nil {
			return nil, err
		}
		if r.place != placeHeld && r.lastToken == c.token {
			live = append(live, c)
		}
	}
	return live, nil
}

// keyCooling counts the node IDs charged to key for cooling at now.
func (t *txn) keyCooling(key string) (int, error) {
	cs, err := t.charges(key)
	if err != nil {
		return 0, err
	}
	live, err := t.liveCharges(cs)
	return len(live), err
}

// chargeRemoved rewrites key's record after a Remove released ids: the charges
// that still count, and one for each released node whose fenced watermark is not
// before now.
func (t *txn) chargeRemoved(key string, ids []uint32) error {
	cs, err := t.charges(key)
	if err != nil {
		return err
	}
	live, err := t.liveCharges(cs)
	if err != nil {
		return err
	}
	for _, id := range ids {
		r, err := t.node(id)
		if err != nil {
			return err
		}
		if w := r.fenced(); w >= t.now {
			live = append(live, charge{id: id, until: w, token: r.lastToken})
		}
	}
	if len(live) == 0 {
		t.del(t.s.k.keyCool + key)
		return nil
	}
	t.put(t.s.k.keyCool+key, encodeCharges(live))
	return nil
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
			live, err := t.liveCharges(cs)
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
