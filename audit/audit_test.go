package audit

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func chain(n int) []Entry {
	var out []Entry
	var seq uint64
	var hash string
	for i := range n {
		e := Entry{At: time.Date(2026, 11, 30, 12, 0, i, 500, time.UTC), Actor: "user:alice",
			Action: LeaseGrant, Target: "node:7", RemoteIP: "192.0.2.1", Detail: "token 9"}.Seal(seq, hash)
		out = append(out, e)
		seq, hash = e.Seq, e.Hash
	}
	return out
}

// TestVerifyAuditFindsTheFirstBrokenLink: every kind of tampering is found, at the
// entry where it starts.
func TestVerifyAuditFindsTheFirstBrokenLink(t *testing.T) {
	good := chain(5)
	head := good[4]
	if err := Verify(good, head.Seq, head.Hash); err != nil {
		t.Fatalf("an untouched chain: %v", err)
	}
	if err := Verify(good[2:], head.Seq, head.Hash); err != nil {
		t.Fatalf("a chain whose start was pruned: %v", err)
	}
	if good[0].At.Nanosecond() != 0 || good[0].Prev != "" || good[1].Prev != good[0].Hash {
		t.Fatalf("Seal: %+v", good[:2])
	}
	for name, c := range map[string]struct {
		edit func([]Entry) []Entry
		at   uint64
	}{
		"detail changed": {func(es []Entry) []Entry { es[2].Detail = "token 10"; return es }, 3},
		"actor changed":  {func(es []Entry) []Entry { es[1].Actor = "user:bob"; return es }, 2},
		"time changed":   {func(es []Entry) []Entry { es[3].At = es[3].At.Add(time.Hour); return es }, 4},
		"entry removed": {func(es []Entry) []Entry {
			return append(es[:2:2], es[3:]...)
		}, 4},
		"entry changed and resealed": {func(es []Entry) []Entry {
			e := es[1]
			e.Detail = "forged"
			es[1] = e.Seal(es[0].Seq, es[0].Hash)
			return es
		}, 3},
		"tail cut": {func(es []Entry) []Entry { return es[:4] }, 4},
		"first entry given a predecessor": {func(es []Entry) []Entry {
			es[0] = es[0].Seal(0, "ab")
			return es
		}, 1},
	} {
		es := c.edit(append([]Entry(nil), good...))
		err := Verify(es, head.Seq, head.Hash)
		var b *Break
		if !errors.As(err, &b) || b.Seq != c.at {
			t.Errorf("%s: %v, want a break at entry %d", name, err, c.at)
		}
	}
}

// TestSealCleansText: what a hostile caller types cannot forge a line or break the
// encoding, and fields are bounded.
func TestSealCleansText(t *testing.T) {
	e := Entry{Actor: "user:eve\nuser:admin", Target: "bad\xffbyte", Detail: strings.Repeat("é", 1000)}.Seal(0, "")
	if e.Actor != "user:eve user:admin" || e.Target != "bad\uFFFDbyte" {
		t.Fatalf("Seal kept control characters or invalid UTF-8: %q %q", e.Actor, e.Target)
	}
	if len(e.Detail) > MaxTextLen || !strings.HasPrefix(e.Detail, "éé") || strings.ContainsRune(e.Detail, '\uFFFD') {
		t.Fatalf("Detail cut badly: %d bytes", len(e.Detail))
	}
	if e.Hash != e.Digest() {
		t.Fatal("Seal's Hash is not the Digest of what it keeps")
	}
}
