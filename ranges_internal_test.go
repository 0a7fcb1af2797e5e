package idkeeper

import "testing"

func TestNodeRanges(t *testing.T) {
	for _, c := range []struct {
		ids  []NodeID
		want string
	}{
		{nil, ""},
		{[]NodeID{7}, "7"},
		{[]NodeID{0, 1, 2, 3}, "0-3"},
		{[]NodeID{9, 0, 2, 1, 5, 8, 8}, "0-2,5,8-9"},
		{[]NodeID{4095, 4093}, "4093,4095"},
	} {
		if got := nodeRanges(c.ids).String(); got != c.want {
			t.Errorf("nodeRanges(%v) = %q, want %q", c.ids, got, c.want)
		}
	}
}
