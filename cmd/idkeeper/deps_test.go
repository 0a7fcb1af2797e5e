package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The binary links no test harness (issue #31): every harness lives under
// internal/harness/, and nothing under it may be imported by production code.
func TestBinaryLinksNoHarness(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), deps)
	}
	for _, d := range deps {
		if strings.Contains(d, "/internal/harness/") {
			t.Errorf("the binary links the test harness %s", d)
		}
	}
}
