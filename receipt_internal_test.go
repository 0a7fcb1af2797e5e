package idkeeper

import (
	"strings"
	"testing"
	"time"
)

var fuzzSigner = receiptSigner{secret: []byte("fuzz-receipt-secret-0123456789abcdef")}

func fuzzLease() Lease {
	return Lease{NodeID: 17, FencingToken: 9, NotBefore: time.Date(2026, 3, 1, 12, 0, 0, 1e6, time.UTC),
		ExpiresAt: time.Date(2026, 3, 3, 12, 0, 0, 0, time.UTC), KeyID: "k1",
		Requester: Requester{MachineID: "m", PID: 1, StartedAt: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Instance: "i"}}
}

// A receipt verifies for its own requester and key only, and a change of any byte
// of it is caught.
func TestReceiptVerifies(t *testing.T) {
	l := fuzzLease()
	s := fuzzSigner.sign(l)
	if len(s) != 60 {
		t.Fatalf("receipt %q of %d characters", s, len(s))
	}
	c, err := fuzzSigner.verify(s, l.Requester, l.KeyID)
	if err != nil || c.NodeID != l.NodeID || c.Token != l.FencingToken || !c.NotBefore.Equal(l.NotBefore) || !c.ExpiresAt.Equal(l.ExpiresAt) {
		t.Fatalf("verify = %+v, %v", c, err)
	}
	other := l.Requester
	other.Instance = "j"
	for _, bad := range []struct {
		s   string
		r   Requester
		key string
	}{
		{s, other, l.KeyID},
		{s, l.Requester, "k2"},
		{s[:59] + "B", l.Requester, l.KeyID},
		{s + "A", l.Requester, l.KeyID},
		{strings.Repeat("A", 60), l.Requester, l.KeyID},
		{"", l.Requester, l.KeyID},
	} {
		if _, err := fuzzSigner.verify(bad.s, bad.r, bad.key); err == nil {
			t.Fatalf("verify(%q, %s, %s) succeeded", bad.s, bad.r, bad.key)
		}
	}
	if _, err := (receiptSigner{secret: []byte("another-secret-0123456789abcdefgh")}).verify(s, l.Requester, l.KeyID); err == nil {
		t.Fatal("a receipt verified under another secret")
	}
	l.FencingToken = MaxFencingToken + 1
	if _, err := fuzzSigner.verify(fuzzSigner.sign(l), l.Requester, l.KeyID); err == nil {
		t.Fatal("a token above 2^53-1 verified")
	}
}

// FuzzReceiptVerify: verification never panics, and a receipt that verifies is
// exactly the one signing its claim gives: nothing unsigned rides along.
func FuzzReceiptVerify(f *testing.F) {
	l := fuzzLease()
	f.Add(fuzzSigner.sign(l), "i", "k1")
	f.Add(fuzzSigner.sign(l), "j", "k1")
	f.Add("AQAAABEAAAAAAAAACQAAAZykjYSo", "i", "k1")
	f.Add(strings.Repeat("_", 60), "", "")
	f.Fuzz(func(t *testing.T, s, instance, key string) {
		r := l.Requester
		r.Instance = instance
		c, err := fuzzSigner.verify(s, r, key)
		if err != nil {
			return
		}
		again := Lease{NodeID: c.NodeID, FencingToken: c.Token, NotBefore: c.NotBefore, ExpiresAt: c.ExpiresAt, Requester: r, KeyID: key}
		if fuzzSigner.sign(again) != s {
			t.Fatalf("%q verified but signs as %q", s, fuzzSigner.sign(again))
		}
	})
}
