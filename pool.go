package idkeeper

import (
	"fmt"
	"strings"

	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snowflake"
)

// PoolSpec is what a store's pool is (issue #22): the node IDs First..First+Nodes−1,
// which its clients mint IDs with, on Layout. A store records it when it is
// initialised and never changes First or Layout afterwards: an ID space must never
// change under running clients. Only Nodes may grow (LeaseStore.Grow).
//
// A zero Layout means DefaultLayout: a store initialised before the layout was
// stored is on the default one.
type PoolSpec struct {
	First  NodeID // the lowest node ID of the pool; 0 and up
	Nodes  int    // the pool size: 1..MaxPoolNodes node IDs
	Layout Layout // the bit layout of the IDs minted with these node IDs; zero: DefaultLayout
}

// LayoutOrDefault is p.Layout, or DefaultLayout when it is zero.
func (p PoolSpec) LayoutOrDefault() Layout {
	if p.Layout == (Layout{}) {
		return DefaultLayout
	}
	return p.Layout
}

// End is the first node ID past the pool: First + Nodes.
func (p PoolSpec) End() NodeID { return p.First + NodeID(p.Nodes) }

// Holds reports whether id lies in the pool: First ≤ id < First + Nodes.
func (p PoolSpec) Holds(id NodeID) bool { return id >= p.First && id < p.End() }

// SameSpace reports whether p and o describe the same ID space: the same First and
// the same layout (a zero Layout being DefaultLayout, epochs compared as instants).
// Their sizes may differ.
func (p PoolSpec) SameSpace(o PoolSpec) bool {
	return p.First == o.First && SameLayout(p.LayoutOrDefault(), o.LayoutOrDefault())
}

// SameLayout reports whether a and b are the same layout: the same widths and the
// same epoch instant.
func SameLayout(a, b Layout) bool {
	return a.TimestampBits == b.TimestampBits && a.NodeBits == b.NodeBits && a.SequenceBits == b.SequenceBits &&
		a.Epoch.Equal(b.Epoch)
}

// String describes p for people and logs: "node IDs 100-103 (4) on layout
// 41/12/10@2026-01-01T00:00:00.000Z".
func (p PoolSpec) String() string {
	return fmt.Sprintf("node IDs %d-%d (%d) on layout %s", p.First, p.End()-1, p.Nodes, FormatLayout(p.LayoutOrDefault()))
}

// Validate returns an INVALID_REQUEST Error unless p can be a pool: Nodes in
// 1..MaxPoolNodes (CheckPoolSize; field "nodes"), a valid layout (field "layout"),
// First ≥ 0 and First + Nodes − 1 ≤ the layout's MaxNode (field "nodes").
func (p PoolSpec) Validate() error {
	if err := CheckPoolSize(p.Nodes); err != nil {
		return err
	}
	l := p.LayoutOrDefault()
	if err := l.Validate(); err != nil {
		return protocol.Invalidf("layout", "%v", err)
	}
	if p.First < 0 {
		return protocol.Invalidf("nodes", "the first node ID must not be negative, got %d", p.First)
	}
	if last := int64(p.First) + int64(p.Nodes) - 1; last > l.MaxNode() {
		return protocol.Invalidf("nodes", "node IDs %d-%d do not fit the layout's %d node bits (node IDs 0-%d)",
			p.First, last, l.NodeBits, l.MaxNode())
	}
	return nil
}

// PoolMismatch is the INVALID_REQUEST Error of an Init, Grow, Reset or snapshot
// load asked for a pool with another First or layout than the stored pool's: the
// ID space never changes under running clients. Field "nodes" when the First
// differs, else "layout"; Details "stored" and "asked" are the two specs (String).
func PoolMismatch(stored, asked PoolSpec) *Error {
	field := "layout"
	if stored.First != asked.First {
		field = "nodes"
	}
	e := protocol.Invalidf(field, "the store's pool is %s, not %s: a store's node range and layout never change "+
		"(an ID space must not change under running clients); re-initialise deliberately to change them", stored, asked)
	e.Details = map[string]any{"stored": stored.String(), "asked": asked.String()}
	return e
}

// CheckPoolChange is the check of Init and Grow against the stored pool: nil when
// stored holds no node IDs (nothing stored yet) or asked is the same space with at
// least as many node IDs; PoolMismatch for another First or layout; ShrinkRefused
// for fewer node IDs. asked must be valid (Validate).
func CheckPoolChange(stored, asked PoolSpec) error {
	switch {
	case stored.Nodes == 0:
		return nil
	case !stored.SameSpace(asked):
		return PoolMismatch(stored, asked)
	case asked.Nodes < stored.Nodes:
		return ShrinkRefused(uint64(stored.Nodes), asked.Nodes)
	}
	return nil
}

// CheckPoolReset is CheckPoolChange for a Reset, where a smaller size keeps the
// stored one: only another First or layout is refused (PoolMismatch).
func CheckPoolReset(stored, asked PoolSpec) error {
	if stored.Nodes > 0 && !stored.SameSpace(asked) {
		return PoolMismatch(stored, asked)
	}
	return nil
}

// FormatLayout is the canonical text of a layout, as stores and snapshots keep it:
// "41/12/10@2026-01-01T00:00:00.000Z" (snowflake.Layout.String: timestamp/node/
// sequence bits, then the epoch in UTC to the millisecond). ParseLayout reads it
// back.
func FormatLayout(l Layout) string { return l.String() }

// ParseLayout reads a layout in the canonical text of FormatLayout and rejects
// anything else (another form, leading zeros, spaces, an epoch in another zone) or
// an invalid layout (Layout.Validate).
func ParseLayout(s string) (Layout, error) {
	widths, epoch, ok := strings.Cut(s, "@")
	if !ok {
		return Layout{}, fmt.Errorf("layout %q is not bits/bits/bits@epoch", s)
	}
	l, err := snowflake.ParseLayout(widths, epoch)
	if err != nil {
		return Layout{}, err
	}
	if FormatLayout(l) != s {
		return Layout{}, fmt.Errorf("layout %q is not in canonical form (%s)", s, FormatLayout(l))
	}
	return l, nil
}
