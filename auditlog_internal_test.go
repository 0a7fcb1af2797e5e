package idkeeper

import (
	"strconv"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper/audit"
)

// An audit target lists node IDs as ranges, cut at a range boundary to the
// field's bound with the count left out.
func TestAuditNodes(t *testing.T) {
	if got := auditNodes([]NodeID{7}); got != "node:7" {
		t.Fatal(got)
	}
	if got := auditNodes([]NodeID{5, 1, 2, 3, 9}); got != "nodes:1-3,5,9" {
		t.Fatal(got)
	}
	var every2 []NodeID
	for i := range 400 {
		every2 = append(every2, NodeID(2*i))
	}
	got := auditNodes(every2)
	if len(got) > audit.MaxFieldLen || !strings.HasPrefix(got, "nodes:0,2,4,") || !strings.HasSuffix(got, " more)") {
		t.Fatalf("%d bytes: %s", len(got), got)
	}
	shown := strings.Count(got, ",") // ranges shown, and the "…" part
	if want := "(+" + strconv.Itoa(400-shown) + " more)"; !strings.HasSuffix(got, want) {
		t.Fatalf("%s does not end with %s", got, want)
	}
}
