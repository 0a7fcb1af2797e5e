package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// The decoders below are pure functions of the request's bytes, so they are
// fuzzed without a server. Each returns a value that passes every check, or an
// *idkeeper.Error: INVALID_REQUEST with the offending field ("count", "format",
// "body", "id", or the unknown query parameter or member), or COUNT_TOO_LARGE.

// MaxBodyBytes is the largest body POST /v1/ids reads: {"count":N} needs a few
// bytes; anything longer is 413 BODY_TOO_LARGE.
const MaxBodyBytes = 4 << 10

// format is how issued IDs are written.
type format uint8

const (
	formatNumber format = iota // JSON numbers: exact in Go, Java, Python…; not above 2^53 in JavaScript
	formatString               // JSON strings of decimal digits: safe everywhere
)

// parseQuery decodes the query of POST /v1/ids: nothing, or format=number or
// format=string, once. Unknown parameters are refused rather than ignored: a
// misspelt ?fromat=string would otherwise hand a JavaScript client numbers that
// silently lose precision.
func parseQuery(raw string) (format, error) {
	if raw == "" {
		return formatNumber, nil
	}
	f, seen := formatNumber, false
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		if strings.IndexByte(part, ';') >= 0 {
			return 0, protocol.Invalidf("query", "the query may not contain ';'; separate parameters with '&'")
		}
		if part == "" {
			continue
		}
		name, value, _ := strings.Cut(part, "=")
		name, err1 := url.QueryUnescape(name)
		value, err2 := url.QueryUnescape(value)
		if err1 != nil || err2 != nil {
			return 0, protocol.Invalidf("query", "the query is not validly percent-encoded")
		}
		if name != "format" {
			return 0, protocol.Invalidf(name, "unknown query parameter %q; the only one is format=number|string", name)
		}
		if seen {
			return 0, protocol.Invalidf("format", "format is given more than once")
		}
		seen = true
		switch value {
		case "number":
			f = formatNumber
		case "string":
			f = formatString
		default:
			return 0, protocol.Invalidf("format", "format must be number or string")
		}
	}
	return f, nil
}

var errTooLarge = protocol.Errorf(protocol.CodeBodyTooLarge, "the request body is larger than %d bytes", MaxBodyBytes)

// readBody reads r into buf[:0], growing it as needed, up to MaxBodyBytes: it
// reads at most MaxBodyBytes+1 bytes, the one more telling a body too large.
func readBody(r io.Reader, buf []byte) ([]byte, error) {
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, 512)
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), MaxBodyBytes+1)])
		buf = buf[:len(buf)+n]
		if len(buf) > MaxBodyBytes {
			return buf, errTooLarge
		}
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return buf, protocol.Invalidf("body", "the request body could not be read")
		}
	}
}

// decodeCount decodes the body of POST /v1/ids, {"count":N}, with 1 ≤ N ≤ max.
// It is as strict as the registry's decoders: one JSON object, member names
// matched exactly, no unknown or repeated member, count an integer written without
// fraction or exponent, no trailing data.
func decodeCount(body []byte, max int) (int, error) {
	if n, ok := fastCount(body); ok && n >= 1 && n <= int64(max) {
		return int(n), nil
	}
	return slowCount(body, max)
}

// fastCount reads the common shape, optional whitespace around
// {"count":DIGITS}, without allocating. ok is false for anything else, which
// slowCount then decodes, with its error; n may then be out of range.
func fastCount(b []byte) (n int64, ok bool) {
	i := skipWS(b, 0)
	if i == len(b) || b[i] != '{' {
		return 0, false
	}
	i = skipWS(b, i+1)
	if !bytes.HasPrefix(b[i:], []byte(`"count"`)) {
		return 0, false
	}
	i = skipWS(b, i+len(`"count"`))
	if i == len(b) || b[i] != ':' {
		return 0, false
	}
	i = skipWS(b, i+1)
	start := i
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if i-start == 9 { // more than 9 digits: range and overflow are slowCount's
			return 0, false
		}
		n = n*10 + int64(b[i]-'0')
	}
	if i == start || (b[start] == '0' && i-start > 1) {
		return 0, false
	}
	i = skipWS(b, i)
	if i == len(b) || b[i] != '}' {
		return 0, false
	}
	return n, skipWS(b, i+1) == len(b)
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// slowCount decodes any body with encoding/json's tokenizer, for the exact error.
func slowCount(body []byte, max int) (int, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return 0, protocol.Invalidf("body", `the request body is empty; send {"count":N}`)
	}
	if !utf8.Valid(body) {
		return 0, protocol.Invalidf("body", "the request body is not valid UTF-8")
	}
	if !json.Valid(body) {
		return 0, protocol.Invalidf("body", `the request body is not valid JSON; send {"count":N}`)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return 0, protocol.Invalidf("body", `the request body must be a JSON object: {"count":N}`)
	}
	var raw json.RawMessage
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return 0, protocol.Invalidf("body", "the request body is not valid JSON")
		}
		name, _ := tok.(string)
		if name != "count" {
			return 0, protocol.Invalidf(name, "unknown member %q; the only member is count", name)
		}
		if seen {
			return 0, protocol.Invalidf("count", "count appears more than once")
		}
		seen = true
		if err := dec.Decode(&raw); err != nil {
			return 0, protocol.Invalidf("body", "the request body is not valid JSON")
		}
	}
	// json.Valid has vouched for the closing brace and that nothing follows it.
	if !seen {
		return 0, protocol.Invalidf("count", "count is required: the number of IDs wanted, 1..%d", max)
	}
	return countValue(raw, max)
}

// countValue checks the value of the count member, a valid JSON value.
func countValue(v []byte, max int) (int, error) {
	s := string(v)
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, protocol.Invalidf("count", "count must be an integer, written without fraction or exponent, 1..%d", max)
	}
	if s[0] == '-' || strings.Trim(digits, "0") == "" {
		return 0, protocol.Invalidf("count", "count must be at least 1: the number of IDs wanted, 1..%d", max)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > int64(max) {
		return 0, &idkeeper.Error{Code: protocol.CodeCountTooLarge, Field: "count",
			Message: "count is larger than this gateway hands out in one request (" + strconv.Itoa(max) + "); split the request",
			Details: map[string]any{"maxCount": max}}
	}
	return int(n), nil
}

// parseID parses the {id} of GET /v1/ids/{id}: decimal digits of a non-negative
// int64, as the gateway writes IDs in either format.
func parseID(s string) (int64, error) {
	if s == "" || len(s) > 19 || strings.Trim(s, "0123456789") != "" {
		return 0, protocol.Invalidf("id", "the ID must be written in decimal digits, 0..9223372036854775807")
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, protocol.Invalidf("id", "the ID is larger than 9223372036854775807")
	}
	return id, nil
}
