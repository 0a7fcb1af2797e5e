package snowflake

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestLayoutValidate(t *testing.T) {
	ok := DefaultLayout
	cases := []struct {
		name string
		l    Layout
		ok   bool
	}{
		{"default", ok, true},
		{"zero timestamp bits", Layout{Epoch: DefaultEpoch, TimestampBits: 0, NodeBits: 12, SequenceBits: 51}, false},
		{"negative node bits", Layout{Epoch: DefaultEpoch, TimestampBits: 41, NodeBits: -1, SequenceBits: 23}, false},
		{"zero sequence bits", Layout{Epoch: DefaultEpoch, TimestampBits: 41, NodeBits: 22, SequenceBits: 0}, false},
		{"sum 62", Layout{Epoch: DefaultEpoch, TimestampBits: 41, NodeBits: 11, SequenceBits: 10}, false},
		{"sum 64", Layout{Epoch: DefaultEpoch, TimestampBits: 42, NodeBits: 12, SequenceBits: 10}, false},
		{"node 33 bits", Layout{Epoch: DefaultEpoch, TimestampBits: 20, NodeBits: 33, SequenceBits: 10}, false},
		{"sequence 33 bits", Layout{Epoch: DefaultEpoch, TimestampBits: 20, NodeBits: 10, SequenceBits: 33}, false},
		{"widest timestamp", Layout{Epoch: DefaultEpoch, TimestampBits: 61, NodeBits: 1, SequenceBits: 1}, true},
		{"zero epoch", Layout{TimestampBits: 41, NodeBits: 12, SequenceBits: 10}, false},
		{"epoch before 1970", Layout{Epoch: time.Date(1950, 1, 1, 0, 0, 0, 0, time.UTC), TimestampBits: 41, NodeBits: 12, SequenceBits: 10}, true},
		{"end overflows", Layout{Epoch: time.UnixMilli(math.MaxInt64 - 1<<41 + 1), TimestampBits: 41, NodeBits: 12, SequenceBits: 10}, false},
		{"end just fits", Layout{Epoch: time.UnixMilli(math.MaxInt64 - 1<<41), TimestampBits: 41, NodeBits: 12, SequenceBits: 10}, true},
		{"epoch beyond unix ms", Layout{Epoch: time.Date(300_000_000, 1, 1, 0, 0, 0, 0, time.UTC), TimestampBits: 41, NodeBits: 12, SequenceBits: 10}, false},
	}
	for _, c := range cases {
		err := c.l.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidLayout) {
			t.Errorf("%s: %v does not wrap ErrInvalidLayout", c.name, err)
		}
	}
}

func TestComposeDecode(t *testing.T) {
	l := DefaultLayout
	id, err := l.Compose(123456, 4095, 1023)
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Decode(id)
	if err != nil {
		t.Fatal(err)
	}
	want := Parts{Time: DefaultEpoch.Add(123456 * time.Millisecond), Timestamp: 123456, Node: 4095, Sequence: 1023}
	if p != want {
		t.Fatalf("Decode = %+v, want %+v", p, want)
	}
	if _, err := l.Compose(l.MaxTimestamp()+1, 0, 0); !errors.Is(err, ErrTimestampOutOfRange) {
		t.Errorf("timestamp past the end: %v, want ErrTimestampOutOfRange", err)
	}
	if _, err := l.Compose(-1, 0, 0); !errors.Is(err, ErrTimestampOutOfRange) {
		t.Errorf("negative timestamp: %v, want ErrTimestampOutOfRange", err)
	}
	if _, err := l.Compose(0, 4096, 0); err == nil {
		t.Error("node 4096 composed")
	}
	if _, err := l.Compose(0, 0, 1024); err == nil {
		t.Error("sequence 1024 composed")
	}
	if _, err := l.Decode(-1); err == nil {
		t.Error("negative ID decoded")
	}
	if _, err := l.Timestamp(l.End()); !errors.Is(err, ErrTimestampOutOfRange) {
		t.Errorf("Timestamp(End) = %v, want ErrTimestampOutOfRange", err)
	}
	if ts, err := l.Timestamp(l.End().Add(-time.Millisecond)); err != nil || ts != l.MaxTimestamp() {
		t.Errorf("Timestamp(End-1ms) = %d, %v, want %d", ts, err, l.MaxTimestamp())
	}
}

// fuzzLayout builds a layout from fuzzed widths and epoch, or reports false when
// it is invalid.
func fuzzLayout(epochMs int64, tb, nb, sb int8) (Layout, bool) {
	l := Layout{Epoch: time.UnixMilli(epochMs), TimestampBits: int(tb), NodeBits: int(nb), SequenceBits: int(sb)}
	return l, l.Validate() == nil
}

