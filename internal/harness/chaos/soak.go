package chaos

import (
	"context"
	"math/rand/v2"
	"time"
)

// Soak mixes the whole fault catalogue (the gateway's too) on one cluster for p.Faulting: one fault at
// a time, chosen at random, every 4–8 s, on clients of every kind (churning, skewed
// and stepping clocks, several node IDs per session) on a pool of 18 node IDs for
// about 15 wanted, so node IDs change hands all the time. Redis runs with AOF: a
// plain Redis restart must lose nothing and cost no quarantine; a reset (every key
// flushed, then a restart) must.
func Soak() Scenario {
	return Scenario{
		Name:  "soak",
		Nodes: 18,
		Clients: func(p Plan) []ClientSpec {
			b := p.Batch
			churn := ClientSpec{Sessions: 2, Batch: b, HoldMin: time.Second, HoldMax: 4 * time.Second, BackoffMax: 500 * time.Millisecond}
			return []ClientSpec{
				{Sessions: 2, Batch: b},
				{Sessions: 2, Batch: b},
				churn,
				{Sessions: 1, Batch: b, Skew: 500 * time.Millisecond},
				{Sessions: 2, Batch: b, Skew: -700 * time.Millisecond, HoldMin: time.Second, HoldMax: 3 * time.Second},
				{Sessions: 1, Batch: b, StepPeriod: 5 * time.Second, StepBack: 800 * time.Millisecond},
				{Sessions: 1, Count: 2, Batch: b},
				churn,
			}
		},
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			lease := p.Settings.LeaseDuration
			modes := []Mode{Drop, Delay, DelayAnswers, DelayRenewAnswers}
			end := time.Now().Add(p.Faulting)
			for time.Now().Before(end) {
				if !sleepCtx(ctx, 4*time.Second+rand.N(4*time.Second)) {
					return ctx.Err()
				}
				i := rand.N(len(cls))
				gw := c.Gateway()
				var err error
				switch rand.N(12) {
				case 9:
					gw.Kill()
				case 10:
					gw.Pause(ctx, lease+time.Duration(rand.N(2000))*time.Millisecond)
				case 11:
					heal := c.Disturbing(GatewayName, gw.Proxy, modes[rand.N(len(modes))], time.Duration(200+rand.N(1800))*time.Millisecond)
					sleepCtx(ctx, lease+rand.N(lease))
					heal()
				case 0, 1:
					var n *Client
					n, err = c.KillClient(ctx, cls[i], 300*time.Millisecond)
					cls[i] = n
				case 2, 3:
					c.PauseClient(ctx, cls[i], lease+time.Duration(rand.N(2000))*time.Millisecond)
				case 4, 5:
					m := modes[rand.N(len(modes))]
					delay := time.Duration(200+rand.N(1800)) * time.Millisecond
					c.Disturb(ctx, cls[i], m, delay, lease+rand.N(lease))
				case 6:
					err = c.KillLockHolder(ctx, 2*time.Second)
				case 7:
					c.RestartRedis()
				case 8:
					err = c.ResetRedis(ctx)
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
		Expect: func(r *Report) error { return errIf(r.Faults < 3, "only %d faults", r.Faults) },
	}
}
