package backup_test

import (
	"testing"

	"github.com/idkeeper/idkeeper/backup"
)

// The summary of a backup counts in the singular where a count is 1.
func TestCountsStringPlurals(t *testing.T) {
	one := backup.Counts{Nodes: 1, Leases: 1, Keys: 1, Users: 1, Allow: 1, Audit: 1, History: 1}
	if got, want := one.String(), "6 records: 1 node ID (1 leased), 1 API key, 1 user, 1 allow-list entry, 1 audit entry, "+
		"1 lease history record"; got != want {
		t.Errorf("String() = %q\nwant       %q", got, want)
	}
	two := backup.Counts{Nodes: 4096, Leases: 3, Keys: 2, Users: 2, Allow: 0, Audit: 2, History: 5}
	if got, want := two.String(), "4107 records: 4096 node IDs (3 leased), 2 API keys, 2 users, 0 allow-list entries, "+
		"2 audit entries, 5 lease history records"; got != want {
		t.Errorf("String() = %q\nwant       %q", got, want)
	}
}
