package wire

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

func TestTime(t *testing.T) {
	tokyo := time.FixedZone("JST", 9*3600)
	tm := time.Date(2026, 1, 1, 9, 0, 0, 123_456_789, tokyo)
	if got := FormatTime(tm); got != "2026-01-01T00:00:00.123Z" {
		t.Fatalf("FormatTime = %q", got)
	}
	if got := FormatTime(time.Time{}.Add(time.Millisecond)); got != "0001-01-01T00:00:00.001Z" {
		t.Fatalf("FormatTime = %q", got)
	}
	if _, err := ParseTime(TimeExample); err != nil {
		t.Fatal(err)
	}
	got, err := ParseTime("2026-01-01T09:00:00.123456789+09:00")
	if err != nil || !got.Equal(tm) || got.Location() != time.UTC {
		t.Fatalf("ParseTime = %v, %v", got, err)
	}
	for _, bad := range []string{"", "2026-01-01", "2026-01-01 00:00:00Z", "yesterday"} {
		if _, err := ParseTime(bad); err == nil {
			t.Errorf("ParseTime(%q) accepted", bad)
		}
	}
}

// TestMembers: the member names a strict reader accepts, in the order its
// messages list them.
func TestMembers(t *testing.T) {
	for _, c := range []struct {
		v    any
		want []string
	}{
		{AllocRequest{}, []string{"requester", "count", "clientUtcNow", "client"}},
		{Client{}, []string{"host", "labels"}},
		{RenewRequest{}, []string{"requester", "clientUtcNow", "fencingTokens", "receipts"}},
		{RemoveRequest{}, []string{"requester", "mintedUpTo"}},
		{Requester{}, []string{"machineId", "pid", "startedAt", "instance"}},
		{struct {
			A      int `json:"a,omitempty"`
			B      int
			Hidden int `json:"-"`
			c      int
		}{}, []string{"a", "B"}},
	} {
		if got := Members(c.v); !slices.Equal(got, c.want) {
			t.Errorf("Members(%T) = %q, want %q", c.v, got, c.want)
		}
	}
}

// TestBytes locks the JSON of each body: docs/api.md and docs/gateway.md show
// these members, in this order.
func TestBytes(t *testing.T) {
	node, token, removed := int64(17), uint64(42), 0
	layout := &Layout{Epoch: TimeExample, TimestampBits: 41, NodeBits: 10, SequenceBits: 12}
	lease := Lease{NodeID: &node, NotBefore: TimeExample, ExpiresAt: TimeExample, FencingToken: &token}
	req := Requester{MachineID: "m", PID: 1, StartedAt: TimeExample}
	for _, c := range []struct {
		v    any
		want string
	}{
		{AllocRequest{Requester: req, Count: 2, ClientUtcNow: TimeExample},
			`{"requester":{"machineId":"m","pid":1,"startedAt":"2026-01-01T00:00:00.000Z"},"count":2,"clientUtcNow":"2026-01-01T00:00:00.000Z"}`},
		{RenewRequest{Requester: Requester{MachineID: "m", PID: 1, StartedAt: TimeExample, Instance: "i"}, FencingTokens: []uint64{42}},
			`{"requester":{"machineId":"m","pid":1,"startedAt":"2026-01-01T00:00:00.000Z","instance":"i"},"clientUtcNow":"","fencingTokens":[42]}`},
		{RemoveRequest{Requester: req},
			`{"requester":{"machineId":"m","pid":1,"startedAt":"2026-01-01T00:00:00.000Z"}}`},
		{AllocResponse{Layout: layout, Leases: []Lease{lease}, ServerUtcNow: TimeExample},
			`{"layout":{"epoch":"2026-01-01T00:00:00.000Z","timestampBits":41,"nodeBits":10,"sequenceBits":12},` +
				`"leases":[{"nodeId":17,"notBefore":"2026-01-01T00:00:00.000Z","expiresAt":"2026-01-01T00:00:00.000Z","fencingToken":42}],` +
				`"serverUtcNow":"2026-01-01T00:00:00.000Z"}`},
		{RenewResponse{Leases: []Lease{}, ServerUtcNow: TimeExample}, `{"leases":[],"serverUtcNow":"2026-01-01T00:00:00.000Z"}`},
		{RemoveResponse{Removed: &removed}, `{"removed":0}`},
		{RemainingResponse{First: 100, Last: 104, Total: 5, Remaining: 1, Leased: 2, InGrace: 1, Quarantined: 1},
			`{"first":100,"last":104,"total":5,"remaining":1,"leased":2,"inGrace":1,"quarantined":1,"cooling":0}`},
		{RemainingResponse{Total: 5, Remaining: 3, Leased: 2, Cooling: 2, NextReadyAt: TimeExample},
			`{"first":0,"last":0,"total":5,"remaining":3,"leased":2,"inGrace":0,"quarantined":0,"cooling":2,"nextReadyAt":"2026-01-01T00:00:00.000Z"}`},
		{VersionResponse{Version: "v", Commit: "c"}, `{"version":"v","commit":"c","layout":null}`},
		{VersionResponse{Version: "v", Commit: "c", Layout: layout, NodeRange: &NodeRange{First: 100, Last: 163}},
			`{"version":"v","commit":"c","layout":{"epoch":"2026-01-01T00:00:00.000Z","timestampBits":41,"nodeBits":10,"sequenceBits":12},` +
				`"nodeRange":{"first":100,"last":163}}`},
		{StatusResponse{Status: "ok"}, `{"status":"ok"}`},
		{ReadyResponse{Status: "ready", Generation: Generation{Number: 1, ID: "g", Origin: "init", At: TimeExample}},
			`{"status":"ready","generation":{"number":1,"id":"g","origin":"init","at":"2026-01-01T00:00:00.000Z"}}`},
		{DecodedID{ID: "5", Time: TimeExample, NodeID: 3, Sequence: 4},
			`{"id":"5","time":"2026-01-01T00:00:00.000Z","nodeId":3,"sequence":4}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%T: %s, %v\nwant %s", c.v, b, err, c.want)
		}
	}
}

// TestMissingMembers: a reader tells a missing member from a zero one where the
// zero is a valid value.
func TestMissingMembers(t *testing.T) {
	var l Lease
	if err := json.Unmarshal([]byte(`{"notBefore":"x"}`), &l); err != nil || l.NodeID != nil || l.FencingToken != nil {
		t.Fatalf("%+v, %v", l, err)
	}
	var a AllocResponse
	if err := json.Unmarshal([]byte(`{"leases":null}`), &a); err != nil || a.Leases != nil || a.Layout != nil {
		t.Fatalf("%+v, %v", a, err)
	}
	if err := json.Unmarshal([]byte(`{"leases":[]}`), &a); err != nil || a.Leases == nil {
		t.Fatalf("an empty list reads as missing: %+v, %v", a, err)
	}
}
