package allowlist_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/bolt"
)

// TestAllowList: the floor and the store's entries both allow; an empty list allows
// all; a list not read yet fails closed; a failed refresh keeps the last entries.
func TestAllowList(t *testing.T) {
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddr
	floor := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}

	open := allowlist.New(nil, nil)
	if !open.Allows(addr("203.0.113.9")) || !open.AllowsAll() {
		t.Fatal("an empty list without a store refuses")
	}

	al := allowlist.New(floor, st)
	if al.Loaded() || al.Allows(addr("192.0.2.1")) || !al.Allows(addr("10.1.2.3")) || al.AllowsAll() {
		t.Fatal("before the first read: only the floor may allow")
	}
	noFloor := allowlist.New(nil, st)
	if noFloor.Allows(addr("192.0.2.1")) || noFloor.AllowsAll() {
		t.Fatal("a list not read yet, without a floor, allows: it must fail closed")
	}
	for _, a := range []*allowlist.List{al, noFloor} {
		if err := a.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !noFloor.Allows(addr("192.0.2.1")) || !noFloor.AllowsAll() {
		t.Fatal("an empty store and no floor: every address is allowed")
	}
	if al.Allows(addr("192.0.2.1")) {
		t.Fatal("the floor alone is in force: 192.0.2.1 is not in it")
	}

	if err := st.AddAllowEntry(ctx, allowlist.Entry{Prefix: netip.MustParsePrefix("192.0.2.0/24"), Note: "office",
		CreatedBy: "alice", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if al.Allows(addr("192.0.2.1")) {
		t.Fatal("an entry applies before a refresh")
	}
	for _, a := range []*allowlist.List{al, noFloor} {
		if err := a.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]struct {
		list  *allowlist.List
		addr  string
		allow bool
	}{
		"stored entry":         {al, "192.0.2.77", true},
		"floor":                {al, "10.9.9.9", true},
		"v4-mapped":            {al, "::ffff:192.0.2.5", true},
		"neither":              {al, "198.51.100.1", false},
		"stored, no floor":     {noFloor, "192.0.2.8", true},
		"not listed, no floor": {noFloor, "10.9.9.9", false},
	} {
		if got := c.list.Allows(addr(c.addr)); got != c.allow {
			t.Errorf("%s: Allows(%s) = %t, want %t", name, c.addr, got, c.allow)
		}
	}

	// The store fails: the entries read last stay in force.
	st.Close()
	if err := al.Refresh(ctx); err == nil {
		t.Fatal("Refresh on a closed store: no error")
	}
	if !al.Allows(addr("192.0.2.77")) || al.Allows(addr("198.51.100.1")) {
		t.Fatal("a failed refresh changed the list in force")
	}
}
