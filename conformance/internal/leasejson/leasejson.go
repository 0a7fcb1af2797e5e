// Package leasejson reads the members of Alloc and Renew answers decoded into
// map[string]any, for the conformance harness and the Go driver, which rewrite and
// inspect those answers without the client's types.
package leasejson

import (
	"time"

	"github.com/idkeeper/idkeeper/internal/wire"
)

// Time parses v as a time of the HTTP contract; false when v is not one.
func Time(v any) (time.Time, bool) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, false
	}
	t, err := wire.ParseTime(s)
	return t, err == nil
}

// MinExpiry is the earliest expiresAt of an answer's "leases" member; false when
// there is no lease or an expiresAt is not a time.
func MinExpiry(leases any) (time.Time, bool) {
	ls, _ := leases.([]any)
	var end time.Time
	for _, l := range ls {
		lm, _ := l.(map[string]any)
		t, ok := Time(lm["expiresAt"])
		if !ok {
			return time.Time{}, false
		}
		if end.IsZero() || t.Before(end) {
			end = t
		}
	}
	return end, !end.IsZero()
}
