package gateway

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// APIKeyHeader carries a consumer's key, as on the registry.
const APIKeyHeader = "X-API-Key"

// ConsumerKeys is the set of keys that consumers of a gateway present in
// X-API-Key. Only SHA-256 hashes are kept; a presented key is hashed and compared
// with the stored hash in constant time. The zero value and nil accept nothing;
// a gateway whose Options.ConsumerKeys is nil or empty does not authenticate.
type ConsumerKeys struct {
	byID map[[8]byte][32]byte // first 8 bytes of the hash → the hash
}

// ParseConsumerKeys reads keys, one per line or comma-separated; blank lines and
// lines starting with '#' are skipped, and surrounding spaces are trimmed. Each
// entry is either
//
//   - a SHA-256 hash: "sha256:" followed by 64 hex digits, or 64 hex digits alone
//     (e.g. `printf %s "$KEY" | sha256sum`); or
//   - a plaintext key of at least idkeeper.MinAPIKeyLen characters with no space
//     or comma, hashed at once (only the hash is kept).
//
// A plaintext key of exactly 64 hex digits would read as a hash: give such a key
// as its hash. source names the input in errors (a file name, an environment
// variable); errors never repeat an entry.
func ParseConsumerKeys(text, source string) (*ConsumerKeys, error) {
	k := &ConsumerKeys{byID: map[[8]byte][32]byte{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		for entry := range strings.SplitSeq(l, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			h, err := parseKeyEntry(entry)
			if err != nil {
				return nil, fmt.Errorf("%s line %d: %v", source, line, err)
			}
			k.byID[[8]byte(h[:8])] = h
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", source, err)
	}
	return k, nil
}

func parseKeyEntry(e string) ([32]byte, error) {
	hexHash, prefixed := strings.CutPrefix(e, "sha256:")
	if prefixed || len(e) == 64 && isHex(e) {
		var h [32]byte
		if len(hexHash) != 64 || !isHex(hexHash) {
			return h, fmt.Errorf("a sha256: entry needs 64 hex digits")
		}
		_, _ = hex.Decode(h[:], []byte(strings.ToLower(hexHash)))
		return h, nil
	}
	if len(e) < idkeeper.MinAPIKeyLen || strings.ContainsAny(e, " \t") {
		return [32]byte{}, fmt.Errorf("a plaintext key needs at least %d characters and no spaces", idkeeper.MinAPIKeyLen)
	}
	return sha256.Sum256([]byte(e)), nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// Merge returns a set with the keys of both; either may be nil.
func (k *ConsumerKeys) Merge(o *ConsumerKeys) *ConsumerKeys {
	out := &ConsumerKeys{byID: map[[8]byte][32]byte{}}
	for _, s := range []*ConsumerKeys{k, o} {
		if s != nil {
			for id, h := range s.byID {
				out.byID[id] = h
			}
		}
	}
	return out
}

// Len is the number of keys.
func (k *ConsumerKeys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.byID)
}

var (
	errKeyMissing = protocol.Errorf(protocol.CodeAPIKeyMissing, "the %s header is required", APIKeyHeader)
	errKeyInvalid = protocol.Errorf(protocol.CodeAPIKeyInvalid, "the API key is not valid")
)

// Authenticate checks a presented key and returns its ID: the hex of the first 8
// bytes of its SHA-256 hash, as idkeeper.HashAPIKey computes it, which names the
// consumer in logs and in idempotency scopes. Errors: API_KEY_MISSING,
// API_KEY_INVALID.
func (k *ConsumerKeys) Authenticate(presented string) (string, error) {
	if presented == "" {
		return "", errKeyMissing
	}
	if k == nil {
		return "", errKeyInvalid
	}
	sum := sha256.Sum256([]byte(presented))
	want, ok := k.byID[[8]byte(sum[:8])]
	if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
		return "", errKeyInvalid
	}
	return hex.EncodeToString(sum[:8]), nil
}

// caller names the caller of r in idempotency scopes: "key:" and the key ID when
// the gateway authenticates (a key that got this far is valid), else "ip:" and the
// TCP peer's address. A retried request only finds its first answer under the same
// caller, and an answer is only ever replayed to that caller: one client's IDs are
// never handed to another that happens to send the same Idempotency-Key.
func (s *Server) caller(r *http.Request) string {
	if s.keys.Len() > 0 {
		id, _ := s.keys.Authenticate(r.Header.Get(APIKeyHeader))
		return "key:" + id
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + host
}
