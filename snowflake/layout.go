// Package snowflake composes, decodes and mints 64-bit Snowflake IDs.
//
// An ID is, from the most significant bit: one sign bit (always 0), a timestamp in
// milliseconds since the layout's epoch, a node ID, and a sequence number within the
// millisecond. The widths are set by a Layout; DefaultLayout is 41/12/10 bits on the
// epoch 2026-01-01T00:00:00Z.
//
// A Generator mints IDs for one node ID, only with timestamps inside a lease window,
// never a duplicate, without locks or allocations, and sleeps rather than spins when
// a millisecond's sequence is used up. The package uses the standard library only.
package snowflake

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// DefaultEpoch is the epoch of DefaultLayout: 2026-01-01T00:00:00Z.
var DefaultEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// DefaultLayout is 41 timestamp bits (until about 2095), 12 node bits (node IDs
// 0..4095) and 10 sequence bits (1,024 IDs per millisecond per node ID).
var DefaultLayout = Layout{Epoch: DefaultEpoch, TimestampBits: 41, NodeBits: 12, SequenceBits: 10}

// ErrInvalidLayout is wrapped by every error Layout.Validate, Layout.ValidateNew,
// ParseLayout and ParseEpoch return.
var ErrInvalidLayout = errors.New("snowflake: invalid layout")

// ErrTimestampOutOfRange is returned when a time lies before the layout's epoch or
// past the last millisecond its timestamp bits can hold. Such an ID is never
// produced, never wrapped.
var ErrTimestampOutOfRange = errors.New("snowflake: timestamp outside the layout's range")

// Layout is the bit layout of an ID. Every width is positive and the three add up to
// 63, the sign bit being always 0.
type Layout struct {
	Epoch         time.Time // millisecond 0 of the timestamp field
	TimestampBits int
	NodeBits      int
	SequenceBits  int
}

// Validate reports, wrapping ErrInvalidLayout, a width that is not positive, widths
// that do not add up to 63, a node or sequence field wider than 32 bits, a zero
// epoch, an epoch finer than the millisecond, or an epoch whose range (Epoch … End)
// does not fit int64 Unix milliseconds. It checks nothing that depends on the time
// of day: ValidateNew adds the rules for a layout chosen now.
func (l Layout) Validate() error {
	if reason := l.invalid(); reason != "" {
		return fmt.Errorf("%w: %s", ErrInvalidLayout, reason)
	}
	return nil
}

// invalid is what makes the layout invalid (see Validate), or "" when it is valid.
func (l Layout) invalid() string {
	if l.TimestampBits <= 0 || l.NodeBits <= 0 || l.SequenceBits <= 0 {
		return fmt.Sprintf("every width must be positive (timestamp %d, node %d, sequence %d)",
			l.TimestampBits, l.NodeBits, l.SequenceBits)
	}
	if sum := l.TimestampBits + l.NodeBits + l.SequenceBits; sum != 63 {
		return fmt.Sprintf("widths add up to %d, want 63", sum)
	}
	if l.NodeBits > 32 || l.SequenceBits > 32 {
		return fmt.Sprintf("node and sequence widths must be at most 32 bits (node %d, sequence %d)",
			l.NodeBits, l.SequenceBits)
	}
	if l.Epoch.IsZero() {
		return "epoch is not set (the zero time, 0001-01-01T00:00:00Z)"
	}
	// Past these bounds Unix milliseconds overflow int64, and arithmetic on them
	// could wrap a far-off time into the layout's range.
	e := l.Epoch.UnixMilli()
	if d := l.Epoch.Sub(time.UnixMilli(e)); d < 0 || d >= time.Millisecond {
		return fmt.Sprintf("epoch %v is not representable in Unix milliseconds", l.Epoch)
	}
	if l.Epoch.Nanosecond()%int(time.Millisecond) != 0 {
		// EpochMillis would drop the rest, and IDs would not decode to the times
		// they were minted at by a reader that keeps it.
		return fmt.Sprintf("epoch %s is not a whole millisecond", l.Epoch.UTC().Format(time.RFC3339Nano))
	}
	if e > math.MaxInt64-(int64(1)<<l.TimestampBits) {
		return fmt.Sprintf("the layout's end (epoch + 2^%d ms) is not representable in Unix milliseconds",
			l.TimestampBits)
	}
	return ""
}

