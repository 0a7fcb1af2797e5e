package bolt_test

import (
	"path/filepath"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
)

// An API key record written before the admin mark existed reads as a key that is
// no admin key and tells no creator (CreatedBy ""), its other fields intact.
func TestAPIKeyRecordWithoutAdminMark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idkeeper.db")
	s, err := bolt.Open(path, bolt.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	// As bolt stored a key before issue #20: no "admin" member.
	old := `{"hash":"AAECAw==","description":"old key","createdAt":1772366400000,"expiresAt":0,"maxNodes":2,"bootstrap":true,"revokedAt":0,"lastUsedAt":0}`
	err = db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("apikeys")).Put([]byte("k-old"), []byte(old)) })
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err = bolt.Open(path, bolt.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k, err := s.APIKey(t.Context(), "k-old")
	if err != nil {
		t.Fatal(err)
	}
	want := time.UnixMilli(1772366400000).UTC()
	if k.Admin || k.CreatedBy != "" || !k.Bootstrap || k.MaxNodes != 2 || k.Description != "old key" || !k.CreatedAt.Equal(want) || len(k.Hash) != 4 {
		t.Fatalf("old record read as %+v", k)
	}
	if err := s.CreateAPIKey(t.Context(), idkeeper.APIKey{ID: "k-new", Hash: []byte{1}, CreatedAt: want, Admin: true}); err != nil {
		t.Fatal(err)
	}
	if k, err := s.APIKey(t.Context(), "k-new"); err != nil || !k.Admin {
		t.Fatalf("admin key read as %+v, %v", k, err)
	}
}
