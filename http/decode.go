package http

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/jsonbody"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The request decoders below are pure functions of the body bytes, so they can be
// fuzzed without a server. Each returns a request that passes every check the wire
// format can make, or an INVALID_REQUEST *idkeeper.Error whose Field is the JSON path
// of the offending member ("requester.pid") or "body" when the body as a whole is at
// fault (empty, not UTF-8, malformed, not an object, trailing data).
//
// They decode with internal/jsonbody, stricter than encoding/json: member names match
// exactly (encoding/json matches them case-insensitively), unknown and duplicate
// members are rejected, and a member whose value is null counts as absent.

// MaxPID is the largest PID a requester may carry: PIDs are 32-bit on every OS the
// client runs on.
const MaxPID = math.MaxUint32

// maxFencingTokens bounds the tokens, and the receipts, a Renew may carry: one per
// node ID at most.
const maxFencingTokens = protocol.MaxCount

// The members each body may have: those of its type in internal/wire, which the
// client encodes.
var (
	allocMembers     = wire.Members(wire.AllocRequest{})
	renewMembers     = wire.Members(wire.RenewRequest{})
	removeMembers    = wire.Members(wire.RemoveRequest{})
	requesterMembers = wire.Members(wire.Requester{})
	clientMembers    = wire.Members(wire.Client{})
)

// decodeAllocRequest decodes the body of POST /v1/leases.
func decodeAllocRequest(body []byte) (idkeeper.AllocRequest, error) {
	m, err := jsonbody.Decode(body, allocMembers)
	if err != nil {
		return idkeeper.AllocRequest{}, err
	}
	var req idkeeper.AllocRequest
	if req.Requester, err = requesterMember(m); err != nil {
		return idkeeper.AllocRequest{}, err
	}
	// Above MaxCount is the Registry's COUNT_TOO_LARGE, the gateway's code for a
	// count above its limit too; an integer past int64 is no count at all.
	count, ok, err := m.Int("", "count", 1, math.MaxInt64)
	if err != nil {
		// The bounds a client may ask for, not those of the parse.
		return idkeeper.AllocRequest{}, protocol.Invalidf("count", "count must be an integer from 1 to %d", protocol.MaxCount)
	}
	if !ok {
		return idkeeper.AllocRequest{}, protocol.Invalidf("count", "count is required: the number of node IDs wanted, 1..%d", protocol.MaxCount)
	}
	req.Count = int(count)
	if req.ClientNow, err = m.OptionalTime("", "clientUtcNow"); err != nil {
		return idkeeper.AllocRequest{}, err
	}
	if req.Client, err = clientMember(m); err != nil {
		return idkeeper.AllocRequest{}, err
	}
	return req, nil
}

// clientMember decodes the optional "client" member of an Alloc: host and labels,
// checked against the bounds of idkeeper.ClientInfo.
func clientMember(m jsonbody.Members) (idkeeper.ClientInfo, error) {
	raw, ok := m["client"]
	if !ok {
		return idkeeper.ClientInfo{}, nil
	}
	cm, err := jsonbody.Object(raw, "client.", "client", clientMembers)
	if err != nil {
		return idkeeper.ClientInfo{}, err
	}
	var c idkeeper.ClientInfo
	if c.Host, err = cm.String("client.", "host"); err != nil {
		return idkeeper.ClientInfo{}, err
	}
	if c.Labels, err = cm.StringMap("client.", "labels", protocol.MaxLabels); err != nil {
		return idkeeper.ClientInfo{}, err
	}
	if len(c.Labels) == 0 {
		c.Labels = nil // {} and none are the same report
	}
	return c, c.Validate()
}

