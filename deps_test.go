package idkeeper_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// rootDeps are the only module packages the root compiles (issue #31): the ID
// layout, the shared vocabulary, the audit log's record and two small helpers,
// all standard library only. No adapter, no service, nothing outside the module.
var rootDeps = []string{
	"github.com/idkeeper/idkeeper/snowflake",
	"github.com/idkeeper/idkeeper/protocol",
	"github.com/idkeeper/idkeeper/audit",
	"github.com/idkeeper/idkeeper/internal/plural",
	"github.com/idkeeper/idkeeper/internal/shortlease",
	"github.com/idkeeper/idkeeper",
}

// The root package depends on the standard library and rootDeps only, so that the
// packages it leaves out (account, snapshot, allowlist, the adapters) can import
// it without a cycle and an engine change never drags in a service.
func TestRootImportsStandardLibraryAndLeafPackagesOnly(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("no go command in PATH: the test lists the package's dependencies with it")
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != "github.com/idkeeper/idkeeper" {
		t.Fatalf("go list -deps ran on the wrong package: %q", deps)
	}
	for _, d := range deps {
		if !slices.Contains(rootDeps, d) {
			t.Errorf("the root package depends on %s", d)
		}
	}
}
