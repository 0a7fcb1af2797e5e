package gateway

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"testing"
)

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

// TestIDsCodecRoundTrip: every answer appendIDs writes is stored compactly and
// replayed byte for byte, in both formats, whatever the runs look like.
func TestIDsCodecRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const base = int64(120610764938543104) // an ID of 2026
	batches := map[string][]int64{
		"empty":        {},
		"one":          {base},
		"zero":         {0, 1, 2, 5},
		"largest":      {math.MaxInt64 - 2, math.MaxInt64 - 1, math.MaxInt64},
		"extremes":     {0, math.MaxInt64},
		"one run":      seq(base, 10_000),
		"no run":       spread(base, 1000, 2),
		"milliseconds": millis(base, 10_000, 1024, 300), // a node ID's sequence over 10 ms
	}
	var random []int64
	for id := base; len(random) < 5000; id += 1 + rng.Int64N(3) {
		random = append(random, id)
	}
	batches["random"] = random
	for name, ids := range batches {
		for _, f := range []format{formatNumber, formatString} {
			body := appendIDs(nil, ids, f)
			stored, ok := encodeIDs(http.StatusOK, jsonHeader, body)
			if !ok {
				t.Fatalf("%s (format %d): not encoded", name, f)
			}
			back, err := decodeIDs(stored)
			if err != nil || !bytes.Equal(back, body) {
				t.Fatalf("%s (format %d): decoded %.80q, %v; want %.80q", name, f, back, err, body)
			}
			t.Logf("%-12s format %d: %7d IDs, %8d bytes of JSON, %6d stored", name, f, len(ids), len(body), len(stored))
		}
	}
	// 10,000 IDs of one node ID take under 100 bytes; IDs without a run take at
	// most 11 bytes each (varints of a gap and a length).
	if stored, _ := encodeIDs(200, jsonHeader, appendIDs(nil, batches["milliseconds"], formatNumber)); len(stored) > 100 {
		t.Fatalf("10,000 IDs over 10 ms stored in %d bytes, want under 100", len(stored))
	}
	if stored, _ := encodeIDs(200, jsonHeader, appendIDs(nil, batches["no run"], formatNumber)); len(stored) > 2+11*1000 {
		t.Fatalf("1,000 IDs without a run stored in %d bytes", len(stored))
	}
}

func seq(first int64, n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = first + int64(i)
	}
	return ids
}

func spread(first int64, n int, step int64) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = first + int64(i)*step
	}
	return ids
}

// millis is n IDs of one node ID in the default layout, perMs per millisecond
// from the sequence start on.
func millis(first int64, n, perMs, start int) []int64 {
	var ids []int64
	for ms := int64(0); len(ids) < n; ms++ {
		for s := start; s < perMs && len(ids) < n; s++ {
			ids = append(ids, first+ms<<22+int64(s))
		}
		start = 0
	}
	return ids
}

// TestIDsCodecStoresOthersAsTheyAre: an answer that is not exactly appendIDs'
// (a problem, another status, a body in another form) is not encoded.
func TestIDsCodecStoresOthersAsTheyAre(t *testing.T) {
	for _, c := range []struct {
		status int
		ct     string
		body   string
	}{
		{200, "application/problem+json", `{"ids":[1]}` + "\n"},
		{409, "application/json", `{"ids":[1]}` + "\n"},
		{200, "application/json", `{"ids":[1]}`},
		{200, "application/json", `{"ids": [1]}` + "\n"},
		{200, "application/json", `{"ids":[1,2,]}` + "\n"},
		{200, "application/json", `{"ids":[2,1]}` + "\n"},
		{200, "application/json", `{"ids":[1,1]}` + "\n"},
		{200, "application/json", `{"ids":[01]}` + "\n"},
		{200, "application/json", `{"ids":[-1]}` + "\n"},
		{200, "application/json", `{"ids":[+1]}` + "\n"},
		{200, "application/json", `{"ids":[-0]}` + "\n"},
		{200, "application/json", `{"ids":[1e3]}` + "\n"},
		{200, "application/json", `{"ids":[1,"2"]}` + "\n"},
		{200, "application/json", `{"ids":["1",2]}` + "\n"},
		{200, "application/json", `{"ids":[9223372036854775808]}` + "\n"},
		{200, "application/json", `{"ids":[""]}` + "\n"},
		{200, "application/json", `{"id":[1]}` + "\n"},
		{200, "application/json", ``},
	} {
		if stored, ok := encodeIDs(c.status, http.Header{"Content-Type": {c.ct}}, []byte(c.body)); ok {
			t.Errorf("%d %s %q encoded as %q", c.status, c.ct, c.body, stored)
		}
	}
}

// TestDecodeIDsCorrupt: a corrupt record is an error, cheaply: a record that
// claims more IDs than a request can have is refused before any is made.
func TestDecodeIDsCorrupt(t *testing.T) {
	big := []byte{'n', 1, 0}
	big = appendUvarint(big, maxDecodedIDs) // one run of maxDecodedIDs+1 IDs
	for _, stored := range [][]byte{
		nil, {}, {'x', 0}, {'n'}, {'n', 1}, {'n', 1, 5}, {'n', 0, 0},
		{'n', 0x80},          // a truncated varint
		{'n', 3, 1, 0, 0, 0}, // two runs of three
		big,
		appendUvarint(appendUvarint([]byte{'n', 1}, math.MaxInt64), 1),        // past the largest ID
		appendUvarint(appendUvarint([]byte{'n', 2, 0, 0}, math.MaxUint64), 0), // a gap that wraps
		appendUvarint([]byte{'n'}, math.MaxUint64),                            // runs beyond any request
	} {
		if body, err := decodeIDs(stored); !errors.Is(err, errCorruptIDs) {
			t.Errorf("decodeIDs(%x) = %.40q, %v; want a corrupt record", stored, body, err)
		}
	}
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// FuzzIDsCodec: whatever a record holds, decoding it does not panic, and what it
// decodes to is stored and replayed byte for byte; whatever a body is, encoding
// it either declines or round-trips exactly.
func FuzzIDsCodec(f *testing.F) {
	for _, ids := range [][]int64{{}, {1}, {0, 1, 2, 9}, millis(1<<40, 3000, 1024, 1000)} {
		body := appendIDs(nil, ids, formatNumber)
		stored, _ := encodeIDs(200, jsonHeader, body)
		f.Add(stored, body)
	}
	f.Add([]byte{'s', 1, 3, 4}, []byte(`{"ids":["3","4"]}`+"\n"))
	f.Fuzz(func(t *testing.T, stored, body []byte) {
		if back, err := decodeIDs(stored); err == nil {
			again, ok := encodeIDs(200, jsonHeader, back)
			if !ok {
				t.Fatalf("decoded %q, which does not encode", back)
			}
			if re, err := decodeIDs(again); err != nil || !bytes.Equal(re, back) {
				t.Fatalf("%q re-encoded to %x, which decodes to %q, %v", back, again, re, err)
			}
		}
		if enc, ok := encodeIDs(200, jsonHeader, body); ok {
			if back, err := decodeIDs(enc); err != nil || !bytes.Equal(back, body) {
				t.Fatalf("%q encoded to %x, which decodes to %q, %v", body, enc, back, err)
			}
			if len(enc) > len(body) {
				t.Fatalf("%q (%d bytes) stored in %d", body, len(body), len(enc))
			}
		}
	})
}
