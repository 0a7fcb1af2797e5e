package chaos

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/chaos/controls"
)

// The client controls (chaosclient --control); the store controls are package
// controls'.
const (
	ClientNoWindow   = "no-window"
	ClientNoInstance = "no-instance"
)

// Scenarios is the fault catalogue of issues #5, #8, #12, #13, #15, #17, #29 and #32, one fault kind per scenario.
func Scenarios() []Scenario {
	return []Scenario{KillClients(), SigstopClients(), Partition(), KillLockHolder(), RedisReset(), ClockSkew(), Contention(),
		Twins(), RegistryRestartDuringWipe(), ForgedCalls(), RestoreOldBackup(), ClockAgentOffset(),
		SentinelFailover(true), SentinelFailover(false), EtcdLeaderFaults(), AgentFlood(),
		PostgresFailover(true), PostgresFailover(false)}
}

// Controls are the negative controls: each must make the checker fail.
func Controls() []Control {
	return []Control{
		{Name: "no-window", Scenario: ClockSkew(), Client: ClientNoWindow,
			MustFail: []string{PropUnique, PropInWindow}},
		{Name: "no-reset-quarantine", Scenario: RedisReset(), Server: controls.NoResetQuarantine,
			MustFail: []string{PropUnique, PropWindows}},
		{Name: "stale-reclaim", Scenario: Contention(), Server: controls.StaleReclaim,
			MustFail: []string{PropRealTime}},
		{Name: "no-instance", Scenario: Twins(), Client: ClientNoInstance,
			MustFail: []string{PropUnique}},
		// Neither program is changed: the harness loads the backup itself (loadRaw).
		{Name: "import-without-plan", Scenario: restoreOldBackup(true),
			MustFail: []string{PropWindows, PropUnique}},
	}
}

// KillClients kills clients with SIGKILL mid-minting, every 3 s, and starts a
// replacement process each time; the second time, it kills the gateway too.
func KillClients() Scenario {
	return Scenario{
		Name:    "kill-clients",
		Clients: func(p Plan) []ClientSpec { return uniform(4, ClientSpec{Sessions: 2, Batch: p.Batch}) },
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			return every(ctx, p.Faulting, 3*time.Second, func(round int) error {
				if round == 1 {
					c.Gateway().Kill()
				}
				i := rand.N(len(cls))
				n, err := c.KillClient(ctx, cls[i], 300*time.Millisecond)
				cls[i] = n
				return err
			})
		},
		Expect: func(r *Report) error { return errIf(r.Faults < 2, "only %d kills", r.Faults) },
	}
}

// SigstopClients stops a client with SIGSTOP for longer than its lease, then
// continues it; one client after another, the first time with the gateway.
func SigstopClients() Scenario {
	return Scenario{
		Name:    "sigstop-clients",
		Clients: func(p Plan) []ClientSpec { return uniform(4, ClientSpec{Sessions: 1, Batch: p.Batch}) },
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			pause := p.Settings.LeaseDuration + 2*time.Second
			return every(ctx, p.Faulting, pause+time.Second, func(i int) error {
				var wg sync.WaitGroup
				if i == 0 {
					wg.Go(func() { c.Gateway().Pause(ctx, pause) })
				}
				c.PauseClient(ctx, cls[i%len(cls)], pause)
				wg.Wait()
				return nil
			})
		},
		Expect: func(r *Report) error {
			return errIf(r.Lost < r.Faults, "%d leases lost after %d pauses", r.Lost, r.Faults)
		},
	}
}

// Partition cuts or slows the network between single clients and the servers, at
// the same time: a partition longer than the lease, a delay both ways, answers
// delayed (requests take effect on time), and only Renew answers delayed past the
// client's request timeout; the gateway gets the first client's fault.
func Partition() Scenario {
	return Scenario{
		Name:    "partition",
		Clients: func(p Plan) []ClientSpec { return uniform(4, ClientSpec{Sessions: 1, Batch: p.Batch}) },
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			lease := p.Settings.LeaseDuration
			faults := []struct {
				mode  Mode
				delay time.Duration
				d     time.Duration
			}{
				{Drop, 0, lease + time.Second},
				{Delay, 300 * time.Millisecond, 2 * lease},
				{DelayRenewAnswers, 2 * time.Second, 2 * lease},
				{DelayAnswers, 400 * time.Millisecond, 2 * lease},
			}
			// Rounds are spaced so that every heal is followed by a quiet bound in which
			// liveness is judged.
			period := 2*lease + p.Settings.LivenessBound() + GatewayBackoffSlack + time.Second
			return every(ctx, p.Faulting, period, func(round int) error {
				var wg sync.WaitGroup
				for i, cl := range cls {
					f := faults[(i+round)%len(faults)]
					wg.Go(func() { c.Disturb(ctx, cl, f.mode, f.delay, f.d) })
				}
				gw := c.Gateway()
				f := faults[round%len(faults)]
				heal := c.Disturbing(GatewayName, gw.Proxy, f.mode, f.delay)
				sleepCtx(ctx, f.d)
				heal()
				wg.Wait()
				return nil
			})
		},
		Expect: func(r *Report) error { return errIf(r.Lost < 2, "only %d leases lost", r.Lost) },
	}
}

