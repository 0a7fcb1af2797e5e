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
	"strconv"
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
// as written (1.0 and 1 differ), strings with minimal escapes. So member order and
// whitespace do not change the fingerprint. Any other body counts byte for byte,
// and so does a JSON body whose canonical form would lose what it says: an object
// with a repeated member name (parsers disagree on which one counts:
// {"count":1,"count":2} is not {"count":2}) or a string with an unpaired
// surrogate escape (\ud800, which decodes to U+FFFD like any other). A JSON body
// and a non-JSON body never share a fingerprint.
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
	if loneSurrogate(body) || repeatedName(body) {
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

// repeatedName reports whether an object in body, one valid JSON value, has two
// members of the same name (after unescaping: "a" and "\u0061" are one name).
func repeatedName(body []byte) bool {
	if bytes.IndexByte(body, '{') < 0 {
		return false
	}
	type frame struct {
		names map[string]bool // nil for an array
		key   bool            // an object's next token is a member name
	}
	var stack []frame
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return false // io.EOF: the value is done
		}
		if n := len(stack); n > 0 && stack[n-1].names != nil && stack[n-1].key {
			if name, ok := tok.(string); ok {
				if stack[n-1].names[name] {
					return true
				}
				stack[n-1].names[name] = true
				stack[n-1].key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{names: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value has ended: the enclosing object expects a name next.
		if n := len(stack); n > 0 && stack[n-1].names != nil {
			stack[n-1].key = true
		}
	}
}

// loneSurrogate reports whether body, valid JSON, has a \uXXXX escape of a
// surrogate that is not a high one followed by a low one.
func loneSurrogate(body []byte) bool {
	surrogate := func(i int) (rune, bool) { // the escape at body[i:], if it is \uD800–\uDFFF
		if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
		return rune(v), err == nil && v >= 0xd800 && v <= 0xdfff
	}
	for i := bytes.IndexByte(body, '\\'); i >= 0 && i+1 < len(body); {
		if body[i] != '\\' {
			i++
			continue
		}
		if body[i+1] != 'u' {
			i += 2 // \" \\ \/ \b …: never part of a \u escape
			continue
		}
		r, ok := surrogate(i)
		if !ok {
			i += 6
			continue
		}
		if r >= 0xdc00 {
			return true // a low surrogate first
		}
		low, ok := surrogate(i + 6)
		if !ok || low < 0xdc00 {
			return true
		}
		i += 12
	}
	return false
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
