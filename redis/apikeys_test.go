package redis_test

import (
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/redis"
)

// An API key record written before the admin mark existed reads as a key that is
// no admin key and tells no creator (CreatedBy ""), its other fields intact.
func TestAPIKeyRecordWithoutAdminMark(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{Prefix: "oldkeys"})
	raw := rawClient(t, srv)
	// As the redis package stored a key before issue #20: no "admin" member.
	old := `{"hash":"AAECAw==","description":"old key","createdAt":"2026-03-01T12:00:00Z","expiresAt":"0001-01-01T00:00:00Z",` +
		`"maxNodes":2,"bootstrap":true,"revokedAt":"0001-01-01T00:00:00Z","lastUsedAt":"0001-01-01T00:00:00Z"}`
	if err := raw.HSet(t.Context(), "{oldkeys}:apikeys", "k-old", old).Err(); err != nil {
		t.Fatal(err)
	}
	k, err := s.APIKey(t.Context(), "k-old")
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if k.Admin || k.CreatedBy != "" || !k.Bootstrap || k.MaxNodes != 2 || k.Description != "old key" || !k.CreatedAt.Equal(want) ||
		!k.ExpiresAt.IsZero() || len(k.Hash) != 4 {
		t.Fatalf("old record read as %+v", k)
	}
	// A revoke rewrites the record: the key stays no admin key.
	if err := s.RevokeAPIKey(t.Context(), "k-old", want.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if k, err := s.APIKey(t.Context(), "k-old"); err != nil || k.Admin || !k.Revoked() {
		t.Fatalf("revoked old record read as %+v, %v", k, err)
	}
	if err := s.CreateAPIKey(t.Context(), idkeeper.APIKey{ID: "k-new", Hash: []byte{1}, CreatedAt: want, Admin: true}); err != nil {
		t.Fatal(err)
	}
	if k, err := s.APIKey(t.Context(), "k-new"); err != nil || !k.Admin {
		t.Fatalf("admin key read as %+v, %v", k, err)
	}
}
