package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Importing the client library compiles neither Prometheus nor protobuf: an
// embedding service that does not use Prometheus does not pay for it. The
// collector lives in package clientmetrics.
func TestNoPrometheusDependency(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	cmd := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != "github.com/idkeeper/idkeeper/client" {
		t.Fatalf("go list -deps ran on the wrong package: %q", deps)
	}
	for _, d := range deps {
		for _, bad := range []string{"github.com/prometheus/", "google.golang.org/protobuf/"} {
			if strings.HasPrefix(d, bad) {
				t.Errorf("package client depends on %s", d)
			}
		}
	}
	t.Logf("non-standard dependencies: %s", strings.Join(deps, " "))
}
