package bolt

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/audit"
)

// Allow-list key order is netip.Prefix.Compare's order, and keys read back.
func TestAllowKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var ps []netip.Prefix
	for range 2000 {
		var a netip.Addr
		switch rng.IntN(3) {
		case 0:
			a = netip.AddrFrom4([4]byte{byte(rng.IntN(4)), byte(rng.IntN(256)), 0, byte(rng.IntN(256))})
		case 1:
			a = netip.AddrFrom16([16]byte{0x20, 0x01, byte(rng.IntN(3)), 10: 0xff, 11: 0xff, 15: byte(rng.IntN(256))})
		default: // 4-in-6: an IPv6 prefix, after every IPv4 one
			a = netip.AddrFrom16(netip.AddrFrom4([4]byte{byte(rng.IntN(4)), 1, 2, 3}).As16())
		}
		ps = append(ps, netip.PrefixFrom(a, rng.IntN(a.BitLen()+1)).Masked())
	}
	byKey := slices.Clone(ps)
	slices.SortFunc(byKey, func(a, b netip.Prefix) int { return bytes.Compare(allowKey(a), allowKey(b)) })
	slices.SortFunc(ps, netip.Prefix.Compare)
	for i := range ps {
		if byKey[i] != ps[i] {
			t.Fatalf("key order at %d: %s, netip order %s", i, byKey[i], ps[i])
		}
		back, err := keyPrefix(allowKey(ps[i]))
		if err != nil || back != ps[i] {
			t.Fatalf("keyPrefix(allowKey(%s)) = %s, %v", ps[i], back, err)
		}
	}
	for _, k := range [][]byte{nil, make([]byte, 17), append([]byte{2}, make([]byte, 17)...),
		append([]byte{0}, make([]byte, 17)...), // IPv4 family, not a 4-in-6 address
		allowKey(netip.MustParsePrefix("10.0.0.0/8"))[:17]} {
		if _, err := keyPrefix(k); err == nil {
			t.Errorf("keyPrefix(%x): no error", k)
		}
	}
	k := allowKey(netip.MustParsePrefix("10.0.0.0/8"))
	k[17] = 33
	if _, err := keyPrefix(k); err == nil {
		t.Error("keyPrefix of /33 IPv4: no error")
	}
	k[17], k[16] = 8, 1 // unmasked
	if _, err := keyPrefix(k); err == nil {
		t.Error("keyPrefix of an unmasked prefix: no error")
	}
}

// Every record reads back as written, bytes that are not UTF-8 included; every
// cut or changed record is an error or a value, never a panic, and a cut one is
// always an error.
func TestAdminRecordsCorrupt(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	u := account.User{Name: "alice", Role: account.RoleAdmin, PasswordHash: "$argon2id$x", Disabled: true, CreatedAt: at,
		CreatedBy: "root", Epoch: 3, PasswordChangedAt: at, Version: 7}
	sess := account.Session{ID: "ab", User: "alice", Epoch: 3, CreatedAt: at, SeenAt: at, ExpiresAt: at.Add(time.Hour),
		RemoteIP: "192.0.2.1", UserAgent: "bad \xff utf-8"}
	allow := allowlist.Entry{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Note: "n", CreatedBy: "alice", CreatedAt: at}
	audit := audit.Entry{At: at, Actor: "user:alice", Action: "x", Detail: "\xc3"}.Seal(4, "prev")
	ak, sk := allowKey(allow.Prefix), auditKey(audit.Seq)

	for _, c := range []struct {
		name   string
		v      []byte
		decode func([]byte) (any, error)
		want   any
	}{
		{"user", encodeUser(u), func(v []byte) (any, error) { return decodeUser("alice", v) }, u},
		{"session", encodeSession(sess), func(v []byte) (any, error) { return decodeSession("ab", v) }, sess},
		{"allow", encodeAllow(allow), func(v []byte) (any, error) { return decodeAllow(ak, v) }, allow},
		{"audit", encodeAudit(audit), func(v []byte) (any, error) { return decodeAudit(sk, v) }, audit},
	} {
		got, err := c.decode(c.v)
		if err != nil || got != c.want {
			t.Fatalf("%s: read back %+v, %v; want %+v", c.name, got, err, c.want)
		}
		for n := range len(c.v) {
			if _, err := c.decode(c.v[:n]); err == nil {
				t.Errorf("%s cut to %d of %d bytes: no error", c.name, n, len(c.v))
			}
		}
		if _, err := c.decode(append(slices.Clone(c.v), 0)); err == nil {
			t.Errorf("%s with a trailing byte: no error", c.name)
		}
		for i := range c.v {
			for _, x := range []byte{0x01, 0x80, 0xff} {
				v := slices.Clone(c.v)
				v[i] ^= x
				c.decode(v) // must not panic
			}
		}
		v := slices.Clone(c.v)
		v[0] = adminFormat + 1
		if _, err := c.decode(v); err == nil {
			t.Errorf("%s of a newer format: no error", c.name)
		}
	}
}

