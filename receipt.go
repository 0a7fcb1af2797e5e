package idkeeper

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// MinReceiptSecretLen is the shortest receipt secret accepted, in bytes.
const MinReceiptSecretLen = 32

// MaxReceiptLen bounds the length of a receipt on the wire, in characters.
const MaxReceiptLen = 128

// Receipts are what makes a holder's evidence authentic (DESIGN §7): every lease
// the registry answers with carries a receipt, an HMAC-SHA-256 under a secret kept
// outside the store (the same on every replica) over the node ID, the fencing
// token, the window and the owner (requester and API key). A Renew presents the
// receipts back; only a verified receipt counts as proof that a token was handed
// out (a store whose counter is below it lost writes) or that a forgotten lease
// may be restored after a reset. A key holder cannot forge one, nor use another
// holder's: the MAC binds the requester and the key.
//
// Wire form: base64url without padding of version (1 byte, 1) | node ID (u32) |
// token (u64) | notBefore (i64 Unix ms) | expiresAt (i64 Unix ms) | MAC (first 16
// bytes of HMAC-SHA-256), all big-endian: 60 characters. The MAC covers
// "IDKRCPT" 0x00, the requester key and the key ID (each preceded by its length
// as u16), then the 29 bytes before the MAC.
type receiptSigner struct{ secret []byte }

const (
	receiptVersion = 1
	receiptBody    = 1 + 4 + 8 + 8 + 8
	receiptMAC     = 16
)

var errBadReceipt = errors.New("the receipt does not verify")

func (k receiptSigner) mac(body []byte, requesterKey, keyID string) []byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte("IDKRCPT\x00"))
	var n [2]byte
	for _, s := range []string{requesterKey, keyID} {
		binary.BigEndian.PutUint16(n[:], uint16(min(len(s), 0xffff)))
		m.Write(n[:])
		m.Write([]byte(s))
	}
	m.Write(body)
	return m.Sum(nil)[:receiptMAC]
}

// sign returns the receipt of l.
func (k receiptSigner) sign(l Lease) string {
	b := make([]byte, 0, receiptBody+receiptMAC)
	b = append(b, receiptVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(l.NodeID))
	b = binary.BigEndian.AppendUint64(b, l.FencingToken)
	b = binary.BigEndian.AppendUint64(b, uint64(protocol.Millis(l.NotBefore).UnixMilli()))
	b = binary.BigEndian.AppendUint64(b, uint64(protocol.Millis(l.ExpiresAt).UnixMilli()))
	b = append(b, k.mac(b, l.Requester.Key(), l.KeyID)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// verify returns the claim a receipt makes for requester r and key keyID, or
// errBadReceipt: malformed, another version, a token outside 1..MaxFencingToken,
// or a MAC that does not match (compared in constant time).
func (k receiptSigner) verify(s string, r Requester, keyID string) (Claim, error) {
	if len(s) > MaxReceiptLen {
		return Claim{}, errBadReceipt
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != receiptBody+receiptMAC || b[0] != receiptVersion {
		return Claim{}, errBadReceipt
	}
	if !hmac.Equal(b[receiptBody:], k.mac(b[:receiptBody], r.Key(), keyID)) {
		return Claim{}, errBadReceipt
	}
	c := Claim{
		NodeID:    NodeID(binary.BigEndian.Uint32(b[1:])),
		Token:     binary.BigEndian.Uint64(b[5:]),
		NotBefore: time.UnixMilli(int64(binary.BigEndian.Uint64(b[13:]))).UTC(),
		ExpiresAt: time.UnixMilli(int64(binary.BigEndian.Uint64(b[21:]))).UTC(),
	}
	if c.Token < 1 || c.Token > MaxFencingToken {
		return Claim{}, errBadReceipt
	}
	return c, nil
}
