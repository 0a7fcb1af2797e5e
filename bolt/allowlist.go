package bolt

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/protocol"
)

// allowKeyLen is family u8 | 16-byte address | bits u8.
const allowKeyLen = 18

// allowKey is the key of the masked prefix p. The family byte puts every IPv4
// prefix before every IPv6 one, and the address (IPv4 in its 4-in-6 form, which
// keeps IPv4 order) before the length, so key order is netip's order: by address
// (Addr.Compare), then by prefix length.
func allowKey(p netip.Prefix) []byte {
	k := make([]byte, 0, allowKeyLen)
	if p.Addr().Is4() {
		k = append(k, 0)
	} else {
		k = append(k, 1)
	}
	a := p.Addr().As16()
	k = append(k, a[:]...)
	return append(k, byte(p.Bits()))
}

// keyPrefix reads an allowKey back; a key that allowKey does not make is an error.
func keyPrefix(k []byte) (netip.Prefix, error) {
	if len(k) != allowKeyLen || k[0] > 1 {
		return netip.Prefix{}, fmt.Errorf("corrupt allow-list key %x", k)
	}
	addr := netip.AddrFrom16([16]byte(k[1:17]))
	if k[0] == 0 {
		if !addr.Is4In6() {
			return netip.Prefix{}, fmt.Errorf("corrupt allow-list key %x", k)
		}
		addr = addr.Unmap()
	}
	p := netip.PrefixFrom(addr, int(k[17]))
	if !p.IsValid() || p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("corrupt allow-list key %x", k)
	}
	return p, nil
}

// allowPrefix masks p, refusing an invalid prefix.
func allowPrefix(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return netip.Prefix{}, protocol.Invalidf("prefix", "not an IP prefix")
	}
	return p.Masked(), nil
}

// encodeAllow is note | createdBy | createdAt.
func encodeAllow(e allowlist.Entry) []byte {
	return newRec(16 + len(e.Note) + len(e.CreatedBy)).str(e.Note).str(e.CreatedBy).ms(timeMs(e.CreatedAt))
}

func decodeAllow(k, v []byte) (allowlist.Entry, error) {
	p, err := keyPrefix(k)
	if err != nil {
		return allowlist.Entry{}, err
	}
	r := readRec("allow-list entry "+p.String(), v)
	e := allowlist.Entry{Prefix: p, Note: r.str(), CreatedBy: r.str(), CreatedAt: msTime(r.ms())}
	if err := r.end(); err != nil {
		return allowlist.Entry{}, err
	}
	return e, nil
}

// AddAllowEntry implements account.Store. An invalid prefix is an
// INVALID_REQUEST error.
func (s *Store) AddAllowEntry(ctx context.Context, e allowlist.Entry) error {
	p, err := allowPrefix(e.Prefix)
	if err != nil {
		return err
	}
	e.Prefix = p
	return s.update(ctx, nil, func(t *txn) error {
		b, err := writeBucket(t, bucketAllow)
		if err != nil {
			return err
		}
		k := allowKey(p)
		if b.Get(k) != nil {
			return idkeeper.ErrConflict
		}
		return b.Put(k, encodeAllow(e))
	})
}

// RemoveAllowEntry implements account.Store. An invalid prefix is an
// INVALID_REQUEST error.
func (s *Store) RemoveAllowEntry(ctx context.Context, p netip.Prefix) error {
	p, err := allowPrefix(p)
	if err != nil {
		return err
	}
	return s.update(ctx, nil, func(t *txn) error {
		b := t.tx.Bucket(bucketAllow)
		k := allowKey(p)
		if b == nil || b.Get(k) == nil {
			return idkeeper.ErrNotFound
		}
		return b.Delete(k)
	})
}

// AllowEntries implements account.Store: key order is the contract's order.
func (s *Store) AllowEntries(ctx context.Context) ([]allowlist.Entry, error) {
	out := []allowlist.Entry{}
	err := s.view(ctx, func(t *txn) error {
		b := t.tx.Bucket(bucketAllow)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			e, err := decodeAllow(k, v)
			out = append(out, e)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
