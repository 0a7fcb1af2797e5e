// Package wire is the JSON of IdKeeper's HTTP APIs, defined once for both sides:
// the bodies of the registry API (docs/api.md; written by package http, read by
// the client library) and of the ID gateway (docs/gateway.md), the members of a
// problem+json body, and the format of every time they carry. The server, the
// client, the gateway and cmd/idkeeper all use it. Standard library only.
//
// The types are plain data whose JSON member names and omitempty flags are the
// contract: changing one changes the bytes on the wire for every side. A pointer
// field is a member that a reader must tell from its zero value when it is
// missing (nodeId 0 is a node ID; a 200 without "removed" is malformed); a writer
// always sets it. Times are strings in TimeFormat. Checking a body (unknown
// members, ranges, required members) is the reader's business: the registry
// decodes requests strictly, member by member, and takes the accepted member
// names from these types (Members).
package wire

import (
	"reflect"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/snowflake"
)

// TimeFormat is the layout of every time the APIs send: RFC 3339 in UTC with
// milliseconds, e.g. TimeExample. It is snowflake.TimeFormat, defined there once.
const TimeFormat = snowflake.TimeFormat

// TimeExample is a time in TimeFormat, for messages and docs.
const TimeExample = "2026-01-01T00:00:00.000Z"

// FormatTime renders t in TimeFormat, in UTC.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// ParseTime reads an RFC 3339 time with any offset and any fraction of a second
// (a reader accepts more than TimeFormat) and returns it in UTC. It keeps every
// digit of the fraction: rounding to the millisecond is the reader's decision.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

// Requester is the "requester" member of the registry's lease requests.
type Requester struct {
	MachineID string `json:"machineId"`
	PID       int    `json:"pid"`
	StartedAt string `json:"startedAt"`
	Instance  string `json:"instance,omitempty"`
}

// AllocRequest is the body of POST /v1/leases.
type AllocRequest struct {
	Requester    Requester `json:"requester"`
	Count        int       `json:"count"`
	ClientUtcNow string    `json:"clientUtcNow"`
	Client       *Client   `json:"client,omitempty"`
}

// Client is what a client reports about itself with Alloc, for the lease
// history (idkeeper.ClientInfo).
type Client struct {
	Host   string            `json:"host,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// RenewRequest is the body of POST /v1/leases/renew.
type RenewRequest struct {
	Requester     Requester `json:"requester"`
	ClientUtcNow  string    `json:"clientUtcNow"`
	FencingTokens []uint64  `json:"fencingTokens"`
	Receipts      []string  `json:"receipts,omitempty"`
}

// RemoveRequest is the body of POST /v1/leases/remove.
type RemoveRequest struct {
	Requester  Requester `json:"requester"`
	MintedUpTo string    `json:"mintedUpTo,omitempty"`
}

// Layout is the ID layout, in the answers of Alloc and of /v1/version (the
// registry's and the gateway's).
type Layout struct {
	Epoch         string `json:"epoch"`
	TimestampBits int    `json:"timestampBits"`
	NodeBits      int    `json:"nodeBits"`
	SequenceBits  int    `json:"sequenceBits"`
}

// Lease is one node-ID lease in the answers of Alloc and Renew.
type Lease struct {
	NodeID       *int64  `json:"nodeId"`
	NotBefore    string  `json:"notBefore"`
	ExpiresAt    string  `json:"expiresAt"`
	FencingToken *uint64 `json:"fencingToken"`
	Receipt      string  `json:"receipt,omitempty"`
}

// AllocResponse is the 200 body of POST /v1/leases. A writer sends Leases as []
// when it grants none, never null.
type AllocResponse struct {
	Layout       *Layout `json:"layout"`
	Leases       []Lease `json:"leases"`
	ServerUtcNow string  `json:"serverUtcNow"`
}

// RenewResponse is the 200 body of POST /v1/leases/renew: [] is the definite
// "holds nothing" answer, never null.
type RenewResponse struct {
	Leases       []Lease `json:"leases"`
	ServerUtcNow string  `json:"serverUtcNow"`
}

// RemoveResponse is the 200 body of POST /v1/leases/remove.
type RemoveResponse struct {
	Removed *int `json:"removed"`
}

// RemainingResponse is the 200 body of GET /v1/leases/remaining. First and Last
// are the pool's node range, inclusive (Total = Last − First + 1). Remaining counts
// ready and cooling node IDs; Cooling is the part of it whose grant would open its
// window only at a later time, NextReadyAt the earliest such time (absent when
// Cooling is 0).
type RemainingResponse struct {
	First       int64  `json:"first"`
	Last        int64  `json:"last"`
	Total       int    `json:"total"`
	Remaining   int    `json:"remaining"`
	Leased      int    `json:"leased"`
	InGrace     int    `json:"inGrace"`
	Quarantined int    `json:"quarantined"`
	Cooling     int    `json:"cooling"`
	NextReadyAt string `json:"nextReadyAt,omitempty"`
}

// VersionResponse is the 200 body of GET /v1/version. The registry always sends
// a layout and its node range; the gateway sends a null layout until it holds a
// lease, and no node range (it has none).
type VersionResponse struct {
	Version   string     `json:"version"`
	Commit    string     `json:"commit"`
	Layout    *Layout    `json:"layout"`
	NodeRange *NodeRange `json:"nodeRange,omitempty"`
}

// NodeRange is a registry's pool: the node IDs First..Last, both included, which it
// alone grants (issue #22). Two registries on separate stores with disjoint ranges
// never grant the same node ID.
type NodeRange struct {
	First int64 `json:"first"`
	Last  int64 `json:"last"`
}

// StatusResponse is the 200 body of the health probes: {"status":"ok"} or
// {"status":"ready"}.
type StatusResponse struct {
	Status string `json:"status"`
}

// ReadyResponse is the registry's 200 body of GET /readyz.
type ReadyResponse struct {
	Status     string     `json:"status"`
	Generation Generation `json:"generation"`
	Durability string     `json:"durability,omitempty"`
	Clock      string     `json:"clock,omitempty"`
}

// Generation is the store generation in ReadyResponse.
type Generation struct {
	Number uint64 `json:"number"`
	ID     string `json:"id"`
	Origin string `json:"origin"`
	At     string `json:"at"`
}

// DecodedID is the gateway's 200 body of GET /v1/ids/{id}: the ID (a decimal
// string) and its parts.
type DecodedID struct {
	ID       string `json:"id"`
	Time     string `json:"time"`
	NodeID   int64  `json:"nodeId"`
	Sequence int64  `json:"sequence"`
}

// ProblemMembers are the members of a problem+json body (RFC 9457) that IdKeeper
// defines. Every other member of a problem is an extension member: a detail of the
// error, such as maxCount. Read-only.
var ProblemMembers = []string{"type", "title", "status", "detail", "code", "field", "instance"}

// Problem is the members of a problem+json body that a reader branches on or
// shows; "field" is set for INVALID_REQUEST. The writer (internal/problem) builds
// the body as a map, to add extension members.
type Problem struct {
	Code   string `json:"code"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Field  string `json:"field"`
}

// Members returns the JSON member names of the fields of v, a struct, in field
// order: what a strict reader of that body accepts. Fields without a json tag
// are named as encoding/json names them; fields tagged "-" are left out.
func Members(v any) []string {
	t := reflect.TypeOf(v)
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
			continue
		case name == "":
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}