// MaxNode is the largest node ID the layout holds: 2^NodeBits − 1.
func (l Layout) MaxNode() int64 { return 1<<l.NodeBits - 1 }

// MaxSequence is the largest sequence number: 2^SequenceBits − 1.
func (l Layout) MaxSequence() int64 { return 1<<l.SequenceBits - 1 }

// MaxTimestamp is the largest timestamp field in milliseconds since the epoch.
func (l Layout) MaxTimestamp() int64 { return 1<<l.TimestampBits - 1 }

// Nodes is the number of node IDs the layout holds: 2^NodeBits.
func (l Layout) Nodes() int { return 1 << l.NodeBits }

// IDsPerSecond is the ceiling of one node ID: 2^SequenceBits × 1000.
func (l Layout) IDsPerSecond() int64 { return (1 << l.SequenceBits) * 1000 }

// EpochMillis is the epoch in Unix milliseconds.
func (l Layout) EpochMillis() int64 { return l.Epoch.UnixMilli() }

// End is the first instant the layout can no longer represent.
func (l Layout) End() time.Time {
	return time.UnixMilli(l.EpochMillis() + l.MaxTimestamp() + 1).UTC()
}

// Timestamp converts t to the timestamp field: milliseconds since the epoch. It
// returns ErrTimestampOutOfRange before the epoch or past MaxTimestamp.
func (l Layout) Timestamp(t time.Time) (int64, error) {
	return l.TimestampFromUnixMilli(t.UnixMilli())
}

// TimestampFromUnixMilli is Timestamp for a time given in Unix milliseconds.
func (l Layout) TimestampFromUnixMilli(ms int64) (int64, error) {
	ts := ms - l.EpochMillis()
	if ts < 0 || ts > l.MaxTimestamp() {
		return 0, ErrTimestampOutOfRange
	}
	return ts, nil
}

// Compose builds an ID from a timestamp field (milliseconds since the epoch), a node
// ID and a sequence number. Fields outside their widths return an error, never a
// truncated ID.
func (l Layout) Compose(ts, node, seq int64) (int64, error) {
	if ts < 0 || ts > l.MaxTimestamp() {
		return 0, ErrTimestampOutOfRange
	}
	if node < 0 || node > l.MaxNode() {
		return 0, fmt.Errorf("snowflake: node ID %d outside 0..%d", node, l.MaxNode())
	}
	if seq < 0 || seq > l.MaxSequence() {
		return 0, fmt.Errorf("snowflake: sequence %d outside 0..%d", seq, l.MaxSequence())
	}
	return l.compose(ts, node, seq), nil
}

func (l Layout) compose(ts, node, seq int64) int64 {
	return ts<<(l.NodeBits+l.SequenceBits) | node<<l.SequenceBits | seq
}

// Parts is a decoded ID.
type Parts struct {
	Time      time.Time // UTC, millisecond precision
	Timestamp int64     // milliseconds since the epoch
	Node      int64
	Sequence  int64
}

// Decode splits an ID into its fields. A negative ID returns an error.
func (l Layout) Decode(id int64) (Parts, error) {
	if id < 0 {
		return Parts{}, fmt.Errorf("snowflake: ID %d is negative", id)
	}
	ts := id >> (l.NodeBits + l.SequenceBits)
	return Parts{
		Time:      time.UnixMilli(l.EpochMillis() + ts).UTC(),
		Timestamp: ts,
		Node:      (id >> l.SequenceBits) & l.MaxNode(),
		Sequence:  id & l.MaxSequence(),
	}, nil
}
