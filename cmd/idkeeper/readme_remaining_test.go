package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper/internal/wire"
)

// TestReadmeRemainingAnswer: the README's examples of the GET /v1/leases/remaining
// answer have exactly the members the registry sends (first and last included),
// nextReadyAt aside, which is sent only while a node ID cools.
func TestReadmeRemainingAnswer(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(moduleRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	sent, err := json.Marshal(wire.RemainingResponse{})
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal(sent, &want); err != nil {
		t.Fatal(err)
	}
	examples := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.Contains(line, `"remaining":`) || !strings.HasPrefix(strings.TrimSpace(line), "{") {
			continue
		}
		examples++
		var got map[string]any
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("README: %q is not JSON: %v", line, err)
		}
		if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(g, w) {
			t.Errorf("README: %s has the members %v; the registry sends %v", line, g, w)
		}
	}
	if examples == 0 {
		t.Fatal("README: no example of the /remaining answer found")
	}
}