// decodeRenewRequest decodes the body of POST /v1/leases/renew.
func decodeRenewRequest(body []byte) (idkeeper.RenewRequest, error) {
	m, err := jsonbody.Decode(body, renewMembers)
	if err != nil {
		return idkeeper.RenewRequest{}, err
	}
	var req idkeeper.RenewRequest
	if req.Requester, err = requesterMember(m); err != nil {
		return idkeeper.RenewRequest{}, err
	}
	if req.ClientNow, err = m.OptionalTime("", "clientUtcNow"); err != nil {
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
	m, err := jsonbody.Decode(body, removeMembers)
	if err != nil {
		return idkeeper.RemoveRequest{}, err
	}
	var req idkeeper.RemoveRequest
	if req.Requester, err = requesterMember(m); err != nil {
		return idkeeper.RemoveRequest{}, err
	}
	t, err := m.OptionalTime("", "mintedUpTo")
	if err != nil {
		return idkeeper.RemoveRequest{}, err
	}
	if t != nil {
		req.MintedUpTo = *t
	}
	return req, nil
}

func requesterMember(m jsonbody.Members) (idkeeper.Requester, error) {
	raw, ok := m["requester"]
	if !ok {
		return idkeeper.Requester{}, protocol.Invalidf("requester", "requester is required: {\"machineId\",\"pid\",\"startedAt\",\"instance\"}")
	}
	rm, err := jsonbody.Object(raw, "requester.", "requester", requesterMembers)
	if err != nil {
		return idkeeper.Requester{}, err
	}
	var r idkeeper.Requester
	if r.MachineID, err = rm.String("requester.", "machineId"); err != nil {
		return idkeeper.Requester{}, err
	}
	pid, _, err := rm.Int("requester.", "pid", 1, MaxPID)
	if err != nil {
		return idkeeper.Requester{}, err
	}
	r.PID = int(pid)
	started, err := rm.OptionalTime("requester.", "startedAt")
	if err != nil {
		return idkeeper.Requester{}, err
	}
	if started != nil {
		r.StartedAt = *started
	}
	if r.Instance, err = rm.String("requester.", "instance"); err != nil {
		return idkeeper.Requester{}, err
	}
	// Validate names the first missing or bad field in a fixed order (machineId, pid,
	// startedAt, instance), so the error does not depend on which members were sent.
	if err := r.Validate(); err != nil {
		return idkeeper.Requester{}, err
	}
	return r, nil
}

// tokensMember reads an array of fencing tokens; nil when absent.
func tokensMember(m jsonbody.Members, name string) ([]uint64, error) {
	raw, ok := m[name]
	if !ok {
		return nil, nil
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, protocol.Invalidf(name, "%s must be an array of fencing tokens", name)
	}
	if len(items) > maxFencingTokens {
		return nil, protocol.Invalidf(name, "%s holds more than %d tokens", name, maxFencingTokens)
	}
	tokens := make([]uint64, len(items))
	for i, it := range items {
		v, err := strconv.ParseUint(string(it), 10, 64)
		if err != nil || v < 1 || v > idkeeper.MaxFencingToken {
			f := fmt.Sprintf("%s[%d]", name, i)
			return nil, protocol.Invalidf(f, "%s must be an integer between 1 and 2^53-1 (%d)", f, uint64(idkeeper.MaxFencingToken))
		}
		tokens[i] = v
	}
	return tokens, nil
}

// receiptsMember reads an array of lease receipts (opaque strings of at most
// idkeeper.MaxReceiptLen characters); nil when absent. Whether they verify is the
// registry's business.
func receiptsMember(m jsonbody.Members, name string) ([]string, error) {
	raw, ok := m[name]
	if !ok {
		return nil, nil
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, protocol.Invalidf(name, "%s must be an array of lease receipts (strings)", name)
	}
	if len(items) > maxFencingTokens {
		return nil, protocol.Invalidf(name, "%s holds more than %d receipts", name, maxFencingTokens)
	}
	out := make([]string, len(items))
	for i, it := range items {
		var s string
		if it[0] != '"' || json.Unmarshal(it, &s) != nil || len(s) > idkeeper.MaxReceiptLen {
			f := fmt.Sprintf("%s[%d]", name, i)
			return nil, protocol.Invalidf(f, "%s must be a receipt string of at most %d characters", f, idkeeper.MaxReceiptLen)
		}
		out[i] = s
	}
	return out, nil
}
