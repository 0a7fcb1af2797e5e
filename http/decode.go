package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// The request decoders below are pure functions of the body bytes, so they can be
// fuzzed without a server. Each returns a request that passes every check the wire
// format can make, or an INVALID_REQUEST *idkeeper.Error whose Field is the JSON path
// of the offending member ("requester.pid") or "body" when the body as a whole is at
// fault (empty, not UTF-8, malformed, not an object, trailing data).
//
// They are stricter than encoding/json: member names match exactly (encoding/json
// matches them case-insensitively), unknown and duplicate members are rejected, and a
// member whose value is null counts as absent.

// MaxPID is the largest PID a requester may carry: PIDs are 32-bit on every OS the
// client runs on.
const MaxPID = math.MaxUint32

// maxFencingTokens bounds the tokens, and the receipts, a Renew may carry: one per
// node ID at most.
const maxFencingTokens = idkeeper.MaxCount

// The members each body may have: those of its type in internal/wire, which the
// client encodes.
var (
	allocMembers     = wire.Members(wire.AllocRequest{})
	renewMembers     = wire.Members(wire.RenewRequest{})
	removeMembers    = wire.Members(wire.RemoveRequest{})
	requesterMembers = wire.Members(wire.Requester{})
)

// decodeAllocRequest decodes the body of POST /v1/leases.
func decodeAllocRequest(body []byte) (idkeeper.AllocRequest, error) {
	m, err := decodeBody(body, allocMembers)
	if err != nil {
		return idkeeper.AllocRequest{}, err
	}
	var req idkeeper.AllocRequest
	if req.Requester, err = requesterMember(m); err != nil {
		return idkeeper.AllocRequest{}, err
	}
	// Above MaxCount is the Registry's COUNT_TOO_LARGE, the gateway's code for a
	// count above its limit too; an integer past int64 is no count at all.
	count, ok, err := intMember(m, "", "count", 1, math.MaxInt64)
	if err != nil {
		return idkeeper.AllocRequest{}, err
	}
	if !ok {
		return idkeeper.AllocRequest{}, idkeeper.Invalidf("count", "count is required: the number of node IDs wanted, 1..%d", idkeeper.MaxCount)
	}
	req.Count = int(count)
	if req.ClientNow, err = optionalTimeMember(m, "", "clientUtcNow"); err != nil {
		return idkeeper.AllocRequest{}, err
	}
	return req, nil
}

// decodeRenewRequest decodes the body of POST /v1/leases/renew.
func decodeRenewRequest(body []byte) (idkeeper.RenewRequest, error) {
	m, err := decodeBody(body, renewMembers)
	if err != nil {
		return idkeeper.RenewRequest{}, err
	}
	var req idkeeper.RenewRequest
	if req.Requester, err = requesterMember(m); err != nil {
		return idkeeper.RenewRequest{}, err
	}
	if req.ClientNow, err = optionalTimeMember(m, "", "clientUtcNow"); err != nil {
		return idkeeper.RenewRequest{}, err
	}
	if req.FencingTokens, err = tokensMember(m, "fencingTokens"); err != nil {
		return idkeeper.RenewRequest{}, err
	}
	if req.Receipts, err = receiptsMember(m, "receipts"); err != nil {
		return idkeeper.RenewRequest{}, err
	}
	return req, nil
}

// decodeRemoveRequest decodes the body of POST /v1/leases/remove.
func decodeRemoveRequest(body []byte) (idkeeper.RemoveRequest, error) {
	m, err := decodeBody(body, removeMembers)
	if err != nil {
		return idkeeper.RemoveRequest{}, err
	}
	var req idkeeper.RemoveRequest
	if req.Requester, err = requesterMember(m); err != nil {
		return idkeeper.RemoveRequest{}, err
	}
	t, err := optionalTimeMember(m, "", "mintedUpTo")
	if err != nil {
		return idkeeper.RemoveRequest{}, err
	}
	if t != nil {
		req.MintedUpTo = *t
	}
	return req, nil
}

// members maps the member names of one JSON object to their raw values, null ones
// left out.
type members map[string]json.RawMessage