// KillLockHolder kills the replica that holds the cleanup job lock with SIGKILL
// (and restarts it 2 s later). Just before, it kills a client, on a pool one node
// ID larger than the sessions and the gateway's two, so that its replacement gets
// its node IDs back only through a cleanup that the surviving replica must now run.
func KillLockHolder() Scenario {
	return Scenario{
		Name:    "kill-lock-holder",
		Nodes:   4*2 + 2 + 1,
		Clients: func(p Plan) []ClientSpec { return uniform(4, ClientSpec{Sessions: 2, Batch: p.Batch}) },
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			return every(ctx, p.Faulting, 8*time.Second, func(i int) error {
				n, err := c.KillClient(ctx, cls[i%len(cls)], 0)
				if err != nil {
					return err
				}
				cls[i%len(cls)] = n
				return c.KillLockHolder(ctx, 2*time.Second)
			})
		},
		Expect: func(r *Report) error { return errIf(r.Faults < 2, "only %d faults", r.Faults) },
	}
}

// RedisReset restarts a Redis that persists nothing: the store comes back empty,
// and the replicas must quarantine every node ID for lease + grace (DESIGN §7).
// Two clients are cut off across the reset, so they go on minting, unaware, until
// their leases run out, with node IDs the store has forgotten; the other holders
// renew with their receipts and keep their leases (issue #8 item 9); and two
// newcomers want node IDs at once (first round only) and must wait.
func RedisReset() Scenario {
	return Scenario{
		Name:    "redis-reset",
		NoAOF:   true,
		Clients: func(p Plan) []ClientSpec { return uniform(4, ClientSpec{Sessions: 2, Batch: p.Batch}) },
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			period := p.Settings.LeaseDuration + p.Settings.LivenessBound() + GatewayBackoffSlack + 2*time.Second
			return every(ctx, max(p.Faulting, time.Second), period, func(round int) error {
				heal := []func(){c.Disturbing(cls[0].Name, cls[0].Proxy, Drop, 0), c.Disturbing(cls[1].Name, cls[1].Proxy, Drop, 0)}
				if err := c.ResetRedis(ctx); err != nil {
					return err
				}
				for i := 0; round == 0 && i < 2; i++ {
					if _, err := c.AddClient(ClientSpec{Sessions: 2, Batch: p.Batch}); err != nil {
						return err
					}
				}
				sleepCtx(ctx, p.Settings.LeaseDuration+time.Second)
				for _, h := range heal {
					h()
				}
				return nil
			})
		},
		Expect: func(r *Report) error {
			// Faults counts the two cuts of every round besides the wipe.
			return errIf(r.Lost < 4 || r.Restored == 0 || r.Resets < r.Faults/3 || r.AllocRefused == 0,
				"%d leases lost, %d restores, %d resets after %d wipes, %d allocs refused", r.Lost, r.Restored, r.Resets, r.Faults/3, r.AllocRefused)
		},
	}
}

// ClockSkew runs five churning sessions whose wall clocks are skewed ahead and
// behind (up to the grace period behind) and step back and forth, on a pool of 6
// node IDs besides the gateway's two, so that node IDs pass between clocks that
// disagree by up to 2 s.
func ClockSkew() Scenario {
	return Scenario{
		Name:  "clock-skew",
		Nodes: 2 + 6,
		Clients: func(p Plan) []ClientSpec {
			base := ClientSpec{Sessions: 1, Batch: p.Batch, HoldMin: 300 * time.Millisecond, HoldMax: 1200 * time.Millisecond, BackoffMax: 300 * time.Millisecond}
			specs := uniform(5, base)
			specs[0].Skew = time.Second
			specs[1].Skew = -800 * time.Millisecond
			specs[2].StepPeriod, specs[2].StepBack = 4*time.Second, 1200*time.Millisecond
			specs[3].Skew, specs[3].StepPeriod, specs[3].StepBack = 500*time.Millisecond, 3*time.Second, time.Second
			specs[4].Skew = -500 * time.Millisecond
			return specs
		},
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			sleepCtx(ctx, p.Faulting)
			return nil
		},
		Expect: func(r *Report) error {
			return errIf(r.Grants < 20 || r.Refused == 0, "%d grants, %d calls refused: the clocks never met", r.Grants, r.Refused)
		},
	}
}

