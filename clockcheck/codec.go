// Package clockcheck implements TCKCLK 2, the cluster clock-health protocol of
// DESIGN §8: an Agent that reports a trusted time source's time, a Verifier that
// samples an agent and bounds the local clock's error, and a Monitor that keeps
// sampling and fails closed, for good, when a check fails.
//
// The wire format is one line each way per TCP connection:
//
//	request:  TCKCLK 2 <nonce>\n
//	response: TCKCLK 2 <nonce> <reference_unix_ms> <uncertainty_ms> <synced> <source_age_ms> <mac>\n
//
// A line is at most MaxLine bytes without its LF. Fields are separated by exactly
// one space. Decimals are canonical: ASCII digits only, no sign, no leading zero
// except "0" itself, at most 2^64−1. nonce is 16 random bytes in base64url without
// padding (22 characters, trailing bits zero); synced is "0" or "1"; mac is the
// base64url-no-pad (43 characters) of HMAC-SHA-256(secret, m) with
//
//	m = "TCKCLK\x00" ‖ version:u16 BE ‖ nonce:16 bytes ‖ reference_unix_ms:u64 BE ‖
//	    uncertainty_ms:u64 BE ‖ synced:u8 ‖ source_age_ms:u64 BE
//
// (50 bytes). The secret is at least MinSecretLen bytes. Parsing is strict: any
// other byte sequence is refused, so that every accepted line re-encodes to
// exactly the same bytes.
package clockcheck

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
)

// Protocol constants.
const (
	// Version is the protocol version this package speaks.
	Version = 2
	// MaxLine is the longest line, in bytes without the LF, either side accepts.
	MaxLine = 256
	// MinSecretLen is the shortest secret, in bytes, that is accepted.
	MinSecretLen = 32
	// NonceLen is the size of a nonce in bytes.
	NonceLen = 16
)

const (
	magic       = "TCKCLK"
	macDomain   = "TCKCLK\x00"
	nonceB64Len = 22 // base64url-no-pad of 16 bytes
	macB64Len   = 43 // base64url-no-pad of 32 bytes
)

var b64 = base64.RawURLEncoding.Strict()

// checkSecret refuses a secret shorter than MinSecretLen.
func checkSecret(secret []byte) error {
	if len(secret) < MinSecretLen {
		return fmt.Errorf("clockcheck: the secret has %d bytes, want at least %d", len(secret), MinSecretLen)
	}
	return nil
}

// Request is a TCKCLK 2 request: a fresh nonce.
type Request struct {
	Nonce [NonceLen]byte
}

// NewRequest returns a request with a nonce from crypto/rand.
func NewRequest() Request {
	var r Request
	_, _ = rand.Read(r.Nonce[:]) // crypto/rand.Read never fails (Go ≥ 1.24).
	return r
}

// AppendLine appends the request line, LF included, to b.
func (r Request) AppendLine(b []byte) []byte {
	b = append(b, magic+" "...)
	b = strconv.AppendUint(b, Version, 10)
	b = append(b, ' ')
	b = b64.AppendEncode(b, r.Nonce[:])
	return append(b, '\n')
}

// ParseRequest parses a request line given without its LF. It returns a *Failure
// with ReasonSize for a line over MaxLine bytes, ReasonVersion for a TCKCLK line
// of another version, and ReasonFormat for anything else that is not exactly
// "TCKCLK 2 <nonce>".
func ParseRequest(line []byte) (Request, error) {
	var r Request
	f, err := splitLine(line, 3)
	if err != nil {
		return r, err
	}
	if r.Nonce, err = parseNonce(f[2]); err != nil {
		return r, err
	}
	return r, nil
}

// Response is a TCKCLK 2 response, without its MAC.
type Response struct {
	Nonce           [NonceLen]byte
	ReferenceUnixMs uint64 // the trusted source's time, ms since the Unix epoch
	UncertaintyMs   uint64 // the agent's honest bound on ReferenceUnixMs's error, ms
	Synced          bool   // a fresh, valid source sample backs the answer
	SourceAgeMs     uint64 // age of that source sample, ms
}