// decodeBody checks that body is exactly one JSON object, in UTF-8, with no member
// outside known, and returns its members.
func decodeBody(body []byte, known []string) (members, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, idkeeper.Invalidf("body", "the request body is empty; send a JSON object")
	}
	if !utf8.Valid(body) {
		return nil, idkeeper.Invalidf("body", "the request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var top json.RawMessage
	if err := dec.Decode(&top); err != nil {
		return nil, idkeeper.Invalidf("body", "the request body is not valid JSON: %s", jsonErrText(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, idkeeper.Invalidf("body", "the request body has data after the JSON object")
	}
	return decodeObject(top, "", "body", known)
}

// decodeObject splits a syntactically valid JSON value that must be an object into
// its members. prefix is prepended to member names in error fields; self names the
// object itself.
func decodeObject(raw json.RawMessage, prefix, self string, known []string) (members, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		if self == "body" {
			return nil, idkeeper.Invalidf(self, "the request body must be a JSON object")
		}
		return nil, idkeeper.Invalidf(self, "%s must be a JSON object", self)
	}
	m := members{}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, idkeeper.Invalidf(self, "%s is not valid JSON: %s", self, jsonErrText(err))
		}
		name, _ := t.(string)
		field := prefix + clip(name)
		if name == "" {
			// An empty member name has no path of its own: blame the object holding it.
			field = self
		}
		if !slices.Contains(known, name) {
			return nil, idkeeper.Invalidf(field, "unknown field %q; expected %s", field, strings.Join(known, ", "))
		}
		if seen[name] {
			return nil, idkeeper.Invalidf(field, "field %q appears more than once", field)
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, idkeeper.Invalidf(field, "%s is not valid JSON: %s", field, jsonErrText(err))
		}
		if !bytes.Equal(v, []byte("null")) {
			m[name] = v
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

func requesterMember(m members) (idkeeper.Requester, error) {
	raw, ok := m["requester"]
	if !ok {
		return idkeeper.Requester{}, idkeeper.Invalidf("requester", "requester is required: {\"machineId\",\"pid\",\"startedAt\",\"instance\"}")
	}
	rm, err := decodeObject(raw, "requester.", "requester", requesterMembers)
	if err != nil {
		return idkeeper.Requester{}, err
	}
	var r idkeeper.Requester
	if r.MachineID, err = stringMember(rm, "requester.", "machineId"); err != nil {
		return idkeeper.Requester{}, err
	}
	pid, _, err := intMember(rm, "requester.", "pid", 1, MaxPID)
	if err != nil {
		return idkeeper.Requester{}, err
	}
	r.PID = int(pid)
	started, err := optionalTimeMember(rm, "requester.", "startedAt")
	if err != nil {
		return idkeeper.Requester{}, err
	}
	if started != nil {
		r.StartedAt = *started
	}
	if r.Instance, err = stringMember(rm, "requester.", "instance"); err != nil {
		return idkeeper.Requester{}, err
	}
	// Validate names the first missing or bad field in a fixed order (machineId, pid,
	// startedAt, instance), so the error does not depend on which members were sent.
	if err := r.Validate(); err != nil {
		return idkeeper.Requester{}, err
	}
	return r, nil
}

// stringMember reads a string member; "" when absent.
func stringMember(m members, prefix, name string) (string, error) {
	raw, ok := m[name]
	if !ok {
		return "", nil
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", idkeeper.Invalidf(prefix+name, "%s must be a string", prefix+name)
	}
	return s, nil
}

// intMember reads an integer member and checks it lies in lo..hi; ok is false when
// it is absent.
func intMember(m members, prefix, name string, lo, hi int64) (n int64, ok bool, err error) {
	raw, ok := m[name]
	if !ok {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, false, idkeeper.Invalidf(prefix+name, "%s must be an integer between %d and %d", prefix+name, lo, hi)
	}
	return n, true, nil
}

// optionalTimeMember reads an RFC 3339 timestamp, any offset, returned in UTC and
// truncated to the millisecond; nil when absent.
func optionalTimeMember(m members, prefix, name string) (*time.Time, error) {
	raw, ok := m[name]
	if !ok {
		return nil, nil
	}
	field := prefix + name
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return nil, idkeeper.Invalidf(field, "%s must be an RFC 3339 timestamp string such as %s", field, wire.TimeExample)
	}
	t, err := wire.ParseTime(s)
	if err != nil {
		return nil, idkeeper.Invalidf(field, "%s is not an RFC 3339 timestamp such as %s", field, wire.TimeExample)
	}
	t = idkeeper.Millis(t)
	if t.IsZero() || t.Year() < 1 || t.Year() > 9999 {
		return nil, idkeeper.Invalidf(field, "%s must be a real time in the years 0001 to 9999 (UTC), not the zero time", field)
	}
	return &t, nil
}

// tokensMember reads an array of fencing tokens; nil when absent.
func tokensMember(m members, name string) ([]uint64, error) {
	raw, ok := m[name]
	if !ok {
		return nil, nil
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, idkeeper.Invalidf(name, "%s must be an array of fencing tokens", name)
	}
	if len(items) > maxFencingTokens {
		return nil, idkeeper.Invalidf(name, "%s holds more than %d tokens", name, maxFencingTokens)
	}
	tokens := make([]uint64, len(items))
	for i, it := range items {
		v, err := strconv.ParseUint(string(it), 10, 64)
		if err != nil || v < 1 || v > idkeeper.MaxFencingToken {
			f := fmt.Sprintf("%s[%d]", name, i)
			return nil, idkeeper.Invalidf(f, "%s must be an integer between 1 and 2^53-1 (%d)", f, uint64(idkeeper.MaxFencingToken))
		}
		tokens[i] = v
	}
	return tokens, nil
}

// receiptsMember reads an array of lease receipts (opaque strings of at most
// idkeeper.MaxReceiptLen characters); nil when absent. Whether they verify is the
// registry's business.
func receiptsMember(m members, name string) ([]string, error) {
	raw, ok := m[name]
	if !ok {
		return nil, nil
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, idkeeper.Invalidf(name, "%s must be an array of lease receipts (strings)", name)
	}
	if len(items) > maxFencingTokens {
		return nil, idkeeper.Invalidf(name, "%s holds more than %d receipts", name, maxFencingTokens)
	}
	out := make([]string, len(items))
	for i, it := range items {
		var s string
		if it[0] != '"' || json.Unmarshal(it, &s) != nil || len(s) > idkeeper.MaxReceiptLen {
			f := fmt.Sprintf("%s[%d]", name, i)
			return nil, idkeeper.Invalidf(f, "%s must be a receipt string of at most %d characters", f, idkeeper.MaxReceiptLen)
		}
		out[i] = s
	}
	return out, nil
}
