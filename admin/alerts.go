package admin

import (
	"context"

	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// alertsView is what the store page and GET /admin/api/store show of the
// Discord alerts (docs/alerts.md): the state-based alerts as the store keeps
// them, and how many users get the messages.
type alertsView struct {
	States   []alert.State // alert.StateAlerts, in that order
	Webhooks int           // enabled users with a webhook
}

// alerts reads the alerts' state; nil when the store keeps none, or with the
// error when it does not answer.
func (h *Handler) alerts(ctx context.Context) (*alertsView, error) {
	as, ok := h.cfg.Store.(alert.StateStore)
	if !ok {
		return nil, nil
	}
	v := &alertsView{}
	for _, name := range alert.StateAlerts {
		st, err := as.AlertState(ctx, name)
		if err != nil {
			return nil, err
		}
		v.States = append(v.States, st)
	}
	users, err := h.cfg.Store.Users(ctx)
	if err != nil {
		return nil, err
	}
	for _, u := range users {
		if u.Webhook != "" && !u.Disabled {
			v.Webhooks++
		}
	}
	return v, nil
}

func (v *alertsView) wire() *wire.Alerts {
	if v == nil {
		return nil
	}
	out := &wire.Alerts{Webhooks: v.Webhooks, States: make([]wire.AlertState, len(v.States))}
	for i, st := range v.States {
		out.States[i] = wire.AlertState{Name: st.Name, Firing: st.Firing, Since: optTime(st.Since), LastSent: optTime(st.LastSent),
			Checked: optTime(st.Checked), Summary: st.Summary}
	}
	return out
}

// alertAbout says what each state-based alert watches, for the store page.
var alertAbout = map[string]string{
	alert.NameCapacity:  "free node IDs below the threshold; checked every minute, repeated hourly while it stands",
	alert.NameClockSkew: "requesters whose clock the registry warned of or refused; checked on the hour",
}

// AlertAbout says what the alert named name watches.
func (storeView) AlertAbout(name string) string { return alertAbout[name] }
