package jsonbody

import (
	"errors"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// DecodeNulls tells the null members, which Decode drops like absent ones; Bool
// reads true and false only.
func TestNullsAndBool(t *testing.T) {
	known := []string{"a", "b", "c"}
	m, nulls, err := DecodeNulls([]byte(`{"a":null,"b":true}`), known)
	if err != nil || !nulls["a"] || nulls["b"] || nulls["c"] || len(m) != 1 {
		t.Fatalf("%v %v %v", m, nulls, err)
	}
	if v, ok, err := m.Bool("", "b"); !v || !ok || err != nil {
		t.Fatalf("Bool(b) = %v %v %v", v, ok, err)
	}
	if _, ok, err := m.Bool("", "a"); ok || err != nil {
		t.Fatalf("Bool(a) = %v %v", ok, err)
	}
	m, err = Decode([]byte(`{"a":null,"c":"yes"}`), known)
	if err != nil || len(m) != 1 {
		t.Fatalf("%v %v", m, err)
	}
	var e *idkeeper.Error
	if _, _, err := m.Bool("x.", "c"); !errors.As(err, &e) || e.Field != "x.c" || e.Code != protocol.CodeInvalidRequest {
		t.Fatalf("Bool(c): %v", err)
	}
}
