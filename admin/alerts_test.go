package admin_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/discord/discordtest"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// GET /admin/api/store shows the Discord alerts: how many users get them, and
// each state-based alert as the store keeps it.
func TestStoreHealthAlerts(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		var s wire.StoreHealth
		e.do("GET", "/admin/api/store", "", "X-API-Key", adminKey).ok(t).decode(t, &s)
		if s.Alerts == nil || s.Alerts.Webhooks != 0 || len(s.Alerts.States) != 2 ||
			s.Alerts.States[0] != (wire.AlertState{Name: "capacity"}) || s.Alerts.States[1] != (wire.AlertState{Name: "clock-skew"}) {
			t.Fatalf("alerts before any check: %+v", s.Alerts)
		}

		fd := discordtest.New(t)
		for i, name := range []string{"ann", "bob"} {
			u := account.User{Name: name, Role: account.RoleViewer, PasswordHash: "$argon2id$x", CreatedAt: start, Epoch: 1,
				Webhook: fd.Webhook([]string{"501", "502"}[i]), Disabled: name == "bob"}
			if err := e.store.CreateUser(ctx, u); err != nil {
				t.Fatal(err)
			}
		}
		al, err := alert.New(alert.Config{Store: e.store.(alert.Store), Sender: &discord.Client{HTTP: fd.HTTPClient()},
			Owner: "replica-a", Clock: e.clk.Now, Logger: slog.New(slog.DiscardHandler), CapacityThreshold: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = al.Close() })
		key, err := e.reg.Authenticate(ctx, plainKey)
		if err != nil {
			t.Fatal(err)
		}
		who := idkeeper.Requester{MachineID: "m", PID: 1, StartedAt: start, Instance: "i"}
		if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who, Count: 1, Key: key}); err != nil {
			t.Fatal(err)
		}
		if _, err := al.Check(ctx, e.reg); err != nil {
			t.Fatal(err)
		}
		fd.WaitCalls(t, 1, 5*time.Second)

		e.do("GET", "/admin/api/store", "", "X-API-Key", adminKey).ok(t).decode(t, &s)
		now := ts(e.clk.Now())
		capa, skew := s.Alerts.States[0], s.Alerts.States[1]
		if s.Alerts.Webhooks != 1 || capa.Name != "capacity" || !capa.Firing || capa.Since == nil || *capa.Since != now ||
			capa.LastSent == nil || *capa.LastSent != now || capa.Checked == nil || *capa.Checked != now ||
			capa.Summary != "127 of 128 node IDs free; the alert threshold is 128" {
			t.Errorf("capacity after a check: %+v (webhooks %d)", capa, s.Alerts.Webhooks)
		}
		if skew.Name != "clock-skew" || skew.Firing || skew.Since != nil || skew.LastSent != nil || skew.Checked == nil ||
			skew.Summary != "0 requesters refused, 0 warned for clock skew" {
			t.Errorf("clock-skew after a check: %+v", skew)
		}
	})
}
