package idkeeper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

func TestOverdueBoundary(t *testing.T) {
	l := idkeeper.Lease{GrantedAt: t0, RenewedAt: t0.Add(time.Minute), ExpiresAt: t0.Add(time.Minute + 48*time.Hour)}
	due := t0.Add(time.Minute + 24*time.Hour + 10*time.Minute) // last contact + half the term + slack
	if idkeeper.Overdue(l, due, 10*time.Minute) {
		t.Errorf("overdue at %s, the last instant a renewal may still come", due)
	}
	if !idkeeper.Overdue(l, due.Add(time.Millisecond), 10*time.Minute) {
		t.Errorf("not overdue 1 ms after %s", due)
	}
	// Never renewed: the term counts from the grant (a first lease of 10 min).
	first := idkeeper.Lease{GrantedAt: t0, ExpiresAt: t0.Add(10 * time.Minute)}
	if idkeeper.Overdue(first, t0.Add(15*time.Minute), 10*time.Minute) || !idkeeper.Overdue(first, t0.Add(15*time.Minute+time.Millisecond), 10*time.Minute) {
		t.Error("a first lease is overdue from half its term + slack")
	}
}

// A pod that crash-loops every 5 minutes starts a new session (PID 1, a new start
// time and instance) each time; each takes 2 node IDs and renews once, at once. The
// machine watch reports its machine ID on top, tells its overdue sessions from the
// renewing ones of a healthy machine, and warns about it at most once an hour.
func TestMachineWatchCrashLoop(t *testing.T) {
	const lease = 2 * time.Hour
	e := newEnv(t, idkeeper.Config{LeaseDuration: lease, CleanupInterval: 10 * time.Minute})
	ctx := context.Background()
	alloc := func(r idkeeper.Requester, n int) {
		t.Helper()
		if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: r, Count: n}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: r}); err != nil {
			t.Fatal(err)
		}
	}
	healthy := idkeeper.Requester{MachineID: "healthy-host", PID: 42, StartedAt: t0, Instance: "steady"}
	alloc(healthy, 3)
	crashes := 0
	// The warnings about a machine, not the lease logs that name it too.
	warnLines := func(machine string) int {
		n := 0
		for l := range strings.Lines(e.logs.String()) {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "machineId="+machine) {
				n++
			}
		}
		return n
	}
	warnings := func() int { return warnLines("crashing-pod") }
	var warnedAt []time.Duration
	for step := time.Duration(0); step <= 3*time.Hour; step += 5 * time.Minute {
		e.clk.Set(t0.Add(step))
		alloc(idkeeper.Requester{MachineID: "crashing-pod", PID: 1, StartedAt: t0.Add(step), Instance: protocol.NewInstance()}, 2)
		crashes++
		if step%(lease/2) == 0 && step > 0 {
			if _, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: healthy}); err != nil {
				t.Fatal(err)
			}
		}
		if step%(10*time.Minute) == 0 {
			before := warnings()
			if _, ran, err := e.reg.Cleanup(ctx); err != nil || !ran {
				t.Fatalf("cleanup at +%s: ran %v, %v", step, ran, err)
			}
			if warnings() > before {
				warnedAt = append(warnedAt, step)
			}
		}
	}

	e.obs.mu.Lock()
	top, machines := e.obs.machines, e.obs.machineCount
	e.obs.mu.Unlock()
	if machines != 2 || len(top) != 2 {
		t.Fatalf("Machines report: %d machine IDs, top %+v", machines, top)
	}
	pod, host := top[0], top[1]
	// At +3h the sessions of the last 2h10m (lease + grace) still hold their node IDs;
	// those whose last renewal is more than 1h10m ago (half the lease + slack) are
	// overdue: started from +50m to +1h45m (the cleanup at +3h reclaimed those started
	// up to +45m; +1h50m is exactly at the limit).
	if pod.MachineID != "crashing-pod" || pod.Sessions != 27 || pod.NodeIDs != 54 || pod.Overdue != 12 || pod.OverdueNodeIDs != 24 {
		t.Errorf("crashing pod: %+v; want 27 sessions, 54 node IDs, 12 overdue", pod)
	}
	if !pod.OverdueUntil.Equal(t0.Add(time.Hour + 45*time.Minute + lease)) {
		t.Errorf("OverdueUntil = %s, want the lease end of the last overdue session", pod.OverdueUntil)
	}
	if host.MachineID != "healthy-host" || host.Sessions != 1 || host.Overdue != 0 || host.NodeIDs != 3 {
		t.Errorf("healthy host: %+v", host)
	}
	// 8 sessions are overdue from the cleanup at +1h50m; the next warning may come
	// an hour later.
	if len(warnedAt) != 2 || warnedAt[0] != time.Hour+50*time.Minute || warnedAt[1] != 2*time.Hour+50*time.Minute {
		t.Errorf("warnings at %v, want at +1h50m and +2h50m", warnedAt)
	}
	if warnLines("healthy-host") > 0 {
		t.Errorf("the healthy host was warned about:\n%s", e.logs.String())
	}
}
