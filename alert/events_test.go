package alert_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/discord/discordtest"
)

type nopObserver struct{ idkeeper.Observer }

func (nopObserver) StoreReset(bool)                           {}
func (nopObserver) Phase(idkeeper.Phase, bool, time.Duration) {}
func (nopObserver) JobLockOverrun(string, time.Duration)      {}

// Events go out at once: a store reset this replica recovered (not one it
// adopted), the clock guard failing and clearing, a job lock overrun, a failed
// backup; two replicas reporting the same event send it once.
func TestEvents(t *testing.T) {
	e := newEnv(t, envOpts{redis: true, replicas: 2})
	reset := &idkeeper.RecoveredReset{At: start, Why: "the store's fencing counter 3 is below token 9", Until: start.Add(48 * time.Hour),
		Generation: idkeeper.Generation{ID: "gen-2", Number: 2}}
	obs := []idkeeper.Observer{
		e.rs[0].al.Observer(nopObserver{}, func() *idkeeper.RecoveredReset { return reset }),
		e.rs[1].al.Observer(nopObserver{}, func() *idkeeper.RecoveredReset { return reset }),
	}
	obs[1].StoreReset(false) // adopted another replica's recovery: no alert
	obs[0].StoreReset(true)
	cs := e.calls(2)
	for _, c := range cs {
		body := text(c)
		if title(c) != "IdKeeper: store reset detected and recovered" || c.Message.Embeds[0].Color != 0xE74C3C ||
			!strings.Contains(body, "fencing counter 3 is below token 9") || !strings.Contains(body, "New generation: 2") {
			t.Errorf("reset message %q:\n%s", title(c), body)
		}
	}
	obs[1].StoreReset(true) // the same reset reported by the other replica
	time.Sleep(200 * time.Millisecond)
	e.calls(2)

	obs[0].Phase(idkeeper.PhaseReady, true, 0) // no change: nothing
	obs[0].Phase(idkeeper.PhaseReady, false, 3*time.Second)
	cs = e.calls(4)
	if !strings.Contains(title(cs[3]), "the store's clock disagrees") || !strings.Contains(text(cs[3]), "+3s from the clock of registry `replica-1`") {
		t.Errorf("clock guard: %q\n%s", title(cs[3]), text(cs[3]))
	}
	obs[0].Phase(idkeeper.PhaseReady, true, 0)
	cs = e.calls(6)
	if !strings.Contains(title(cs[5]), "resolved") {
		t.Errorf("clock guard cleared: %q", title(cs[5]))
	}
	// Flapping within EventQuiet is not sent again.
	obs[0].Phase(idkeeper.PhaseReady, false, 3*time.Second)
	obs[0].Phase(idkeeper.PhaseReady, true, 0)
	time.Sleep(200 * time.Millisecond)
	e.calls(6)

	obs[1].JobLockOverrun(idkeeper.CleanupJob, 1500*time.Millisecond)
	cs = e.calls(8)
	if !strings.Contains(text(cs[7]), "ran 1.5s past its job lock") {
		t.Errorf("overrun: %s", text(cs[7]))
	}
	e.rs[1].al.Notify(alert.BackupFailure("replica-2", errors.New("write /backups/x: no space left on device")))
	cs = e.calls(10)
	if title(cs[9]) != "IdKeeper: a scheduled backup failed" || !strings.Contains(text(cs[9]), "no space left on device") {
		t.Errorf("backup: %q %s", title(cs[9]), text(cs[9]))
	}
	// After EventQuiet the same event is sent again.
	e.clk.Advance(alert.DefaultEventQuiet + time.Second)
	obs[0].Phase(idkeeper.PhaseReady, false, 3*time.Second)
	e.calls(12)
}

// One dead webhook does not hold up the others: the good one is delivered while
// the dead one is still being answered, and the dead one counts as failed,
// bounded by SendTimeout.
func TestDeadWebhookDoesNotDelayOthers(t *testing.T) {
	e := newEnv(t, envOpts{nodes: 10, cfg: alert.Config{SendTimeout: 3 * time.Second},
		replies: map[string][]discordtest.Reply{"ann": {{Status: 200, Delay: time.Minute}}}})
	k := e.key("k")
	e.alloc(k, 1, 10)
	done := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(done)
		e.check(0)
	}()
	for {
		if len(e.fd.CallsTo(webhookID("bob"))) == 1 {
			break
		}
		if time.Since(began) > 2*time.Second {
			t.Fatal("bob's webhook was not called within 2 s while ann's hung")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-done:
		t.Fatal("the check returned before ann's delivery ended")
	default:
	}
	<-done
	if el := time.Since(began); el > 10*time.Second {
		t.Errorf("the check took %v: SendTimeout 3 s does not bound it", el)
	}
	if d, f := e.deliveries(0, alert.Capacity, "delivered"), e.deliveries(0, alert.Capacity, "failed"); d != 1 || f != 1 {
		t.Errorf("delivered %v failed %v, want 1 and 1", d, f)
	}
	failed := e.audit(audit.AlertFailed)
	if len(failed) != 1 || failed[0].Target != "user:ann" || !strings.Contains(failed[0].Detail, "webhook 1001") ||
		strings.Contains(failed[0].Detail, "tok_") {
		t.Errorf("failure audit %+v", failed)
	}
}

// A 429 is honoured: the delivery waits retry_after and succeeds on the next
// attempt; a 5xx is retried with backoff; a deleted webhook fails at once.
func TestDeliveryRetries(t *testing.T) {
	e := newEnv(t, envOpts{nodes: 10, replies: map[string][]discordtest.Reply{
		"ann": {{Status: 429, Body: `{"message":"You are being rate limited.","retry_after":0.3,"global":false}`}, {Status: 200}},
		"bob": {{Status: 502}, {Status: 503}, {Status: 204}},
	}})
	k := e.key("k")
	e.alloc(k, 1, 10)
	began := time.Now()
	e.check(0)
	if el := time.Since(began); el < 300*time.Millisecond {
		t.Errorf("the check took %v: retry_after 0.3 s was not waited", el)
	}
	if len(e.fd.CallsTo(webhookID("ann"))) != 2 || len(e.fd.CallsTo(webhookID("bob"))) != 3 {
		t.Errorf("calls: %s", titles(e.fd.Calls()))
	}
	sent := e.audit(audit.AlertSent)
	if len(sent) != 2 {
		t.Fatalf("audit %+v", sent)
	}
	for _, a := range sent {
		want := map[string]string{"user:ann": "HTTP 200 after 2 attempt(s)", "user:bob": "HTTP 204 after 3 attempt(s)"}[a.Target]
		if want == "" || !strings.Contains(a.Detail, want) {
			t.Errorf("audit %s: %q, want %q", a.Target, a.Detail, want)
		}
	}
}
