// Package jsonbody reads and decodes the JSON request bodies of IdKeeper's HTTP
// APIs (the registry's /v1 routes in package http, the admin API in package
// admin) with one set of rules, so every route refuses the same bodies the same
// way.
//
// Read checks the media type and the size; Decode checks that a body is exactly
// one JSON object of known members. Both are stricter than encoding/json: member
// names match exactly (encoding/json matches them case-insensitively), unknown and
// duplicate members are rejected, and a member whose value is null counts as
// absent (DecodeNulls tells which were null, for a route where null means
// something). Every error is an *idkeeper.Error: INVALID_REQUEST whose Field is
// the JSON path of the offending member ("requester.pid") or "body" when the body
// as a whole is at fault (empty, not UTF-8, malformed, not an object, trailing
// data); UNSUPPORTED_MEDIA_TYPE and BODY_TOO_LARGE from Read.
//
// It uses the standard library, the root idkeeper package, internal/problem and
// internal/wire only.
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// Read returns the request body after checking its media type
// (problem.CheckJSONContentType) and that it has at most limit bytes.
func Read(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if err := problem.CheckJSONContentType(r.Header.Get("Content-Type")); err != nil {
		return nil, err
	}
	if r.ContentLength > limit {
		return nil, TooLarge(limit)
	}
	var buf bytes.Buffer
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, TooLarge(limit)
	case err != nil:
		return nil, protocol.Invalidf("body", "the request body could not be read: %v", err)
	}
	return buf.Bytes(), nil
}

// TooLarge is the BODY_TOO_LARGE Error of a body over limit bytes.
func TooLarge(limit int64) error {
	return protocol.Errorf(protocol.CodeBodyTooLarge, "the request body is larger than %d bytes", limit)
}

// Members maps the member names of one JSON object to their raw values, null ones
// left out.
type Members map[string]json.RawMessage

// Decode checks that body is exactly one JSON object, in UTF-8, with no member
// outside known, and returns its members.
func Decode(body []byte, known []string) (Members, error) {
	m, _, err := decode(body, known, false)
	return m, err
}

// DecodeNulls is Decode that also returns the names of the members whose value
// is null (absent from the Members), for a body in which null says something of
// its own ("expiresAt": null: never).
func DecodeNulls(body []byte, known []string) (Members, map[string]bool, error) {
	return decode(body, known, true)
}

func decode(body []byte, known []string, wantNulls bool) (Members, map[string]bool, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil, protocol.Invalidf("body", "the request body is empty; send a JSON object")
	}
	if !utf8.Valid(body) {
		return nil, nil, protocol.Invalidf("body", "the request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var top json.RawMessage
	if err := dec.Decode(&top); err != nil {
		return nil, nil, protocol.Invalidf("body", "the request body is not valid JSON: %s", jsonErrText(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, protocol.Invalidf("body", "the request body has data after the JSON object")
	}
	var nulls map[string]bool
	if wantNulls {
		nulls = map[string]bool{}
	}
	m, err := object(top, "", "body", known, nulls)
	return m, nulls, err
}

// Object splits a syntactically valid JSON value that must be an object into
// its members. prefix is prepended to member names in error fields; self names the
// object itself.
func Object(raw json.RawMessage, prefix, self string, known []string) (Members, error) {
	return object(raw, prefix, self, known, nil)
}

func object(raw json.RawMessage, prefix, self string, known []string, nulls map[string]bool) (Members, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		if self == "body" {
			return nil, protocol.Invalidf(self, "the request body must be a JSON object")
		}
		return nil, protocol.Invalidf(self, "%s must be a JSON object", self)
	}
	m := Members{}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, protocol.Invalidf(self, "%s is not valid JSON: %s", self, jsonErrText(err))
		}
		name, _ := t.(string)
		field := prefix + clip(name)
		if name == "" {
			// An empty member name has no path of its own: blame the object holding it.
			field = self
		}
		if !slices.Contains(known, name) {
			return nil, protocol.Invalidf(field, "unknown field %q; expected %s", field, strings.Join(known, ", "))
		}
		if seen[name] {
			return nil, protocol.Invalidf(field, "field %q appears more than once", field)
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, protocol.Invalidf(field, "%s is not valid JSON: %s", field, jsonErrText(err))
		}
		if !bytes.Equal(v, []byte("null")) {
			m[name] = v
		} else if nulls != nil {
			nulls[name] = true
		}
	}
	return m, nil
}

