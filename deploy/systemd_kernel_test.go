package deploy_test

import (
	"slices"
	"strings"
	"testing"
)

// TestSystemdKernelSourceDropIn checks the drop-in that turns the clock agent's
// unit to --source kernel: it chooses the source, lets the read-only adjtimex
// through (ProtectClock=yes and ~@privileged deny it), and grants no capability,
// so the agent still cannot change the clock.
func TestSystemdKernelSourceDropIn(t *testing.T) {
	const rel = "deploy/systemd/idkeeper-clock-agent.service.d/kernel-source.conf"
	d := parseUnit(t, rel)
	if !slices.Contains(d["Service.Environment"], "IDKEEPER_SOURCE=kernel") {
		t.Errorf("%s: Environment=%q, want IDKEEPER_SOURCE=kernel", rel, d["Service.Environment"])
	}
	if v := d.last("Service.ProtectClock"); v != "no" {
		t.Errorf("%s: ProtectClock=%q, want no: ProtectClock=yes denies even a read of adjtimex", rel, v)
	}
	allowed := strings.Fields(strings.Join(d["Service.SystemCallFilter"], " "))
	for _, call := range []string{"adjtimex", "clock_adjtime"} {
		if !slices.Contains(allowed, call) {
			t.Errorf("%s: SystemCallFilter=%q lacks %s", rel, allowed, call)
		}
	}
	for key := range d {
		if strings.Contains(key, "Capabilit") || key == "Service.ExecStart" || key == "Service.User" {
			t.Errorf("%s sets %s: the drop-in changes the source and the clock calls only", rel, key)
		}
	}
	// The drop-in's SystemCallFilter= adds calls only where the unit's filter
	// is an allow-list (its first assignment not negated).
	u := parseUnit(t, "deploy/systemd/idkeeper-clock-agent.service")
	if f := u["Service.SystemCallFilter"]; len(f) == 0 || strings.HasPrefix(f[0], "~") {
		t.Errorf("the agent's unit: SystemCallFilter=%q: want an allow-list first", f)
	}
	if v := u.last("Service.CapabilityBoundingSet"); v != "" {
		t.Errorf("the agent's unit: CapabilityBoundingSet=%q: want none (no CAP_SYS_TIME)", v)
	}
	if !strings.Contains(readFile(t, "deploy/systemd/idkeeper-clock-agent.service"), "idkeeper-clock-agent.service.d/kernel-source.conf") {
		t.Error("the agent's unit does not point at the kernel-source drop-in")
	}
}
