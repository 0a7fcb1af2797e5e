package idkeeper_test

import (
	"testing"

	"github.com/idkeeper/idkeeper"
)

// Errors that count node IDs say "1 node ID", not "1 node IDs".
func TestErrorMessagesPlurals(t *testing.T) {
	for _, c := range []struct {
		err  *idkeeper.Error
		want string
	}{
		{idkeeper.Exhausted(1, 0), "1 node ID requested, 0 allocatable"},
		{idkeeper.Exhausted(2, 1), "2 node IDs requested, 1 allocatable"},
		{idkeeper.CountMismatch(1, 2), "the requester holds 1 node ID and asked for 2; remove them first"},
		{idkeeper.QuotaExceeded(1, 1, 1), "the API key may hold 1 node ID; it holds 1 and asked for 1 more"},
		{idkeeper.QuotaExceeded(8, 8, 1), "the API key may hold 8 node IDs; it holds 8 and asked for 1 more"},
	} {
		if c.err.Message != c.want {
			t.Errorf("%q, want %q", c.err.Message, c.want)
		}
	}
}
