// Package idkeeper leases Snowflake node IDs to processes.
//
// A process (a Requester) asks the registry for N node IDs (Alloc), keeps them by
// renewing its leases (Renew) and gives them back when it stops (Remove). While it
// holds a lease it mints IDs locally, and only with timestamps inside the lease's
// window (NotBefore … ExpiresAt), so two holders of one node ID never mint the same
// ID even when their real times overlap.
//
// This root package holds the domain vocabulary, the Store contract every storage
// adapter implements, and the Registry: the lease policy over a Store. It uses the
// standard library only; adapters (bolt, redis, http, …) import it, never the
// other way round.
package idkeeper

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper/snowflake"
)

// Layout is the bit layout of the IDs the registry's clients mint.
type Layout = snowflake.Layout

// DefaultLayout is 41 timestamp, 12 node and 10 sequence bits on 2026-01-01.
var DefaultLayout = snowflake.DefaultLayout

// NodeID identifies one node slot of the layout: 0..2^NodeBits−1.
type NodeID int

// MaxMachineIDLen is the longest machine ID a Requester may carry, in bytes.
const MaxMachineIDLen = 256

// Requester identifies one process: the machine it runs on, its PID and its start
// time. The start time tells apart two processes that had the same PID, such as PID 1
// in two runs of a container.
type Requester struct {
	MachineID string
	PID       int
	StartedAt time.Time // kept to the millisecond
}

// Validate returns an INVALID_REQUEST Error naming the first bad field: an empty or
// over-long machine ID, one with control characters or invalid UTF-8, a PID below 1,
// or a zero start time.
func (r Requester) Validate() error {
	switch {
	case r.MachineID == "":
		return Invalidf("requester.machineId", "requester.machineId is required")
	case len(r.MachineID) > MaxMachineIDLen:
		return Invalidf("requester.machineId", "requester.machineId is longer than %d bytes", MaxMachineIDLen)
	case !utf8.ValidString(r.MachineID) || strings.ContainsFunc(r.MachineID, isControl):
		return Invalidf("requester.machineId", "requester.machineId must be printable UTF-8")
	case r.PID < 1:
		return Invalidf("requester.pid", "requester.pid must be at least 1")
	case r.StartedAt.IsZero():
		return Invalidf("requester.startedAt", "requester.startedAt is required")
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// Key is the requester's canonical identity, stable across processes and stores:
// "<pid>/<startedAt unix ms>/<machine ID>". Two requesters are the same process
// exactly when their keys are equal.
func (r Requester) Key() string {
	return strconv.Itoa(r.PID) + "/" + strconv.FormatInt(r.StartedAt.UnixMilli(), 10) + "/" + r.MachineID
}

// ParseRequesterKey is the inverse of Requester.Key.
func ParseRequesterKey(key string) (Requester, error) {
	pid, rest, ok := strings.Cut(key, "/")
	if !ok {
		return Requester{}, fmt.Errorf("idkeeper: malformed requester key %q", key)
	}
	ms, machine, ok := strings.Cut(rest, "/")
	if !ok {
		return Requester{}, fmt.Errorf("idkeeper: malformed requester key %q", key)
	}
	p, err := strconv.Atoi(pid)
	if err != nil {
		return Requester{}, fmt.Errorf("idkeeper: malformed requester key %q: %w", key, err)
	}
	m, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return Requester{}, fmt.Errorf("idkeeper: malformed requester key %q: %w", key, err)
	}
	return Requester{MachineID: machine, PID: p, StartedAt: time.UnixMilli(m).UTC()}, nil
}

// String is the requester's key.
func (r Requester) String() string { return r.Key() }

// Lease is one node ID held by one requester. All times are UTC to the millisecond
// and come from the deployment's time authority (the store's clock).
type Lease struct {
	NodeID    NodeID
	Requester Requester
	// NotBefore is the first millisecond the holder may mint with: one past the
	// node's watermark at grant time. It never changes for the life of the lease.
	NotBefore time.Time
	// ExpiresAt is the end of the lease and of its minting window (inclusive).
	ExpiresAt time.Time
	// FencingToken grows with every new grant, across all node IDs; Renew keeps it.
	FencingToken uint64
	GrantedAt    time.Time
	RenewedAt    time.Time // zero until the first Renew
}

// Expired reports whether the lease has ended at now.
func (l Lease) Expired(now time.Time) bool { return now.After(l.ExpiresAt) }

// Grant is the answer of Alloc and Renew.
type Grant struct {
	Leases []Lease // sorted by NodeID; empty from Renew means "holds nothing"
	Now    time.Time
	// Fence is the store's fencing counter after the operation: the highest token it
	// has ever handed out. A value below a token already seen shows lost writes.
	Fence uint64
}

// Counts is the state of the node pool at one instant. Total = Remaining + Leased +
// InGrace + Quarantined.
type Counts struct {
	Total       int // node IDs in the pool
	Remaining   int // free and allocatable now (or as soon as their window opens)
	Leased      int // held by a lease that has not expired
	InGrace     int // held by an expired lease that cleanup has not reclaimed yet
	Quarantined int // free, but not allocatable before their quarantine ends
}

// NodeState is what the store keeps of one node ID, for operators and tests.
type NodeState struct {
	NodeID           NodeID
	Lease            *Lease    // nil when free
	Watermark        time.Time // latest expiry ever granted (or attested by Remove); never deleted
	QuarantinedUntil time.Time // zero when never quarantined
}

// SkewLevel is the registry's verdict on a requester's clock.
type SkewLevel string

// Skew levels, from DESIGN §3: |skew| > grace/2 warns; skew > grace rejects Alloc.
const (
	SkewOK     SkewLevel = "ok"
	SkewWarn   SkewLevel = "warn"
	SkewReject SkewLevel = "reject"
)

// SkewObservation is the last clock-skew measurement of one requester.
type SkewObservation struct {
	Requester  Requester
	Skew       time.Duration // server now − client now; positive: the client is behind
	Threshold  time.Duration // the grace period in force
	Level      SkewLevel
	ObservedAt time.Time
	RemoteIP   string
	Operation  string // "alloc" or "renew"
}

// APIKey is a stored API key. Only the hash of its secret is kept.
type APIKey struct {
	ID          string // public part of the key, the lookup handle
	Hash        []byte // SHA-256 of the secret part
	Description string
	CreatedAt   time.Time
	ExpiresAt   time.Time // zero: never expires
}

// Expired reports whether the key has expired at now.
func (k APIKey) Expired(now time.Time) bool { return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) }

// Clock tells the time. Tests inject a fake one; production uses time.Now.
type Clock func() time.Time

// Millis truncates t to the millisecond in UTC: every time the registry stores or
// sends has this precision.
func Millis(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }
