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
	for _, tags := range []string{"", "chaos_unsafe"} {
		cmd := exec.Command(gobin, "list", "-deps", "-tags", tags, "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
		out, err := cmd.Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				t.Fatalf("go list -deps -tags %q: %v\n%s", tags, err, ee.Stderr)
			}
			t.Fatalf("go list -deps -tags %q: %v", tags, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) == 0 || deps[len(deps)-1] != "github.com/idkeeper/idkeeper/client" {
			t.Fatalf("go list -deps -tags %q ran on the wrong package: %q", tags, deps)
		}
		for _, d := range deps {
			for _, bad := range []string{"github.com/prometheus/", "google.golang.org/protobuf/"} {
				if strings.HasPrefix(d, bad) {
					t.Errorf("-tags %q: package client depends on %s", tags, d)
				}
			}
		}
		t.Logf("-tags %q: non-standard dependencies: %s", tags, strings.Join(deps, " "))
	}
}
