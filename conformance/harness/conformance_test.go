package harness

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var driversFlag = flag.String("conformance.drivers", "",
	"comma-separated drivers to run (go, python, typescript); default: every driver whose program is found")

// root is the module's root, where drivers run.
var root, _ = filepath.Abs(filepath.Join("..", ".."))

// driverFiles are the programs the drivers run, relative to root, and how.
var driverFiles = map[string][]string{
	"python":     {"python3", "clients/python/driver.py"},
	"typescript": {"node", "clients/typescript/dist/driver.js"},
}

var allDrivers = []string{"go", "python", "typescript"}

// TestMain lifts the default -test.parallel (GOMAXPROCS) to 64: the scenario runs
// spend their time waiting for leases and retries, not on the CPU, and the suite's
// wall time is that of its longest scenario only when they all run at once.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "64")
	}
	code := m.Run()
	if goDriverDir != "" {
		os.RemoveAll(goDriverDir)
	}
	os.Exit(code)
}

var (
	goDriverOnce sync.Once
	goDriverPath string
	goDriverDir  string
	goDriverErr  error
)

// goDriver builds conformance/drivers/go once per test binary.
func goDriver(t *testing.T) string {
	goDriverOnce.Do(func() {
		dir, err := os.MkdirTemp("", "idk-conformance-")
		if err != nil {
			goDriverErr = err
			return
		}
		goDriverDir, goDriverPath = dir, filepath.Join(dir, "go-driver")
		cmd := exec.Command("go", "build", "-o", goDriverPath, "./conformance/drivers/go")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			goDriverErr = fmt.Errorf("go build ./conformance/drivers/go: %v\n%s", err, out)
		}
	})
	if goDriverErr != nil {
		t.Fatal(goDriverErr)
	}
	return goDriverPath
}

// drivers are the drivers to run: the flag's, else every one found. A driver
// named in the flag whose program is missing fails; one not named is skipped.
func drivers(t *testing.T) (run []string, missing map[string]string) {
	missing = map[string]string{}
	for name, argv := range driverFiles {
		if _, err := os.Stat(filepath.Join(root, argv[1])); err != nil {
			missing[name] = argv[1]
		}
	}
	if *driversFlag == "" {
		return allDrivers, missing
	}
	for _, d := range strings.Split(*driversFlag, ",") {
		if d = strings.TrimSpace(d); !slices.Contains(allDrivers, d) {
			t.Fatalf("-conformance.drivers: unknown driver %q (go, python, typescript)", d)
		}
		run = append(run, strings.TrimSpace(d))
	}
	return run, missing
}

// TestConformance runs every scenario for every driver, once as it is (it must
// pass) and once with its break (it must fail).
func TestConformance(t *testing.T) {
	scenarios, err := Load(filepath.Join(root, "conformance", "scenarios"))
	if err != nil {
		t.Fatal(err)
	}
	names, missing := drivers(t)
	named := *driversFlag != ""
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			var argv []string
			switch {
			case name == "go":
				argv = []string{goDriver(t)}
			case missing[name] != "" && named:
				t.Fatalf("the %s driver's program %s is missing (build it first; see docs/clients.md, Conformance)",
					name, filepath.Join(root, missing[name]))
			case missing[name] != "":
				t.Skipf("the %s driver's program %s is missing: not run (name it in -conformance.drivers to make that a failure)",
					name, filepath.Join(root, missing[name]))
			default:
				argv = driverFiles[name]
			}
			for i := range scenarios {
				sc := &scenarios[i]
				t.Run(sc.Name, func(t *testing.T) {
					t.Parallel()
					t.Run("pass", func(t *testing.T) {
						t.Parallel()
						o := Options{Driver: name, Argv: argv, Dir: root, TempDir: t.TempDir(),
							MachineID: "conformance-" + name + "-" + sc.Name}
						if err := Run(sc, o); err != nil {
							t.Fatalf("%s: %s\n%v", sc.Name, sc.Rule, err)
						}
					})
					t.Run("break="+sc.Break, func(t *testing.T) {
						if !sc.BreakRuns(name) {
							t.Skipf("the %s driver does not implement the optional break %s (breakDrivers)", name, sc.Break)
						}
						t.Parallel()
						o := Options{Driver: name, Argv: argv, Dir: root, TempDir: t.TempDir(), Break: sc.Break,
							MachineID: "conformance-" + name + "-" + sc.Name}
						err := Run(sc, o)
						if errors.Is(err, ErrBreakUnsupported) {
							t.Fatalf("%s: the %s driver must implement break %s: %v", sc.Name, name, sc.Break, firstLine(err.Error()))
						}
						if err == nil {
							t.Fatalf("%s passed with break %s: the scenario cannot tell a client that breaks its rule (%s)",
								sc.Name, sc.Break, sc.Rule)
						}
						t.Logf("failed with the break, as it must: %s", firstLine(err.Error()))
					})
				})
			}
		})
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
