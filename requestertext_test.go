package idkeeper_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// TestStoredRequesterTextKept: a requester read back from a store or a backup is
// checked by the rule of the records older versions wrote, so a record holding such
// a rune never makes a restore fail; what a caller sends is checked by the new one.
func TestStoredRequesterTextKept(t *testing.T) {
	r := idkeeper.Requester{MachineID: "m\u202Ex", PID: 1, StartedAt: t0, Instance: "i"}
	if err := r.Validate(); err == nil {
		t.Fatal("Validate accepted a bidi override")
	}
	if err := r.ValidateStored(); err != nil {
		t.Fatalf("ValidateStored: %v", err)
	}
	r.MachineID = "m\x01x"
	if err := r.ValidateStored(); err == nil {
		t.Fatal("ValidateStored accepted a C0 control")
	}
}

// The rule of Requester.Validate holds for every other text a caller or an
// operator sends: client info, notes, key descriptions; the audit log keeps such a
// rune as a space.
func TestOtherTextRefused(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	ctx := context.Background()
	for _, r := range []rune{'\u202E', '\u200B', '\u0085', '\u2028', '\u2029'} {
		bad := "a" + string(r) + "b"
		if err := (idkeeper.ClientInfo{Host: bad}).Validate(); err == nil {
			t.Errorf("U+%04X: client host accepted", r)
		}
		if err := (idkeeper.ClientInfo{Labels: map[string]string{"k": bad}}).Validate(); err == nil {
			t.Errorf("U+%04X: client label accepted", r)
		}
		if _, ok := idkeeper.CleanText(bad, 100); ok {
			t.Errorf("U+%04X: CleanText accepted it", r)
		}
		_, _, err := apikey.NewAdmin(e.reg).Create(ctx, apikey.Spec{Description: bad})
		if ie := (*idkeeper.Error)(nil); !errors.As(err, &ie) || ie.Code != protocol.CodeInvalidRequest || ie.Field != "description" {
			t.Errorf("U+%04X: CreateKey = %v, want INVALID_REQUEST on description", r, err)
		}
		if got := (audit.Entry{Detail: bad}).Seal(0, "").Detail; got != "a b" {
			t.Errorf("U+%04X: audit detail kept as %q", r, got)
		}
	}
	if s, ok := idkeeper.CleanText(" café 日本 ", 100); !ok || s != "café 日本" {
		t.Errorf("CleanText(printable non-ASCII) = %q, %v", s, ok)
	}
	keys, err := idkeeper.ListKeys(ctx, e.store)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.ContainsAny(k.Key.Description, "\u202E\u200B\u0085\u2028\u2029") {
			t.Fatalf("a refused key was stored: %+v", k.Key)
		}
	}
}