// Contention runs 72 churning sessions on a pool of 64 node IDs, half of them on
// clocks 0.8 s behind, and kills a client process with SIGKILL every 4 s (restarted
// at once), so node IDs are released, reclaimed and re-granted all the time.
func Contention() Scenario {
	return Scenario{
		Name:  "contention",
		Nodes: 64,
		Clients: func(p Plan) []ClientSpec {
			base := ClientSpec{Sessions: 12, Batch: 1, Tick: 2 * time.Millisecond,
				HoldMin: 500 * time.Millisecond, HoldMax: 2 * time.Second, BackoffMax: 500 * time.Millisecond}
			specs := uniform(6, base)
			for i := range 3 {
				specs[i].Skew = -800 * time.Millisecond
			}
			return specs
		},
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			return every(ctx, p.Faulting, 4*time.Second, func(i int) error {
				n, err := c.KillClient(ctx, cls[i%len(cls)], 0)
				cls[i%len(cls)] = n
				return err
			})
		},
		Expect: func(r *Report) error {
			return errIf(r.AllocRefused == 0 || r.Grants < 100, "%d grants, %d allocs refused: no contention", r.Grants, r.AllocRefused)
		},
	}
}

// Twins runs two client processes of three churning sessions each whose every
// session claims the same machine ID, PID 1 and start time, as containers of one
// image started in the same clock tick do (issue #8 items 1 and 2): only the
// library's per-session instance tells them apart. One twin is killed and
// restarted every 4 s.
func Twins() Scenario {
	return Scenario{
		Name: "twins",
		Clients: func(p Plan) []ClientSpec {
			return uniform(2, ClientSpec{Sessions: 3, Batch: p.Batch, Twin: true,
				HoldMin: 300 * time.Millisecond, HoldMax: 1200 * time.Millisecond, BackoffMax: 300 * time.Millisecond})
		},
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			return every(ctx, p.Faulting, 4*time.Second, func(i int) error {
				n, err := c.KillClient(ctx, cls[i%len(cls)], 200*time.Millisecond)
				cls[i%len(cls)] = n
				return err
			})
		},
		Expect: func(r *Report) error { return errIf(r.Grants < 20, "only %d grants", r.Grants) },
	}
}

// RegistryRestartDuringWipe kills both replicas, restarts a Redis that persists
// nothing (it comes back empty) while they are down, and starts them again on
// their state files (issue #8 item 6): each finds the store lost the generation it
// saw and recovers it before serving; the holders renew with their receipts and
// keep minting.
func RegistryRestartDuringWipe() Scenario {
	return Scenario{
		Name:    "registry-restart-during-wipe",
		NoAOF:   true,
		Clients: func(p Plan) []ClientSpec { return uniform(4, ClientSpec{Sessions: 2, Batch: p.Batch}) },
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			period := p.Settings.LeaseDuration + p.Settings.LivenessBound() + GatewayBackoffSlack
			return every(ctx, max(p.Faulting, time.Second), period, func(int) error {
				return c.RestartServersDuringWipe(ctx)
			})
		},
		Expect: func(r *Report) error {
			return errIf(r.Resets < r.Faults || r.Restored == 0, "%d resets recovered, %d restores after %d wipes",
				r.Resets, r.Restored, r.Faults)
		},
	}
}

// ForgedCalls has another API key send Remove (mintedUpTo at the epoch) and Renew
// (the highest token, a receipt that does not verify) for the requesters the
// clients hold leases with, 20 times a second, while the clients churn (issue #8
// items 3 and 8): every call that finds leases is refused 403 LEASE_NOT_OWNED,
// none removes or renews anything, nothing is quarantined.
func ForgedCalls() Scenario {
	return Scenario{
		Name: "forged-calls",
		Clients: func(p Plan) []ClientSpec {
			return uniform(4, ClientSpec{Sessions: 2, Batch: p.Batch, HoldMin: time.Second, HoldMax: 3 * time.Second,
				BackoffMax: 300 * time.Millisecond})
		},
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			return c.Forge(ctx, p.Faulting, 50*time.Millisecond)
		},
		Expect: func(r *Report) error {
			return errIf(r.ForgedAccepted > 0 || r.ForgedRefused < 50 || r.Resets > 0,
				"%d forged calls accepted, %d refused, %d resets", r.ForgedAccepted, r.ForgedRefused, r.Resets)
		},
	}
}