// MAC returns HMAC-SHA-256(secret, m) over the 50-byte layout in the package
// comment. It does not check the secret's length.
func (r Response) MAC(secret []byte) [32]byte {
	var m [50]byte
	copy(m[:], macDomain)
	binary.BigEndian.PutUint16(m[7:], Version)
	copy(m[9:], r.Nonce[:])
	binary.BigEndian.PutUint64(m[25:], r.ReferenceUnixMs)
	binary.BigEndian.PutUint64(m[33:], r.UncertaintyMs)
	if r.Synced {
		m[41] = 1
	}
	binary.BigEndian.PutUint64(m[42:], r.SourceAgeMs)
	h := hmac.New(sha256.New, secret)
	h.Write(m[:])
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// AppendLine appends the response line, MAC and LF included, to b.
func (r Response) AppendLine(b, secret []byte) []byte {
	return r.appendLine(b, r.MAC(secret))
}

func (r Response) appendLine(b []byte, mac [32]byte) []byte {
	b = append(b, magic+" "...)
	b = strconv.AppendUint(b, Version, 10)
	b = append(b, ' ')
	b = b64.AppendEncode(b, r.Nonce[:])
	b = append(b, ' ')
	b = strconv.AppendUint(b, r.ReferenceUnixMs, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, r.UncertaintyMs, 10)
	if r.Synced {
		b = append(b, " 1 "...)
	} else {
		b = append(b, " 0 "...)
	}
	b = strconv.AppendUint(b, r.SourceAgeMs, 10)
	b = append(b, ' ')
	b = b64.AppendEncode(b, mac[:])
	return append(b, '\n')
}

// ParseResponse parses a response line given without its LF, checks that it
// echoes want and that its MAC verifies under secret (in constant time), and
// returns it. It checks in this order and returns a *Failure with the first
// reason that applies: ReasonSize (over MaxLine bytes), ReasonVersion (a TCKCLK
// line of another version), ReasonFormat (anything not exactly the response
// syntax), ReasonNonce (another nonce), ReasonMAC (a MAC that does not verify,
// or a secret under MinSecretLen). A response with synced = 0 parses: judging it
// is the Verifier's job.
func ParseResponse(line, secret []byte, want [NonceLen]byte) (Response, error) {
	r, mac, err := parseResponseSyntax(line)
	if err != nil {
		return Response{}, err
	}
	if r.Nonce != want {
		return Response{}, fail(ReasonNonce, "the response echoes nonce %s, want %s", b64.EncodeToString(r.Nonce[:]), b64.EncodeToString(want[:]))
	}
	if err := checkSecret(secret); err != nil {
		return Response{}, &Failure{Reason: ReasonMAC, Err: err}
	}
	got := r.MAC(secret)
	if !hmac.Equal(mac[:], got[:]) {
		return Response{}, fail(ReasonMAC, "the response's MAC does not verify (wrong secret, or a tampered answer)")
	}
	return r, nil
}

// parseResponseSyntax parses a response line without judging its nonce or MAC.
func parseResponseSyntax(line []byte) (r Response, mac [32]byte, err error) {
	f, err := splitLine(line, 8)
	if err != nil {
		return r, mac, err
	}
	if r.Nonce, err = parseNonce(f[2]); err != nil {
		return r, mac, err
	}
	if r.ReferenceUnixMs, err = parseDecimal("reference_unix_ms", f[3]); err != nil {
		return r, mac, err
	}
	if r.UncertaintyMs, err = parseDecimal("uncertainty_ms", f[4]); err != nil {
		return r, mac, err
	}
	switch string(f[5]) {
	case "0":
	case "1":
		r.Synced = true
	default:
		return r, mac, fail(ReasonFormat, "synced is %q, want 0 or 1", clip(f[5]))
	}
	if r.SourceAgeMs, err = parseDecimal("source_age_ms", f[6]); err != nil {
		return r, mac, err
	}
	if len(f[7]) != macB64Len {
		return r, mac, fail(ReasonFormat, "the mac has %d characters, want %d", len(f[7]), macB64Len)
	}
	// Decode skips CR and LF: a short count means the field held some.
	if k, err := b64.Decode(mac[:], f[7]); err != nil || k != len(mac) {
		return r, mac, fail(ReasonFormat, "the mac is not canonical base64url without padding")
	}
	return r, mac, nil
}

// splitLine checks the size, the magic and the version of a line and splits it
// into exactly n single-space-separated, non-empty fields.
func splitLine(line []byte, n int) ([][]byte, error) {
	if len(line) > MaxLine {
		return nil, fail(ReasonSize, "the line has %d bytes, at most %d allowed", len(line), MaxLine)
	}
	f := bytes.Split(line, []byte{' '})
	if string(f[0]) != magic {
		return nil, fail(ReasonFormat, "the line does not start with %q", magic+" ")
	}
	if len(f) < 2 {
		return nil, fail(ReasonFormat, "the line has no version")
	}
	// The version is judged before the rest: another version may have another layout.
	v, err := parseDecimal("version", f[1])
	if err != nil {
		return nil, err
	}
	if v != Version {
		return nil, fail(ReasonVersion, "version %d, want %d", v, Version)
	}
	if len(f) != n {
		return nil, fail(ReasonFormat, "the line has %d space-separated fields, want %d", len(f), n)
	}
	for i, x := range f {
		if len(x) == 0 {
			return nil, fail(ReasonFormat, "field %d is empty (a space too many)", i+1)
		}
	}
	return f, nil
}

// parseNonce decodes a nonce, refusing every encoding but the canonical one.
func parseNonce(s []byte) (n [NonceLen]byte, err error) {
	if len(s) != nonceB64Len {
		return n, fail(ReasonFormat, "the nonce has %d characters, want %d", len(s), nonceB64Len)
	}
	// Decode skips CR and LF: a short count means the field held some.
	if k, err := b64.Decode(n[:], s); err != nil || k != len(n) {
		return n, fail(ReasonFormat, "the nonce is not canonical base64url without padding")
	}
	return n, nil
}

// parseDecimal parses a canonical decimal that fits in a uint64.
func parseDecimal(name string, s []byte) (uint64, error) {
	if len(s) == 0 || len(s) > 20 {
		return 0, fail(ReasonFormat, "%s %q is not a decimal of 1 to 20 digits", name, clip(s))
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fail(ReasonFormat, "%s %q holds a non-digit", name, clip(s))
		}
	}
	if s[0] == '0' && len(s) > 1 {
		return 0, fail(ReasonFormat, "%s %q has a leading zero", name, clip(s))
	}
	v, err := strconv.ParseUint(string(s), 10, 64)
	if err != nil {
		return 0, fail(ReasonFormat, "%s %q does not fit in 64 bits", name, clip(s))
	}
	return v, nil
}

// clip shortens a field quoted in an error.
func clip(s []byte) string {
	if len(s) > 24 {
		return string(s[:24]) + "…"
	}
	return string(s)
}
