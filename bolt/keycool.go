package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
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

// charge records that key's Remove left node id, of record r, cooling: charged
// while r's fenced watermark is not before now. A node released ready is charged
// to nobody.
func (t *txn) charge(key string, id uint32, r nodeRec) error {
	if until := r.fenced(); until >= t.now {
		return t.keyCool.Put(keyCoolKey(key, until, id), putU64(r.lastToken))
	}
	return nil
}

// live is whether the charge with key k and value v counts at now.
func (t *txn) live(k, v []byte) (bool, error) {
	_, until, id, err := parseKeyCool(k)
	if err != nil || until < t.now {
		return false, err
	}
	r, err := t.node(id)
	if err != nil {
		return false, err
	}
	return r.place != placeHeld && r.lastToken == getU64(v), nil
}

// keyCooling counts the node IDs charged to key for cooling at now.
func (t *txn) keyCooling(key string) (int, error) {
	prefix := keyCoolPrefix(key)
	from := binary.BigEndian.AppendUint64(slices.Clone(prefix), sortable(t.now))
	n := 0
	c := t.keyCool.Cursor()
	for k, v := c.Seek(from); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		ok, err := t.live(k, v)
		if err != nil {
			return 0, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// pruneCharges deletes key's entries that count no more.
func (t *txn) pruneCharges(key string) error {
	prefix := keyCoolPrefix(key)
	var dead [][]byte
	c := t.keyCool.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		ok, err := t.live(k, v)
		if err != nil {
			return err
		}
		if !ok {
			dead = append(dead, slices.Clone(k))
		}
	}
	for _, k := range dead {
		if err := t.keyCool.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// KeyCooling implements idkeeper.LeaseStore.
func (s *Store) KeyCooling(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	err := s.view(ctx, func(t *txn) error {
		return t.keyCool.ForEach(func(k, v []byte) error {
			ok, err := t.live(k, v)
			if err != nil || !ok {
				return err
			}
			key, _, _, _ := parseKeyCool(k)
			out[key]++
			return nil
		})
	})
	return out, err
}
