package localstate

import (
	"testing"

	"github.com/idkeeper/idkeeper"
)

// FuzzDecode: a slot never makes the decoder panic, and a slot it accepts
// re-encodes to a slot that decodes to the same state and sequence.
func FuzzDecode(f *testing.F) {
	good, _ := encode(testState(), 7)
	f.Add(good)
	f.Add(make([]byte, SlotSize))
	torn := append([]byte(nil), good...)
	torn[30] ^= 1
	f.Add(torn)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < SlotSize {
			b = append(b, make([]byte, SlotSize-len(b))...)
		}
		st, seq, err := decode(b[:SlotSize])
		if err != nil {
			return
		}
		again, err := encode(st, seq)
		if err != nil {
			t.Fatalf("a decoded state does not encode: %v", err)
		}
		st2, seq2, err := decode(again)
		if err != nil || st2 != st || seq2 != seq {
			t.Fatalf("round trip: %+v %d %v, want %+v %d", st2, seq2, err, st, seq)
		}
	})
}

func testState() idkeeper.ReplicaState {
	return idkeeper.ReplicaState{Generation: idkeeper.Generation{ID: "abc", Number: 3, Origin: idkeeper.OriginFresh}, MaxToken: 42, ReplicationID: "r"}
}
