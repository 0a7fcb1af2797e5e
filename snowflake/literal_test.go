package snowflake

import (
	"testing"
	"time"
)

// literalCases are IDs worked out by hand, independent of Compose and Decode: each
// want is written as the shifts and ORs of the layout's bit diagram (timestamp above
// node above sequence), and its decimal value was computed outside this package.
var literalCases = []struct {
	name           string
	tb, nb, sb     int
	ts, node, seq  int64
	want, wantText int64
}{
	{"default/top of every field", 41, 12, 10, 123456, 4095, 1023, 123456<<22 | 4095<<10 | 1023, 517816188927},
	{"default/last millisecond", 41, 12, 10, 1<<41 - 1, 0, 0, (1<<41 - 1) << 22, 9223372036850581504},
	{"default/ones", 41, 12, 10, 1, 1, 1, 1<<22 | 1<<10 | 1, 4195329},
	{"41-6-16/top of node and sequence", 41, 6, 16, 987654321, 63, 65535, 987654321<<22 | 63<<16 | 65535, 4142522473381887},
	{"41-6-16/node one", 41, 6, 16, 2, 1, 0, 2<<22 | 1<<16, 8454144},
	{"39-16-8/top of node and sequence", 39, 16, 8, 5555555, 65535, 255, 5555555<<24 | 65535<<8 | 255, 93206763012095},
	{"39-16-8/last millisecond", 39, 16, 8, 1<<39 - 1, 1, 2, (1<<39-1)<<24 | 1<<8 | 2, 9223372036837998850},
}

func TestLiteralIDs(t *testing.T) {
	for _, c := range literalCases {
		t.Run(c.name, func(t *testing.T) {
			if c.want != c.wantText {
				t.Fatalf("the case's two forms differ: %d and %d", c.want, c.wantText)
			}
			l := Layout{Epoch: DefaultEpoch, TimestampBits: c.tb, NodeBits: c.nb, SequenceBits: c.sb}
			id, err := l.Compose(c.ts, c.node, c.seq)
			if err != nil || id != c.want {
				t.Fatalf("Compose(%d, %d, %d) = %d, %v; want %d", c.ts, c.node, c.seq, id, err, c.want)
			}
			p, err := l.Decode(c.want)
			wantTime := DefaultEpoch.Add(time.Duration(c.ts) * time.Millisecond)
			if err != nil || p.Timestamp != c.ts || p.Node != c.node || p.Sequence != c.seq || !p.Time.Equal(wantTime) {
				t.Fatalf("Decode(%d) = %+v, %v; want timestamp %d, node %d, sequence %d at %v",
					c.want, p, err, c.ts, c.node, c.seq, wantTime)
			}
		})
	}
}

// The generator's IDs, on a fake clock, are the literal bit patterns: the first ID
// of a millisecond has sequence 0, the next 1, and a new millisecond starts over.
func TestGeneratorLiteralIDs(t *testing.T) {
	for _, c := range []struct {
		l    Layout
		node int64
		want []int64 // at ms 1000: two IDs; then at ms 1001: one
	}{
		{DefaultLayout, 7, []int64{1000<<22 | 7<<10, 1000<<22 | 7<<10 | 1, 1001<<22 | 7<<10}},
		{Layout{Epoch: DefaultEpoch, TimestampBits: 41, NodeBits: 6, SequenceBits: 16}, 63,
			[]int64{1000<<22 | 63<<16, 1000<<22 | 63<<16 | 1, 1001<<22 | 63<<16}},
		{Layout{Epoch: DefaultEpoch, TimestampBits: 39, NodeBits: 16, SequenceBits: 8}, 40000,
			[]int64{1000<<24 | 40000<<8, 1000<<24 | 40000<<8 | 1, 1001<<24 | 40000<<8}},
	} {
		clock := newFakeClock(at(1000))
		g := mustNew(t, c.l, c.node, Options{Now: clock.Now})
		got := []int64{mustNext(t, g), mustNext(t, g)}
		clock.Set(at(1001))
		got = append(got, mustNext(t, g))
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("%d/%d/%d node %d: IDs %d, want %d", c.l.TimestampBits, c.l.NodeBits, c.l.SequenceBits,
					c.node, got, c.want)
			}
		}
	}
}
