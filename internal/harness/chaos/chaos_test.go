package chaos

import (
	"flag"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var (
	longMode = flag.Bool("chaos.long", os.Getenv("IDKEEPER_CHAOS_LONG") == "1",
		"long (soak) mode: every scenario injects faults for -chaos.faulting, and TestSoak runs (also IDKEEPER_CHAOS_LONG=1)")
	faulting = flag.Duration("chaos.faulting", 2*time.Minute, "long mode: how long each scenario injects faults")
	soakFor  = flag.Duration("chaos.soak", 20*time.Minute, "long mode: how long TestSoak injects faults")
	keepRuns = flag.Bool("chaos.keep", false, "keep every run's directory (histories and ID files) and print where")
)

var (
	buildOnce sync.Once
	builtBins Binaries
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds the server and client programs once per test binary.
func binaries(t *testing.T) Binaries {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "idkeeper-chaos-bin-"); buildErr != nil {
			return
		}
		start := time.Now()
		builtBins, buildErr = Build(binDir)
		t.Logf("built the server and client binaries in %v", time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBins
}

func plan() Plan {
	if *longMode {
		return LongPlan(*faulting)
	}
	return ShortPlan()
}

// runDir is where a run's processes write: under t.TempDir, or kept with -chaos.keep.
func runDir(t *testing.T) string {
	if !*keepRuns {
		return filepath.Join(t.TempDir(), "run")
	}
	d, err := os.MkdirTemp("", "idkeeper-chaos-"+filepath.Base(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("run directory kept: %s", d)
	return d
}

// TestChaos runs every fault scenario against the production builds; the checker
// must find every property holds.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite starts real processes; skipped in -short mode")
	}
	bins := binaries(t)
	p := plan()
	for _, sc := range Scenarios() {
		t.Run(sc.Name, func(t *testing.T) { runSafe(t, bins, sc, p) })
	}
}

// TestSoak mixes every fault on one cluster for -chaos.soak; long mode only.
func TestSoak(t *testing.T) {
	if !*longMode {
		t.Skip("long mode only (-chaos.long or IDKEEPER_CHAOS_LONG=1)")
	}
	p := plan()
	p.Faulting = *soakFor
	runSafe(t, binaries(t), Soak(), p)
}

func runSafe(t *testing.T, bins Binaries, sc Scenario, p Plan) {
	dir := runDir(t)
	out, err := RunScenario(t, bins, dir, sc, p, "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s in %v:\n%s", sc.Name, out.Elapsed.Round(time.Second), out.Report)
	if out.Report.Failed() {
		t.Errorf("%s: the checker found violations (histories in %s)", sc.Name, dir)
	}
	if sc.Expect != nil {
		if err := sc.Expect(out.Report); err != nil {
			t.Errorf("%s: the faults did not bite: %v", sc.Name, err)
		}
	}
	if out.Report.IDs == 0 {
		t.Errorf("%s: no ID was minted", sc.Name)
	}
	if !t.Failed() && !*keepRuns {
		DropIDs(dir)
	}
}

// TestControls runs each negative control: a scenario with one safety mechanism
// switched off by a chaos program (chaosserver on a store control, or chaosclient
// --control). The checker must fail each of them.
func TestControls(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite starts real processes; skipped in -short mode")
	}
	bins := binaries(t)
	p := plan()
	if p.Long {
		p.Faulting = ShortPlan().Faulting
	}
	for _, ctl := range Controls() {
		t.Run(ctl.Name, func(t *testing.T) {
			dir := runDir(t)
			out, err := RunScenario(t, bins, dir, ctl.Scenario, p, ctl.Server, ctl.Client)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("control %s (%s, server control %q, client control %q) in %v:\n%s", ctl.Name, ctl.Scenario.Name, ctl.Server, ctl.Client,
				out.Elapsed.Round(time.Second), out.Report)
			for _, prop := range ctl.MustFail {
				if !out.Report.Violated(prop) {
					t.Errorf("control %s: the checker did not catch it: property %q held", ctl.Name, prop)
				}
			}
			if !t.Failed() && !*keepRuns {
				DropIDs(dir)
			}
		})
	}
}
