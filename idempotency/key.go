package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/idkeeper/idkeeper"
)

// HeaderKey is the request header that carries the key.
const HeaderKey = "Idempotency-Key"

// MaxKeyLen is the longest key ParseKey accepts, in bytes (after unquoting).
const MaxKeyLen = 255

// ParseKey returns the key in the value of one Idempotency-Key field line. Leading
// and trailing spaces and tabs are ignored. The value is either
//
//   - an RFC 8941 sf-string: `"…"` of printable ASCII (space included), with `\"`
//     and `\\` as the only escapes, and nothing after the closing quote (no
//     parameters); the key is the unescaped content; or
//   - a bare key: visible ASCII (0x21–0x7E) except `"`, `\` and `,`.
//
// `"abc"` and `abc` are the same key. The key has 1 to MaxKeyLen bytes. Any other
// value is an IDEMPOTENCY_KEY_INVALID Error whose message does not repeat it.
func ParseKey(value string) (string, error) {
	v := strings.Trim(value, " \t")
	var key string
	if strings.HasPrefix(v, `"`) {
		k, err := parseSFString(v)
		if err != nil {
			return "", err
		}
		key = k
	} else {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' || c == ',' {
				return "", invalidKey("a bare Idempotency-Key may hold visible ASCII characters other than '\"', '\\' and ','; quote it as a structured-field string otherwise")
			}
		}
		key = v
	}
	if key == "" || len(key) > MaxKeyLen {
		return "", invalidKey("an Idempotency-Key must have 1 to %d characters", MaxKeyLen)
	}
	return key, nil
}

// parseSFString decodes v, which starts with a quote, as an sf-string that makes
// up the whole value (RFC 8941 §4.2.5).
func parseSFString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", invalidKey(`in a quoted Idempotency-Key a backslash may only escape '"' or '\'`)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", invalidKey("a quoted Idempotency-Key must end at its closing quote; parameters are not accepted")
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", invalidKey("a quoted Idempotency-Key may hold printable ASCII characters only")
		default:
			b.WriteByte(c)
		}
		if b.Len() > MaxKeyLen {
			return "", invalidKey("an Idempotency-Key must have 1 to %d characters", MaxKeyLen)
		}
	}
	return "", invalidKey("a quoted Idempotency-Key lacks its closing quote")
}

func invalidKey(format string, args ...any) error {
	return &idkeeper.Error{Code: CodeKeyInvalid, Field: HeaderKey, Message: fmt.Sprintf(format, args...)}
}

// Scope is the store scope of a key: the operation, a colon, and the hex SHA-256 of
// caller, operation and key (each length-prefixed, so no two triples share a
// scope). The key itself is never stored. The same key from another caller or for
// another operation is another scope.
func Scope(caller, operation, key string) string {
	h := sha256.New()
	for _, s := range []string{caller, operation, key} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	return operation + ":" + hex.EncodeToString(h.Sum(nil))
}
