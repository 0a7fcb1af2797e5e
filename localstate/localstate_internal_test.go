package localstate

import (
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
)

// FuzzDecode: a slot never makes the decoder panic, and a slot it accepts
// re-encodes to a slot that decodes to the same state, store and sequence.
func FuzzDecode(f *testing.F) {
	good, _ := encode(testState(), "", 7)
	f.Add(good)
	f.Add(make([]byte, SlotSize))
	torn := append([]byte(nil), good...)
	torn[30] ^= 1
	f.Add(torn)
	withStore, _ := encode(testState(), "bolt:/var/lib/idkeeper/idkeeper.db", 8)
	f.Add(withStore)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < SlotSize {
			b = append(b, make([]byte, SlotSize-len(b))...)
		}
		st, id, seq, err := decode(b[:SlotSize])
		if err != nil {
			return
		}
		again, err := encode(st, id, seq)
		if err != nil {
			t.Fatalf("a decoded state does not encode: %v", err)
		}
		st2, id2, seq2, err := decode(again)
		if err != nil || st2 != st || id2 != id || seq2 != seq {
			t.Fatalf("round trip: %+v %q %d %v, want %+v %q %d", st2, id2, seq2, err, st, id, seq)
		}
	})
}

// The largest state a replica saves, with the longest identity a file records
// (Abbrev of any identity), fits one slot.
func TestLargestStateFits(t *testing.T) {
	st := idkeeper.ReplicaState{
		Generation: idkeeper.Generation{ID: strings.Repeat("f", 32), Number: 1<<64 - 1, Origin: idkeeper.OriginRecovered,
			At: time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC)},
		MaxToken: 1<<64 - 1, ReplicationID: strings.Repeat("a", 40), PoolNodes: 1 << 22,
		Owner: strings.Repeat("h", 64) + ":4194304:" + strings.Repeat("0", 8),
	}
	for _, id := range []string{strings.Repeat("\"", MaxStoreLen), strings.Repeat("é", 4096), strings.Repeat("\u2028", 100)} {
		a := Abbrev(id)
		if len(id) > MaxStoreLen && (len(a) > MaxStoreLen || !strings.Contains(a, "sha256:")) {
			t.Fatalf("Abbrev kept %d bytes: %q", len(a), a)
		}
		if _, err := encode(st, a, 1<<64-1); err != nil {
			t.Fatalf("%d-byte identity: %v", len(a), err)
		}
	}
	if Abbrev("x"+strings.Repeat("y", 300)) == Abbrev("z"+strings.Repeat("y", 300)) {
		t.Fatal("two long identities share an abbreviation")
	}
}

func testState() idkeeper.ReplicaState {
	return idkeeper.ReplicaState{Generation: idkeeper.Generation{ID: "abc", Number: 3, Origin: idkeeper.OriginFresh}, MaxToken: 42, ReplicationID: "r"}
}
