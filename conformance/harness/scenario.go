// Package harness runs the client conformance suite (issue #33): scenarios, which
// are data (../scenarios/*.json), run against a real registry with short leases
// behind a fault proxy, each driving one language's client through its driver
// program over the line protocol of docs/clients.md ("Conformance"). Every scenario
// runs twice per driver: as it is, where it must pass, and with its break (a
// driver control that makes the client violate the scenario's rule), where it must
// fail.
package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// StandardBreaks are the negative controls every driver supports (the protocol's
// list). A scenario with another break names the drivers that implement it in
// BreakDrivers; for the others its negative control is skipped.
var StandardBreaks = []string{"ignore-empty-renew", "ignore-count-mismatch", "ignore-expiry",
	"deadline-from-receive", "no-backoff", "remove-without-minted", "remove-when-invalid"}

// Scenario is one rule of DESIGN §4 put to a client: a registry, faults, and steps.
type Scenario struct {
	Name string `json:"name"` // the file's name without .json
	Rule string `json:"rule"` // the rule, in words
	// Break is the driver control that must make the scenario fail.
	Break string `json:"break"`
	// BreakDrivers, for a break outside StandardBreaks, names the drivers that
	// implement it.
	BreakDrivers []string `json:"breakDrivers,omitempty"`
	Registry     Registry `json:"registry"`
	// SkewMs is added to serverUtcNow in every answer of Alloc and Renew: the
	// server's clock claimed ahead of the client's (negative: behind).
	SkewMs int    `json:"skewMs,omitempty"`
	Count  int    `json:"count"` // node IDs per session; 1 when 0
	Steps  []Step `json:"steps"`
}

// Registry is the registry's lease settings, as Go durations ("6s").
type Registry struct {
	FirstLease Duration `json:"firstLease"`
	Lease      Duration `json:"lease"`
}

// Step is one action or check. Do names it; the other members are its arguments.
//
//	open       open a session within Within (90 s when 0); Expect: "" for success,
//	           else the error code it must fail with ("A|B": either);
//	           DeadReplicaFirst lists a replica that is down before the proxy
//	next       mint N IDs (Expect: "" for IDs, else the error code, "A|B": either); RoundRobin also
//	           checks that every node ID of the session took a fair part (half
//	           its share at least)
//	state      ask the driver's state; Issuing, when set, is checked
//	close      close the session; Removed, when set, is checked
//	fault      queue Actions for the next requests of Route ("alloc", "renew",
//	           "remove"), one per request; Always makes the last one stay
//	clear      drop Route's queued faults
//	await      wait Within until Route has answered Count requests (Faulted: until
//	           its queued faults are used up)
//	event      wait Within for an unconsumed event Ev (Op, Reason: any of them)
//	sleep      sleep Ms
//	deadline   sleep until the lease deadline the proxy saw, plus Ms
//	kill       stop the registry (the proxy resets every connection meanwhile)
//	restart    start it again on the same store
//	check      a named check of the proxy's log (Check, see checks.go)
type Step struct {
	Do     string `json:"do"`
	N      int    `json:"n,omitempty"`
	Expect string `json:"expect,omitempty"`
	// DeadReplicaFirst: open with two replica URLs, the first one down.
	DeadReplicaFirst bool     `json:"deadReplicaFirst,omitempty"`
	RoundRobin       bool     `json:"roundRobin,omitempty"`
	Issuing          *bool    `json:"issuing,omitempty"`
	Removed          *bool    `json:"removed,omitempty"`
	Route            string   `json:"route,omitempty"`
	Actions          []string `json:"actions,omitempty"`
	Always           bool     `json:"always,omitempty"`
	Count            int      `json:"count,omitempty"`
	Faulted          bool     `json:"faulted,omitempty"`
	Within           Duration `json:"within,omitempty"`
	Ev               string   `json:"ev,omitempty"`
	Op               string   `json:"op,omitempty"`
	Reason           []string `json:"reason,omitempty"`
	Ms               int      `json:"ms,omitempty"`
	Check            string   `json:"check,omitempty"`
}

// Duration is a time.Duration written as Go writes it ("1.5s").
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// Load reads every scenario of dir, sorted by name, and checks them.
func Load(dir string) ([]Scenario, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Scenario
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var sc Scenario
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sc); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if want := strings.TrimSuffix(filepath.Base(f), ".json"); sc.Name != want {
			return nil, fmt.Errorf("%s: name %q, want the file's name %q", f, sc.Name, want)
		}
		if err := sc.check(); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, sc)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario in %s", dir)
	}
	return out, nil
}

var stepKinds = []string{"open", "next", "state", "close", "fault", "clear", "await", "event", "sleep",
	"deadline", "kill", "restart", "check"}

func (sc *Scenario) check() error {
	if sc.Rule == "" || sc.Break == "" {
		return fmt.Errorf("a scenario needs a rule and a break")
	}
	if !slices.Contains(StandardBreaks, sc.Break) && len(sc.BreakDrivers) == 0 {
		return fmt.Errorf("break %q is not a standard one: name the drivers that implement it (breakDrivers)", sc.Break)
	}
	if sc.Registry.FirstLease == 0 || sc.Registry.Lease == 0 {
		return fmt.Errorf("registry.firstLease and registry.lease are required")
	}
	for i, st := range sc.Steps {
		if !slices.Contains(stepKinds, st.Do) {
			return fmt.Errorf("step %d: unknown do %q", i+1, st.Do)
		}
		if st.Do == "check" && checks[st.Check] == nil {
			return fmt.Errorf("step %d: unknown check %q", i+1, st.Check)
		}
	}
	return nil
}

// BreakRuns reports whether the scenario's negative control runs for driver.
func (sc *Scenario) BreakRuns(driver string) bool {
	return slices.Contains(StandardBreaks, sc.Break) || slices.Contains(sc.BreakDrivers, driver)
}
