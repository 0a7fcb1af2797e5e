package server

import "testing"

// Two Redis stores never share a default state file, and the default is not the
// legacy one of the versions before issue #29 (cmd/idkeeper's
// TestStateFileRecordsRedis starts servers on both).
func TestDefaultStateFile_OnePerStore(t *testing.T) {
	a, b := "redis://127.0.0.1:7001/0", "redis://127.0.0.1:7002/0"
	idA, idB := "redis://127.0.0.1:7001/0 prefix idk:", "redis://127.0.0.1:7002/0 prefix idk:"
	if defaultStateFile(a, idA) == defaultStateFile(b, idB) || defaultStateFile(a, idA) == legacyStateFile(a) {
		t.Fatal("two Redis stores share a default state file")
	}
	if got, want := defaultStateFile("bolt:data/b.db", "ignored"), "data/b.db."+StateFileName; got != want {
		t.Errorf("bolt default %q, want %q", got, want)
	}
}