// A user's webhook is the record's last field, written only when set: the record
// of a user without one is byte for byte what builds before webhooks wrote, and
// such a record reads with Webhook "". Every other cut of a record with a webhook
// is an error, and so is an empty webhook (never written).
func TestUserRecordWebhook(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old := account.User{Name: "alice", Role: account.RoleViewer, PasswordHash: "$argon2id$x", CreatedAt: at,
		CreatedBy: "root", Epoch: 2, PasswordChangedAt: at, LastLoginAt: at.Add(time.Minute), Version: 4}
	// The record as builds before webhooks wrote it, field by field.
	legacy := []byte{adminFormat, 6}
	legacy = append(legacy, "viewer"...)
	legacy = append(legacy, 11)
	legacy = append(legacy, "$argon2id$x"...)
	legacy = append(legacy, 0) // not disabled
	legacy = binary.BigEndian.AppendUint64(legacy, uint64(at.UnixMilli()))
	legacy = append(legacy, 4)
	legacy = append(legacy, "root"...)
	legacy = binary.BigEndian.AppendUint64(legacy, 2)
	legacy = binary.BigEndian.AppendUint64(legacy, uint64(at.UnixMilli()))
	legacy = binary.BigEndian.AppendUint64(legacy, uint64(at.Add(time.Minute).UnixMilli()))
	legacy = binary.BigEndian.AppendUint64(legacy, 4)
	if enc := encodeUser(old); !bytes.Equal(enc, legacy) {
		t.Fatalf("a user without a webhook encodes as\n%x\nnot as before webhooks\n%x", enc, legacy)
	}
	got, err := decodeUser("alice", legacy)
	if err != nil || got != old || got.Webhook != "" {
		t.Fatalf("the record of an older build reads %+v, %v; want %+v", got, err, old)
	}

	withHook := old
	withHook.Webhook = "https://discord.com/api/webhooks/123/tok_abcdefghijklmnop"
	v := encodeUser(withHook)
	if got, err := decodeUser("alice", v); err != nil || got != withHook {
		t.Fatalf("read back %+v, %v; want %+v", got, err, withHook)
	}
	for n := range len(v) {
		got, err := decodeUser("alice", v[:n])
		switch {
		case n == len(legacy):
			if err != nil || got != old {
				t.Errorf("cut before the webhook: %+v, %v; want the user without it", got, err)
			}
		case err == nil:
			t.Errorf("cut to %d of %d bytes: no error", n, len(v))
		}
	}
	if _, err := decodeUser("alice", append(slices.Clone(legacy), 0)); err == nil {
		t.Error("an empty webhook: no error")
	}
	if _, err := decodeUser("alice", append(slices.Clone(v), 0)); err == nil {
		t.Error("a byte after the webhook: no error")
	}
}
