package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/chaos/history"
)

// Plan is the scale of a chaos run: short (go test) or long (soak).
type Plan struct {
	Long     bool
	Settings Settings
	// Faulting is how long a scenario keeps injecting faults; the run then lasts
	// until every liveness deadline after the last heal has passed.
	Faulting time.Duration
	Batch    int // IDs per tick and session
}

// ShortPlan finishes every scenario in well under a minute on two cores.
func ShortPlan() Plan {
	return Plan{
		Settings: Settings{FirstLease: 2 * time.Second, LeaseDuration: 3 * time.Second,
			Grace: time.Second, CleanupInterval: time.Second, Nodes: 64, Slack: 3 * time.Second},
		Faulting: 12 * time.Second,
		Batch:    2,
	}
}

// LongPlan is ShortPlan's lease settings with faults injected for d per scenario.
func LongPlan(d time.Duration) Plan {
	p := ShortPlan()
	p.Long, p.Faulting = true, d
	return p
}

// Scenario is one fault, injected into a fresh cluster.
type Scenario struct {
	Name    string
	NoAOF   bool // Redis persists nothing (the store-reset scenario)
	Nodes   int  // pool size; 0: the plan's
	Clients func(p Plan) []ClientSpec
	// Inject injects the faults and returns once the last one has healed.
	Inject func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error
	// Expect checks that the faults did happen and bite; nil: no extra check.
	Expect func(r *Report) error

	// Sentinel runs the store as a Sentinel topology, WaitReplicas is the
	// replicas' --redis-wait-replicas (Options).
	Sentinel     bool
	WaitReplicas int
	// Etcd runs the store as a three-member etcd cluster (Options.Etcd).
	Etcd bool
	// Postgres runs the store as a PostgreSQL primary with a streaming standby,
	// synchronous when SyncStandby (Options.Postgres).
	Postgres, SyncStandby bool
	// AgentProcess runs one real clock-agent process for both replicas
	// (Options.AgentProcess).
	AgentProcess bool
}

// Control is a negative control: a scenario run with one safety mechanism
// switched off from outside the production code, which the checker must catch.
type Control struct {
	Name     string
	Scenario Scenario
	// Server is the store control the replicas run on (chaosserver --control,
	// package controls); Client is chaosclient's --control. One of them is set,
	// or neither when the scenario's harness side is the control (restore.go).
	Server, Client string
	// MustFail are the properties that must be violated.
	MustFail []string
}

// Outcome is the record of one run.
type Outcome struct {
	Scenario string        `json:"scenario"`
	Elapsed  time.Duration `json:"elapsed"`
	Faults   []Fault       `json:"faults"`
	Report   *Report       `json:"report"`
}

