package alert_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/audit"
)

// The capacity alert goes to every enabled user with a webhook when free node
// IDs fall below the threshold, again every hour while it holds, and "resolved"
// once it clears; nothing more after that.
func TestCapacityAlertRepeatsAndResolves(t *testing.T) {
	for _, redis := range []bool{false, true} {
		t.Run(map[bool]string{false: "bolt", true: "redis"}[redis], func(t *testing.T) {
			e := newEnv(t, envOpts{redis: redis, nodes: 20, cfg: alert.Config{CapacityThreshold: 0.25}})
			big, small := e.key("batch `jobs` @everyone"), e.key("web")
			e.check(0)
			e.calls(0)

			e.alloc(big, 1, 10)
			e.alloc(small, 2, 6) // 4 of 20 free: below 25 % (5)
			e.clk.Advance(time.Minute)
			e.check(0)
			cs := e.calls(2)
			got := map[string]bool{}
			for _, c := range cs {
				got[c.WebhookID] = true
				if !strings.Contains(title(c), "node IDs running low: 4 of 20 free") {
					t.Errorf("title %q", title(c))
				}
				body := text(c)
				for _, want := range []string{"Free: 4", "Leased: 16", "In grace: 0", "Quarantined: 0", "Pool: 20",
					"threshold of 25 % of the pool (5)", "repeats every hour"} {
					if !strings.Contains(body, want) {
						t.Errorf("message lacks %q:\n%s", want, body)
					}
				}
				top := body[strings.Index(body, "Top API keys"):]
				if i, j := strings.Index(top, big.ID), strings.Index(top, small.ID); i < 0 || j < 0 || i > j ||
					!strings.Contains(top, ": 10") || !strings.Contains(top, ": 6") {
					t.Errorf("top keys not by node IDs held:\n%s", top)
				}
				if strings.Contains(body, "`batch `jobs`") || !strings.Contains(body, "`batch 'jobs' @everyone`") {
					t.Errorf("a key description is not kept in a code span:\n%s", top)
				}
			}
			if !got[webhookID("ann")] || !got[webhookID("bob")] {
				t.Errorf("webhooks reached %v, want ann's and bob's (not disabled cy's)", got)
			}

			e.clk.Advance(30 * time.Minute)
			e.check(0)
			e.calls(2)
			e.clk.Advance(30 * time.Minute)
			e.check(0)
			cs = e.calls(4)
			if !strings.Contains(title(cs[3]), "running low") {
				t.Errorf("the hourly repeat is %q", title(cs[3]))
			}

			e.remove(big, 1) // 14 of 20 free
			e.clk.Advance(time.Minute)
			e.check(0)
			cs = e.calls(6)
			for _, c := range cs[4:] {
				if !strings.HasPrefix(title(c), "IdKeeper: resolved: 14 of 20 node IDs free") ||
					!strings.Contains(text(c), "lasted 1h1m0s") || c.Message.Embeds[0].Color != 0x2ECC71 {
					t.Errorf("resolved message: %q\n%s", title(c), text(c))
				}
			}
			for range 3 {
				e.clk.Advance(time.Hour)
				e.check(0)
			}
			e.calls(6)

			if n := e.deliveries(0, alert.Capacity, "delivered"); n != 6 {
				t.Errorf("deliveries counted %v, want 6", n)
			}
			sent := e.audit(audit.AlertSent)
			if len(sent) != 6 {
				t.Fatalf("%d audit entries %s, want 6", len(sent), audit.AlertSent)
			}
			for _, a := range sent {
				if a.Actor != "system" || (a.Target != "user:ann" && a.Target != "user:bob") || !strings.Contains(a.Detail, "capacity alert") ||
					strings.Contains(a.Detail, "tok_") {
					t.Errorf("audit entry %+v", a)
				}
			}
			st, err := e.rs[0].st.AlertState(t.Context(), alert.Capacity)
			if err != nil || st.Firing || st.Summary != "14 of 20 node IDs free; the alert threshold is 5" {
				t.Errorf("stored state %+v, %v", st, err)
			}
		})
	}
}

// With no node ID free the message is critical; the default threshold is 10 %.
func TestCapacityAlertDefaultThresholdAndEmptyPool(t *testing.T) {
	e := newEnv(t, envOpts{nodes: 10})
	k, k2 := e.key("all"), e.key("rest")
	e.alloc(k, 1, 5)
	e.alloc(k2, 3, 4) // 1 of 10 free: not below 10 % (1); no key holds more than half
	e.check(0)
	e.calls(0)
	e.alloc(k, 2, 1)
	e.clk.Advance(time.Minute)
	e.check(0)
	cs := e.calls(2)
	if !strings.Contains(title(cs[0]), "no node ID free (pool of 10)") || cs[0].Message.Embeds[0].Color != 0xE74C3C {
		t.Errorf("message %q colour %x", title(cs[0]), cs[0].Message.Embeds[0].Color)
	}
}

// Two replicas on one store, checking at the same moments, send each message
// once: the job lock picks one, the state in the store carries the cadence.
func TestCapacityAlertTwoReplicasSendOnce(t *testing.T) {
	e := newEnv(t, envOpts{redis: true, replicas: 2, nodes: 20, cfg: alert.Config{CapacityThreshold: 0.25}})
	k := e.key("k")
	e.alloc(k, 1, 18)
	both := func() int {
		done := make(chan bool, 2)
		for i := range 2 {
			go func() {
				ran, err := e.rs[i].al.Check(t.Context(), e.rs[i].reg)
				if err != nil {
					t.Error(err)
				}
				done <- ran
			}()
		}
		n := 0
		for range 2 {
			if <-done {
				n++
			}
		}
		return n
	}
	for step := range 130 { // 2 h 10 min, a check a minute on each replica
		if ran := both(); ran != 1 {
			t.Fatalf("minute %d: %d replicas ran the job, want 1", step, ran)
		}
		e.clk.Advance(time.Minute)
	}
	cs := e.calls(6) // firing, +1 h, +2 h: to ann and bob
	for i, c := range cs {
		if !strings.Contains(title(c), "running low") {
			t.Errorf("call %d: %q", i, title(c))
		}
	}
	if d := e.deliveries(0, alert.Capacity, "delivered") + e.deliveries(1, alert.Capacity, "delivered"); d != 6 {
		t.Errorf("deliveries counted on both replicas: %v, want 6", d)
	}
}