func FuzzDecodeCompose(f *testing.F) {
	f.Add(DefaultEpoch.UnixMilli(), int8(41), int8(12), int8(10), int64(123456), int64(17), int64(3), int64(1)<<40)
	f.Add(int64(-1), int8(61), int8(1), int8(1), int64(1)<<60, int64(1), int64(1), int64(math.MaxInt64))
	f.Add(int64(0), int8(31), int8(22), int8(10), int64(0), int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, epochMs int64, tb, nb, sb int8, ts, node, seq, raw int64) {
		l, ok := fuzzLayout(epochMs, tb, nb, sb)
		if !ok {
			return
		}
		id, err := l.Compose(ts, node, seq)
		inRange := ts >= 0 && ts <= l.MaxTimestamp() && node >= 0 && node <= l.MaxNode() && seq >= 0 && seq <= l.MaxSequence()
		if inRange != (err == nil) {
			t.Fatalf("Compose(%d, %d, %d) on %+v: err %v, in range %v", ts, node, seq, l, err, inRange)
		}
		if err == nil {
			if id < 0 {
				t.Fatalf("Compose gave a negative ID %d", id)
			}
			p, err := l.Decode(id)
			if err != nil {
				t.Fatal(err)
			}
			if p.Timestamp != ts || p.Node != node || p.Sequence != seq || !p.Time.Equal(time.UnixMilli(epochMs+ts)) {
				t.Fatalf("Decode(Compose(%d, %d, %d)) = %+v", ts, node, seq, p)
			}
		}
		// Every non-negative ID decodes to fields that compose back to it.
		if raw < 0 {
			if _, err := l.Decode(raw); err == nil {
				t.Fatalf("Decode(%d) accepted a negative ID", raw)
			}
			return
		}
		p, err := l.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		back, err := l.Compose(p.Timestamp, p.Node, p.Sequence)
		if err != nil || back != raw {
			t.Fatalf("Compose(Decode(%d)) = %d, %v", raw, back, err)
		}
		if got, err := l.Timestamp(p.Time); err != nil || got != p.Timestamp {
			t.Fatalf("Timestamp(Decode(%d).Time) = %d, %v, want %d", raw, got, err, p.Timestamp)
		}
	})
}

func FuzzLayoutValidate(f *testing.F) {
	f.Add(DefaultEpoch.UnixMilli(), int8(41), int8(12), int8(10), int64(0))
	f.Add(int64(math.MaxInt64-1<<41), int8(41), int8(12), int8(10), int64(math.MaxInt64))
	f.Add(int64(math.MinInt64), int8(61), int8(1), int8(1), int64(math.MaxInt64))
	f.Add(int64(0), int8(30), int8(33), int8(0), int64(5))
	f.Fuzz(func(t *testing.T, epochMs int64, tb, nb, sb int8, unixMs int64) {
		l := Layout{Epoch: time.UnixMilli(epochMs), TimestampBits: int(tb), NodeBits: int(nb), SequenceBits: int(sb)}
		err := l.Validate()
		// time.UnixMilli never gives the zero time.Time, so the epoch is always set here.
		want := tb > 0 && nb > 0 && sb > 0 && int(tb)+int(nb)+int(sb) == 63 && nb <= 32 && sb <= 32 &&
			epochMs <= math.MaxInt64-int64(1)<<tb
		if (err == nil) != want {
			t.Fatalf("Validate(%+v) = %v, want ok=%v", l, err, want)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidLayout) {
				t.Fatalf("%v does not wrap ErrInvalidLayout", err)
			}
			return
		}
		if got := l.End().UnixMilli() - epochMs; got != l.MaxTimestamp()+1 {
			t.Fatalf("End - Epoch = %d ms, want %d", got, l.MaxTimestamp()+1)
		}
		if l.MaxNode() != int64(l.Nodes())-1 || l.IDsPerSecond() != (l.MaxSequence()+1)*1000 {
			t.Fatalf("inconsistent sizes for %+v", l)
		}
		// A valid layout never wraps a far-off time into its range.
		ts, err := l.TimestampFromUnixMilli(unixMs)
		inRange := unixMs >= epochMs && unixMs <= epochMs+l.MaxTimestamp()
		if inRange != (err == nil) || (err == nil && ts != unixMs-epochMs) {
			t.Fatalf("TimestampFromUnixMilli(%d) on epoch %d = %d, %v; in range %v", unixMs, epochMs, ts, err, inRange)
		}
	})
}