// RunScenario runs sc on a fresh cluster in a directory under dir and checks
// the histories. serverControl and clientControl switch a negative control on.
func RunScenario(t testing.TB, bins Binaries, dir string, sc Scenario, p Plan, serverControl, clientControl string) (*Outcome, error) {
	t.Helper()
	start := time.Now()
	set := p.Settings
	if sc.Nodes > 0 {
		set.Nodes = sc.Nodes
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := StartCluster(t, dir, bins, Options{Settings: set, AOF: !sc.NoAOF, Sentinel: sc.Sentinel, WaitReplicas: sc.WaitReplicas, Etcd: sc.Etcd,
		Postgres: sc.Postgres, SyncStandby: sc.SyncStandby, ServerControl: serverControl, ClientControl: clientControl,
		AgentProcess: sc.AgentProcess})
	// The gateway starts first: under contention, its library-default back-off
	// (3 s and up) would lose every race for a node ID to the clients' 100 ms.
	gw, err := c.StartGateway()
	if err != nil {
		return nil, err
	}
	if err := waitAcquired(GatewayName, gw.Dir, nil, 20*time.Second); err != nil {
		return nil, err
	}
	var cls []*Client
	for _, s := range sc.Clients(p) {
		cl, err := c.AddClient(s)
		if err != nil {
			return nil, err
		}
		cls = append(cls, cl)
	}
	for _, cl := range cls {
		if err := waitAcquired(cl.Name, cl.Dir, cl.p, 20*time.Second); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.Faulting+3*time.Minute)
	defer cancel()
	if err := sc.Inject(ctx, c, cls, p); err != nil {
		return nil, fmt.Errorf("%s: inject: %w", sc.Name, err)
	}
	// Stay up until every liveness deadline can be judged.
	gwBound := set.LivenessBound() + GatewayBackoffSlack
	due := gw.Start.Add(gwBound)
	for _, f := range c.Faults() {
		b := set.LivenessBound()
		if f.Global || f.Target == GatewayName {
			b = gwBound
		}
		due = maxTime(due, f.Heal.Add(b))
	}
	for _, cl := range c.Clients() {
		due = maxTime(due, cl.Start.Add(set.LivenessBound()))
	}
	sleepCtx(ctx, time.Until(due.Add(time.Second)))
	end := c.StopClients()

	in := CheckInput{Faults: c.Faults(), End: end, Bound: set.LivenessBound()}
	for _, cl := range c.Clients() {
		in.Clients = append(in.Clients, ClientRun{Name: cl.Name, Dir: cl.Dir, Start: cl.Start, Killed: cl.Killed})
	}
	in.Clients = append(in.Clients, ClientRun{Name: GatewayName, Dir: gw.Dir, Start: gw.Start, Bound: gwBound})
	resets, restored, contested := c.serverLogCounts()
	imports, unknown, regranted := c.restoreCounts(in.Clients)
	// A store that lost writes lost the history of the grants with them, and a
	// control breaks the rules on purpose: property 6 holds for the others.
	if resets == 0 && imports == 0 && serverControl == "" && clientControl == "" {
		in.Origin = c.origin()
	}
	rep, err := Check(in)
	c.shutdown()
	if err != nil {
		return nil, err
	}
	rep.Resets, rep.Restored, rep.Contested = resets, restored, contested
	rep.ClockFailures = c.clockFailures()
	c.judgeClockExits(rep)
	rep.Forged, rep.ForgedRefused, rep.ForgedAccepted = c.forgeries()
	rep.Imports, rep.Unknown, rep.Regranted = imports, unknown, regranted
	faults := c.Faults()
	sortFaults(faults)
	out := &Outcome{Scenario: sc.Name, Elapsed: time.Since(start), Faults: faults, Report: rep}
	b, _ := json.MarshalIndent(out, "", "  ")
	_ = os.WriteFile(filepath.Join(dir, "outcome.json"), b, 0o644)
	return out, nil
}

// DropIDs deletes the ID files of a run, the bulk of its disk use.
func DropIDs(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*", "ids-*.bin"))
	for _, f := range files {
		_ = os.Remove(f)
	}
}

// waitAcquired waits until a client (or the gateway: p nil) recorded its first lease.
func waitAcquired(name, dir string, p *process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if evs, err := history.ReadEvents(dir); err == nil {
			for _, e := range evs {
				if e.Ev == history.EvAcquired {
					return nil
				}
			}
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited before holding a lease (see %s.log)", name, name)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s held no lease within %v (see %s.log)", name, timeout, name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// every runs f at a steady cadence of one round per period, the first 1–2 s from
// now, until the next round would start later than d from now or ctx ends. It
// returns f's first error. A round that takes longer than period delays the next.
func every(ctx context.Context, d, period time.Duration, f func(round int) error) error {
	end := time.Now().Add(d)
	next := time.Now().Add(time.Second + rand.N(time.Second))
	for i := 0; next.Before(end); i++ {
		if !sleepCtx(ctx, time.Until(next)) {
			return ctx.Err()
		}
		if err := f(i); err != nil {
			return err
		}
		next = maxTime(next.Add(period), time.Now())
	}
	return nil
}

func uniform(n int, s ClientSpec) []ClientSpec {
	out := make([]ClientSpec, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func errIf(cond bool, format string, args ...any) error {
	if cond {
		return fmt.Errorf(format, args...)
	}
	return nil
}
