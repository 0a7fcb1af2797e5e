package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/chaos/history"
)

// The Sentinel scenarios of issue #15: the store is a Redis Sentinel topology (a
// master, two replicas, three sentinels; AOF always on every data node), and its
// master is killed with SIGKILL mid-run.

// failoverTimeout bounds the wait for the sentinels to promote a replica and for
// the other replica to follow it.
const failoverTimeout = 30 * time.Second

// FailoverRedis kills the Sentinel topology's master with SIGKILL, waits until
// the sentinels promoted a replica and the other replica replicates from it, and
// records the failover as a global fault healed then. It returns the heal.
func (c *Cluster) FailoverRedis(ctx context.Context) (time.Time, error) {
	if c.Sentinel == nil {
		return time.Time{}, fmt.Errorf("FailoverRedis needs a Sentinel topology (Options.Sentinel)")
	}
	at := time.Now()
	old := c.Sentinel.KillMaster(c.t)
	m := c.Sentinel.WaitFailover(c.t, old, failoverTimeout)
	heal := time.Now()
	c.t.Logf("redis failover: master %s killed, %s promoted", old, m.Addr())
	c.record(Fault{Kind: "redis-failover", Global: true, At: at, Heal: heal})
	return heal, nil
}

// afterFailover is what the clients and the gateway got from the registry after
// the failover: new sessions opened, Renew calls answered 200, and who got neither.
type afterFailover struct {
	acquired, renewed int
	silent            []string
}

// grantsSince reads every client's and the gateway's history for what they were
// granted (Open returned) or renewed (Renew answered 200) after t.
func (c *Cluster) grantsSince(t time.Time) afterFailover {
	var a afterFailover
	dirs := map[string]string{}
	for _, cl := range c.Clients() {
		dirs[cl.Name] = cl.Dir
	}
	if g := c.Gateway(); g != nil {
		dirs[GatewayName] = g.Dir
	}
	for _, name := range slices.Sorted(maps.Keys(dirs)) {
		evs, _ := history.ReadEvents(dirs[name])
		got := false
		for _, e := range evs {
			if e.T < t.UnixNano() {
				continue
			}
			switch {
			case e.Ev == history.EvAcquired:
				a.acquired++
				got = true
			case e.Ev == history.EvRenewAnswer && e.Status == 200:
				a.renewed++
				got = true
			}
		}
		if !got {
			a.silent = append(a.silent, name)
		}
	}
	return a
}

// storeFaultClients are the clients of a scenario that fails the store: four, two
// of them churning (sessions of 1–3 s, so node IDs are granted all through the run).
func storeFaultClients(p Plan) []ClientSpec {
	specs := uniform(4, ClientSpec{Sessions: 2, Batch: p.Batch})
	for i := range 2 {
		specs[i].HoldMin, specs[i].HoldMax, specs[i].BackoffMax = time.Second, 3*time.Second, 300*time.Millisecond
	}
	return specs
}

// awaitGrants waits the gateway's liveness bound after a store fault healed at
// heal (and at least until start + p.Faulting; RunScenario stays as long anyway),
// then reads what the clients and the gateway were granted since; what names the
// fault in the log.
func (c *Cluster) awaitGrants(ctx context.Context, heal, start time.Time, p Plan, what string) (afterFailover, error) {
	due := heal.Add(p.Settings.LivenessBound() + GatewayBackoffSlack)
	if !sleepCtx(ctx, time.Until(maxTime(due, start.Add(p.Faulting)))) {
		return afterFailover{}, ctx.Err()
	}
	a := c.grantsSince(heal)
	c.t.Logf("after %s: %d sessions opened, %d renewals answered 200; nothing for %v", what, a.acquired, a.renewed, a.silent)
	return a, nil
}

// check fails unless every client and the gateway got something after the fault
// (what names it), at least two sessions opened and a renewal was answered.
func (a afterFailover) check(what string) error {
	return errIf(len(a.silent) > 0 || a.acquired < 2 || a.renewed == 0,
		"after %s: %d sessions opened, %d renewals; %v got nothing", what, a.acquired, a.renewed, a.silent)
}

// checkWith is check, and fails too when a replica failed its clock check for
// good across the fault.
func (a afterFailover) checkWith(r *Report, what string) error {
	if err := a.check(what); err != nil {
		return err
	}
	return errIf(r.ClockFailures > 0, "%d replicas failed their clock check for good across %s", r.ClockFailures, what)
}

// SentinelFailover kills the Sentinel topology's master with SIGKILL a third into
// the run, while four clients mint (two of them churning: sessions of 1–3 s, so
// new node IDs are granted all through the run), and waits for the failover.
// Every live client and the gateway must be granted or renewed a lease by the new
// master within the liveness bound, no replica may fail its clock check for good,
// and the checker must find no duplicate. The store is out for about 3 s (the
// sentinels see the master down after 1 s, promote a replica about a second
// later, and the replicas reconnect), longer than half the plan's 3-s lease, so
// the holders that do not churn (and the gateway) lose their leases and open new
// sessions on the new master: Report.Lost is 5, and not judged.
//
// With wait (--redis-wait-replicas 1) every grant and renewal was acknowledged by
// a replica before its answer, and Sentinel promotes the most up-to-date replica:
// the replicas must take the promotion for what it is (redis.ReplicationChangeSafe,
// logged "no acknowledged write can have been lost") and log no store reset, and
// the clients keep being granted node IDs after it.
//
// Without it the promoted replica may have missed the latest writes, so the
// replicas must treat the promotion as a store reset (DESIGN §7): quarantine every
// node ID nobody claims for lease + grace (the allocs refused meanwhile). Both
// replicas log the recovery (Resets is 2: one writes the new generation, the
// other adopts it). The replica had every write here (a SIGKILL on loopback), so no
// holder's lease is missing from the store and none is restored from its receipt:
// Report.Restored is 0, and only Resets ≥ 1 is required.
func SentinelFailover(wait bool) Scenario {
	sc := Scenario{Name: "sentinel-failover-nowait", Sentinel: true}
	if wait {
		sc.Name, sc.WaitReplicas = "sentinel-failover-wait", 1
	}
	var after afterFailover // filled by Inject, judged by Expect
	sc.Clients = storeFaultClients
	sc.Inject = func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
		start := time.Now()
		if !sleepCtx(ctx, p.Faulting/3) {
			return ctx.Err()
		}
		heal, err := c.FailoverRedis(ctx)
		if err != nil {
			return err
		}
		after, err = c.awaitGrants(ctx, heal, start, p, "the failover")
		return err
	}
	sc.Expect = func(r *Report) error {
		if err := after.checkWith(r, "the failover"); err != nil {
			return err
		}
		if wait {
			return errIf(r.Resets > 0 || r.Grants < 20, "%d store resets (want 0), %d grants", r.Resets, r.Grants)
		}
		return errIf(r.Resets < 1, "the promotion without WAIT was not taken for a store reset (%d resets)", r.Resets)
	}
	return sc
}
