package helm_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// TestMain removes the idkeeper binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// idkeeper builds cmd/idkeeper once for the package's tests and returns its path.
func idkeeper(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "idkeeper-helm-test"); buildErr != nil {
			return
		}
		if out, err := exec.Command("go", "build", "-o", filepath.Join(buildDir, "idkeeper"), "../../cmd/idkeeper").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("go build ./cmd/idkeeper: %v", buildErr)
	}
	return filepath.Join(buildDir, "idkeeper")
}

var (
	helpEnv  = regexp.MustCompile(`IDKEEPER_[A-Z0-9_]+`)
	helpFlag = regexp.MustCompile(`(?m)^\s+(--[a-z0-9-]+)`)
)

// settingsOf returns the flags and environment variables `idkeeper SUB --help`
// documents.
func settingsOf(t *testing.T, bin, sub string) (flags, env map[string]bool) {
	t.Helper()
	out, _ := exec.Command(bin, sub, "--help").CombinedOutput() // --help exits 0 or 2 by command
	flags, env = map[string]bool{}, map[string]bool{}
	for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	for _, m := range helpEnv.FindAllString(string(out), -1) {
		env[m] = true
	}
	if len(flags) < 3 {
		t.Fatalf("idkeeper %s --help lists %d flags:\n%s", sub, len(flags), out)
	}
	return flags, env
}

// TestRenderedSettingsAreKnown: every argument and IDKEEPER_ variable the chart
// gives a container, and the clock agent's probe, is a flag or variable that the
// subcommand's own --help documents: a misspelt setting would be ignored (a
// variable) or refused at start (a flag) only on a cluster.
func TestRenderedSettingsAreKnown(t *testing.T) {
	bin := idkeeper(t)
	type known struct{ flags, env map[string]bool }
	cache := map[string]known{}
	get := func(sub string) known {
		if k, ok := cache[sub]; ok {
			return k
		}
		f, e := settingsOf(t, bin, sub)
		cache[sub] = known{f, e}
		return cache[sub]
	}
	check := func(where string, argv []string, env []corev1.EnvVar) {
		if len(argv) == 0 {
			t.Errorf("%s: no subcommand", where)
			return
		}
		k := get(argv[0])
		for _, a := range argv[1:] {
			if !strings.HasPrefix(a, "--") {
				continue
			}
			name, _, _ := strings.Cut(a, "=")
			if !k.flags[name] {
				t.Errorf("%s: idkeeper %s has no flag %s", where, argv[0], name)
			}
		}
		for _, e := range env {
			if strings.HasPrefix(e.Name, "IDKEEPER_") && !k.env[e.Name] {
				t.Errorf("%s: idkeeper %s --help documents no %s", where, argv[0], e.Name)
			}
		}
	}
	for _, c := range storeCases {
		r := renderChart(t, c.values)
		for name, p := range podTemplates(r) {
			for _, ctr := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
				where := c.name + ": " + name + " container " + ctr.Name
				check(where, ctr.Args, ctr.Env)
				for _, probe := range []*corev1.Probe{ctr.ReadinessProbe, ctr.LivenessProbe, ctr.StartupProbe} {
					if probe != nil && probe.Exec != nil {
						cmd := probe.Exec.Command
						if len(cmd) < 2 || cmd[0] != "/usr/local/bin/idkeeper" {
							t.Errorf("%s: an exec probe that is not the image's idkeeper: %v", where, cmd)
							continue
						}
						check(where+" probe", cmd[1:], nil)
					}
				}
			}
		}
	}
}
