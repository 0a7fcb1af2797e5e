package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"unicode/utf8"
)

// fingerprintVersion starts every fingerprint's hash input, so a change of the
// canonical form can never match a record made by an older one.
const fingerprintVersion = "idkeeper-idempotency-fingerprint/1"

// Fingerprint identifies a request for comparison with the one that first used a
// key: the hex SHA-256 of the method, the target (path and query, as Target gives
// it) and the body's canonical form.
//
// A body that is one valid JSON value in UTF-8 is canonical after decoding and
// re-encoding: object members sorted by name, no insignificant whitespace, numbers
// as written (1.0 and 1 differ), strings with minimal escapes, and for a repeated
// member name the last one (as Go's decoder reads it). So member order and
// whitespace do not change the fingerprint. Any other body counts byte for byte.
// A JSON body and a non-JSON body never share a fingerprint.
func Fingerprint(method, target string, body []byte) string {
	h := sha256.New()
	field := func(b []byte) {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
	}
	field([]byte(fingerprintVersion))
	field([]byte(method))
	field([]byte(target))
	if c, ok := canonicalJSON(body); ok {
		field([]byte("json"))
		field(c)
	} else {
		field([]byte("raw"))
		field(body)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// canonicalJSON returns the canonical form of body when it is one JSON value.
func canonicalJSON(body []byte) ([]byte, bool) {
	// The decoder would replace invalid UTF-8 by U+FFFD, making different bodies
	// look the same.
	if !utf8.Valid(body) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, false
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), true
}

// Target is the request target as Fingerprint takes it: the escaped path, then,
// when there is a query, "?" and the query with its parameters sorted by name
// (values of one name keep their order). A query that does not parse is kept as
// sent.
func Target(u *url.URL) string {
	path := u.EscapedPath()
	if u.RawQuery == "" {
		return path
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return path + "?" + u.RawQuery
	}
	return path + "?" + q.Encode()
}
