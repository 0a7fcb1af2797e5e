package client_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// lightDeps are the only packages outside the standard library that importing the
// client library compiles (issue #31): the ID generator, the shared vocabulary
// and the JSON bodies. Neither the registry's engine nor OpenTelemetry nor
// Prometheus: tracing plugs in through Config.WrapTransport (package tracing),
// metrics through package clientmetrics.
var lightDeps = []string{
	"github.com/idkeeper/idkeeper/snowflake",
	"github.com/idkeeper/idkeeper/protocol",
	"github.com/idkeeper/idkeeper/internal/wire",
	"github.com/idkeeper/idkeeper/client",
}

// Importing the client library compiles the standard library and lightDeps only:
// an embedding service pays for neither the registry's engine (the root package,
// internal/shortlease) nor OpenTelemetry (otelhttp, logr) nor Prometheus and
// protobuf.
func TestImportsStandardLibrarySnowflakeAndWireOnly(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("no go command in PATH: the test lists the package's dependencies with it")
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
		if !slices.Contains(lightDeps, d) {
			t.Errorf("package client depends on %s", d)
		}
	}
	t.Logf("non-standard dependencies: %s", strings.Join(deps, " "))
}
