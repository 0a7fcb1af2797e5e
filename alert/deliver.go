package alert

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// Message colours: Discord embeds' side bar.
const (
	colorCritical = 0xE74C3C
	colorWarning  = 0xE67E22
	colorResolved = 0x2ECC71
	colorInfo     = 0x3498DB
)

// Delivery results, the result label of idkeeper_alert_deliveries_total.
const (
	resultDelivered = "delivered"
	resultFailed    = "failed"
)

type metrics struct {
	deliveries *prometheus.CounterVec
	dropped    prometheus.Counter
	firing     *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idkeeper_alert_deliveries_total",
			Help: "Alert messages delivered to, or failed at, one Discord webhook each, by alert and result (delivered|failed)."},
			[]string{"alert", "result"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "idkeeper_alert_events_dropped_total",
			Help: "Event alerts (store reset, clock guard, job lock overrun, backup failure) dropped because the queue was full."}),
		firing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "idkeeper_alert_firing",
			Help: "1 while a state-based alert (capacity, clock-skew) stands as this replica last found it, else 0."},
			[]string{"alert"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.deliveries, m.dropped, m.firing} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("alert: register metrics: %w", err)
		}
	}
	for _, name := range []string{Capacity, ClockSkew, StoreReset, ClockGuard, ClockCheck, LockOverrun, BackupFailed} {
		m.deliveries.WithLabelValues(name, resultDelivered)
		m.deliveries.WithLabelValues(name, resultFailed)
	}
	m.firing.WithLabelValues(Capacity)
	m.firing.WithLabelValues(ClockSkew)
	return m, nil
}

// targets returns the webhooks of the enabled accounts that set one, by user
// name. When the store answers no accounts at all, or fails, the last non-empty
// list read is used: a store that lost its data (a reset) lost its accounts too,
// and its reset must still reach the operators.
func (a *Alerter) targets(ctx context.Context) []discord.Target {
	users, err := a.cfg.Store.Users(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil || len(users) == 0 {
		if err != nil {
			a.log.Warn("read the accounts for alert webhooks; using the last list read", "err", err, "webhooks", len(a.lastTargets))
		}
		return a.lastTargets
	}
	var ts []discord.Target
	for _, u := range users {
		if u.Webhook != "" && !u.Disabled {
			ts = append(ts, discord.Target{Name: u.Name, URL: u.Webhook})
		}
	}
	a.lastTargets = ts
	return ts
}

// send delivers m to every webhook, within SendTimeout, and counts, logs and
// audits each delivery. It reports whether the message reached at least one
// webhook, or there was none to reach (so that a state-based alert does not
// retry every Interval while Discord is down only when nobody could get it).
func (a *Alerter) send(ctx context.Context, alert, state string, m discord.Message) (reached bool) {
	ts := a.targets(ctx)
	if len(ts) == 0 {
		a.log.Info("alert not sent: no user has a Discord webhook", "alert", alert, "state", state)
		return true
	}
	sctx, cancel := context.WithTimeout(ctx, a.cfg.SendTimeout)
	defer cancel()
	results := a.cfg.Sender.Fanout(sctx, ts, m)
	for i, res := range results {
		t := ts[i]
		e := audit.Entry{Actor: "system", Target: "user:" + t.Name}
		if res.Err == nil {
			reached = true
			a.metrics.deliveries.WithLabelValues(alert, resultDelivered).Inc()
			e.Action = audit.AlertSent
			e.Detail = fmt.Sprintf("%s alert (%s) delivered to Discord webhook %s: HTTP %d after %d attempt(s)",
				alert, state, res.WebhookID, res.Status, res.Attempts)
			a.log.Info("alert delivered", "alert", alert, "state", state, "user", t.Name, "webhook", res.WebhookID, "attempts", res.Attempts)
		} else {
			a.metrics.deliveries.WithLabelValues(alert, resultFailed).Inc()
			e.Action = audit.AlertFailed
			e.Detail = fmt.Sprintf("%s alert (%s) to Discord webhook %s failed after %d attempt(s): %v",
				alert, state, res.WebhookID, res.Attempts, res.Err)
			a.log.Warn("alert delivery failed", "alert", alert, "state", state, "user", t.Name, "webhook", res.WebhookID,
				"attempts", res.Attempts, "status", res.Status, "err", res.Err)
		}
		if a.cfg.Audit != nil {
			if err := a.cfg.Audit.Audit(context.WithoutCancel(ctx), e); err != nil {
				a.log.Warn("audit an alert delivery", "err", err)
			}
		}
	}
	return reached
}

// embed is a message's one embed, titled with the deployment's Title and
// footed with this replica.
func (a *Alerter) embed(title, description string, color int, fields ...discord.Field) discord.Message {
	return discord.Message{Embeds: []discord.Embed{{
		Title:       a.cfg.Title + ": " + title,
		Description: description,
		Color:       color,
		Timestamp:   wire.FormatTime(a.cfg.Clock()),
		Fields:      fields,
		Footer:      &discord.Footer{Text: "sent by registry " + clean(a.cfg.Owner, 200, false)},
	}}}
}

// code renders text from outside (a machine ID, a key description, an owner)
// as an inline code span, where Discord formats nothing: backticks become
// quotes, control characters spaces, and it is cut to n runes. Mentions are off
// for every message (discord.Client), so none of it can ping anyone.
func code(s string, n int) string { return "`" + clean(s, n, true) + "`" }

// clean replaces control characters (and, with noTicks, backticks) and cuts s
// to n runes.
func clean(s string, n int, noTicks bool) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r < 0x20 || r == 0x7f:
			return ' '
		case noTicks && r == '`':
			return '\''
		}
		return r
	}, s)
	if rs := []rune(s); len(rs) > n {
		s = string(rs[:n-1]) + "…"
	}
	return s
}
