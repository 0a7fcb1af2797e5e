package wire

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// The admin API's bodies: members in the order docs/api.md shows, times null when
// unset, and the strict reader's member list of a create.
func TestAdminBytes(t *testing.T) {
	exp := TimeExample
	for _, c := range []struct {
		v    any
		want string
	}{
		{APIKey{ID: "0123456789abcdef", Description: "billing", Status: "active", CreatedAt: TimeExample, ExpiresAt: &exp, MaxNodes: 2,
			EffectiveMaxNodes: 2, NodesCooling: 1},
			`{"id":"0123456789abcdef","description":"billing","status":"active","bootstrap":false,"admin":false,` +
				`"createdAt":"2026-01-01T00:00:00.000Z","createdBy":"","expiresAt":"2026-01-01T00:00:00.000Z","lastUsedAt":null,"revokedAt":null,` +
				`"maxNodes":2,"nodesHeld":0,"effectiveMaxNodes":2,"maxNodesIsDefault":false,"nodesCooling":1}`},
		{CreateAPIKeyRequest{Description: "ops", ExpiresIn: "720h", Admin: true}, `{"description":"ops","expiresIn":"720h","admin":true}`},
		{APIKeyList{Keys: []APIKey{}}, `{"keys":[]}`},
		{StorePool{First: 100, Last: 163, Nodes: 64, Layout: LayoutLimits{Layout: Layout{Epoch: TimeExample, TimestampBits: 41,
			NodeBits: 10, SequenceBits: 12}, IDsPerSecond: 4096000, End: "2095-09-07T15:47:35.552Z"}},
			`{"first":100,"last":163,"nodes":64,"layout":{"epoch":"2026-01-01T00:00:00.000Z","timestampBits":41,"nodeBits":10,` +
				`"sequenceBits":12,"idsPerSecond":4096000,"end":"2095-09-07T15:47:35.552Z"}}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%T:\n got %s, %v\nwant %s", c.v, b, err, c.want)
		}
	}
	if got := Members(CreateAPIKeyRequest{}); !slices.Equal(got, []string{"description", "expiresIn", "expiresAt", "maxNodes", "admin"}) {
		t.Errorf("Members(CreateAPIKeyRequest) = %q", got)
	}
}

// The Warning of an expiring key reads back, alone or among other warnings; other
// warnings and malformed ones are not taken for it.
func TestKeyExpiryWarning(t *testing.T) {
	at := time.Date(2026, 3, 15, 10, 0, 0, 123e6, time.UTC)
	v := KeyExpiryWarning("0123456789abcdef", at)
	if v != `299 idkeeper "API key 0123456789abcdef expires at 2026-03-15T10:00:00.123Z; create a new key and rotate to it"` {
		t.Fatalf("KeyExpiryWarning = %s", v)
	}
	for _, h := range []string{v, `199 proxy "something else", ` + v} {
		if id, got, ok := ParseKeyExpiryWarning(h); !ok || id != "0123456789abcdef" || !got.Equal(at) {
			t.Errorf("ParseKeyExpiryWarning(%q) = %q, %v, %v", h, id, got, ok)
		}
	}
	for _, h := range []string{
		"",
		`199 proxy "API key x expires at 2026-03-15T10:00:00Z; y"`,
		`299 idkeeper "API key  expires at 2026-03-15T10:00:00Z; y"`,
		`299 idkeeper "API key x expires at tomorrow; y"`,
		`299 idkeeper "API key x expires at 2026-03-15T10:00:00Z"`,
	} {
		if id, got, ok := ParseKeyExpiryWarning(h); ok {
			t.Errorf("ParseKeyExpiryWarning(%q) = %q, %v, true", h, id, got)
		}
	}
}