// maxEchoedName bounds how much of an unknown member name an error repeats.
const maxEchoedName = 64

// clip shortens s to at most maxEchoedName bytes, on a rune boundary, marking the cut.
func clip(s string) string {
	if len(s) <= maxEchoedName {
		return s
	}
	cut := maxEchoedName
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// jsonErrText is the decoder's message without the Go type names it may carry.
func jsonErrText(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "unexpected end of input"
	}
	return "malformed value"
}

// StringMap reads a member that must be an object of string values, with at
// most max members, none repeated; nil when absent. Member names are free:
// the caller checks them.
func (m Members) StringMap(prefix, name string, max int) (map[string]string, error) {
	raw, ok := m[name]
	if !ok {
		return nil, nil
	}
	field := prefix + name
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, protocol.Invalidf(field, "%s must be a JSON object of strings", field)
	}
	out := map[string]string{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, protocol.Invalidf(field, "%s is not valid JSON: %s", field, jsonErrText(err))
		}
		k, _ := t.(string)
		if _, dup := out[k]; dup {
			return nil, protocol.Invalidf(field, "%s holds %q more than once", field, clip(k))
		}
		if len(out) == max {
			return nil, protocol.Invalidf(field, "%s holds more than %d members", field, max)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, protocol.Invalidf(field, "%s is not valid JSON: %s", field, jsonErrText(err))
		}
		var s string
		if v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return nil, protocol.Invalidf(field, "%s.%s must be a string", field, clip(k))
		}
		out[k] = s
	}
	return out, nil
}

// String reads a string member; "" when absent.
func (m Members) String(prefix, name string) (string, error) {
	raw, ok := m[name]
	if !ok {
		return "", nil
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", protocol.Invalidf(prefix+name, "%s must be a string", prefix+name)
	}
	return s, nil
}

// Int reads an integer member and checks it lies in lo..hi; ok is false when it
// is absent.
func (m Members) Int(prefix, name string, lo, hi int64) (n int64, ok bool, err error) {
	raw, ok := m[name]
	if !ok {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, false, protocol.Invalidf(prefix+name, "%s must be an integer between %d and %d", prefix+name, lo, hi)
	}
	return n, true, nil
}

// Bool reads a boolean member; ok is false when it is absent.
func (m Members) Bool(prefix, name string) (v, ok bool, err error) {
	raw, ok := m[name]
	if !ok {
		return false, false, nil
	}
	switch string(raw) {
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	}
	return false, false, protocol.Invalidf(prefix+name, "%s must be true or false", prefix+name)
}

// OptionalTime reads an RFC 3339 timestamp, any offset, returned in UTC and
// truncated to the millisecond; nil when absent.
func (m Members) OptionalTime(prefix, name string) (*time.Time, error) {
	raw, ok := m[name]
	if !ok {
		return nil, nil
	}
	field := prefix + name
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return nil, protocol.Invalidf(field, "%s must be an RFC 3339 timestamp string such as %s", field, wire.TimeExample)
	}
	t, err := wire.ParseTime(s)
	if err != nil {
		return nil, protocol.Invalidf(field, "%s is not an RFC 3339 timestamp such as %s", field, wire.TimeExample)
	}
	t = protocol.Millis(t)
	if t.IsZero() || t.Year() < 1 || t.Year() > 9999 {
		return nil, protocol.Invalidf(field, "%s must be a real time in the years 0001 to 9999 (UTC), not the zero time", field)
	}
	return &t, nil
}
