package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// Cooling charges (idkeeper.LeaseStore.Remove): the keycool bucket holds, per API
// key, the node IDs its Removes left cooling, keyed by the fenced watermark the
// Remove left (until), with the node's lastToken then. A charge counts while
// until ≥ now and the node's lastToken is unchanged: a grant or a restore of the
// node gives it another token, which ends the charge without touching the index.
// A Remove of the key drops its entries that count no more, so the bucket holds
// at most one live entry per node ID and the stale ones of the keys' own windows.

// keyCoolPrefix is the prefix of key's entries: its length (u16) and the key ID.
func keyCoolPrefix(key string) []byte {
	p := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(key)+12), uint16(len(key)))
	return append(p, key...)
}

// keyCoolKey is the entry of key's charge for node id until (Unix ms).
func keyCoolKey(key string, until int64, id uint32) []byte {
	k := binary.BigEndian.AppendUint64(keyCoolPrefix(key), sortable(until))
	return binary.BigEndian.AppendUint32(k, id)
}

// parseKeyCool splits an entry's key into the key ID, until and the node ID.
func parseKeyCool(k []byte) (key string, until int64, id uint32, err error) {
	if len(k) < 2 {
		return "", 0, 0, fmt.Errorf("corrupt cooling charge %x", k)
	}
	n := int(binary.BigEndian.Uint16(k))
	if len(k) != 2+n+12 {
		return "", 0, 0, fmt.Errorf("corrupt cooling charge %x", k)
	}
	rest := k[2+n:]
	return string(k[2 : 2+n]), keyTime(rest), binary.BigEndian.Uint32(rest[8:]), nil
}

// Charges implements leasetx.Tx: key's entries, in key order.
func (r rules) Charges(key string) ([]leasetx.Charge, error) {
	prefix := keyCoolPrefix(key)
	var cs []leasetx.Charge
	c := r.t.keyCool.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		ch, err := chargeOf(k, v)
		if err != nil {
			return nil, err
		}
		cs = append(cs, ch)
	}
	return cs, nil
}

// PutCharges implements leasetx.Tx: the entries of old that cs no longer holds
// are deleted, those cs adds are put.
func (r rules) PutCharges(key string, old, cs []leasetx.Charge) error {
	if len(old) == 0 && len(cs) == 0 {
		return nil
	}
	inOld, inNew := member(old), member(cs)
	for _, c := range old {
		if !inNew(c) {
			if err := r.t.keyCool.Delete(keyCoolKey(key, c.Until, c.ID)); err != nil {
				return err
			}
		}
	}
	for _, c := range cs {
		if !inOld(c) {
			if err := r.t.keyCool.Put(keyCoolKey(key, c.Until, c.ID), putU64(c.Token)); err != nil {
				return err
			}
		}
	}
	return nil
}

// member reports whether a charge is one of cs: a linear search while cs is
// short (no allocation), a map once it is long.
func member(cs []leasetx.Charge) func(leasetx.Charge) bool {
	if len(cs) <= 16 {
		return func(c leasetx.Charge) bool { return slices.Contains(cs, c) }
	}
	set := make(map[leasetx.Charge]bool, len(cs))
	for _, c := range cs {
		set[c] = true
	}
	return func(c leasetx.Charge) bool { return set[c] }
}

// chargeOf is the charge of the entry with key k and value v.
func chargeOf(k, v []byte) (leasetx.Charge, error) {
	_, until, id, err := parseKeyCool(k)
	return leasetx.Charge{ID: id, Until: until, Token: getU64(v)}, err
}

// KeyCooling implements idkeeper.LeaseStore.
func (s *Store) KeyCooling(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	err := s.view(ctx, func(t *txn) error {
		return t.keyCool.ForEach(func(k, v []byte) error {
			c, err := chargeOf(k, v)
			if err != nil {
				return err
			}
			if ok, err := leasetx.Live(rules{t}, c); err != nil || !ok {
				return err
			}
			key, _, _, _ := parseKeyCool(k)
			out[key]++
			return nil
		})
	})
	return out, err
}
