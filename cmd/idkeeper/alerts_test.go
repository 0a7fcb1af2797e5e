package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/discord/discordtest"
	"github.com/idkeeper/idkeeper/server"
)

// The server wires the alerts: a pool below the threshold reaches the webhook a
// user set, the delivery is counted in /metrics, and a stop sends nothing more.
func TestServerSendsCapacityAlert(t *testing.T) {
	ctx := context.Background()
	fd := discordtest.New(t)
	hook := fd.Webhook("4242")
	path := filepath.Join(t.TempDir(), "r.db")
	st, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Init(ctx, idkeeper.PoolSpec{Nodes: 4}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateUser(ctx, account.User{Name: "ops", Role: account.RoleViewer, PasswordHash: "$argon2id$x",
		CreatedAt: time.Now(), Epoch: 1, Webhook: hook}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	srv, err := server.Open(ctx, server.Config{Listen: "127.0.0.1:0", Store: "bolt:" + path, BootstrapAPIKey: bootstrapKey,
		ShutdownTimeout: time.Second, Logger: quietLogger(), Registry: idkeeper.Config{Nodes: 4},
		Alerts: server.AlertConfig{Threshold: 0.5, Repeat: time.Hour, Title: "Staging", Interval: 50 * time.Millisecond, HTTP: fd.HTTPClient()}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := &client{t: t, base: "http://" + srv.Addr().String(), key: bootstrapKey}
	c.do("POST", "/v1/leases", `{"requester":{"machineId":"m","pid":1,"startedAt":"2026-11-30T00:00:00Z","instance":"abc"},"count":3}`, 200)
	calls := fd.WaitCalls(t, 1, 10*time.Second)
	em := calls[0].Message.Embeds[0]
	if em.Title != "Staging: node IDs running low: 1 of 4 free" {
		t.Fatalf("title %q", em.Title)
	}
	// The delivery is counted once Discord's answer is in.
	var body string
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp, err := http.Get("http://" + srv.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if body = string(b); strings.Contains(body, `idkeeper_alert_deliveries_total{alert="capacity",result="delivered"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks the delivery:\n%s", grepLines(body, "idkeeper_alert"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // six more checks: the alert repeats only hourly
	if n := len(fd.Calls()); n != 1 {
		t.Errorf("%d calls, want 1", n)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Out-of-range alert settings stop the server before it starts.
func TestAlertFlagsChecked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--alert-capacity-threshold", "0"}, "alert-capacity-threshold = 0 is outside its range 0.1..100"},
		{[]string{"--alert-capacity-threshold", "150"}, "alert-capacity-threshold = 150 is outside its range 0.1..100"},
		{[]string{"--alert-capacity-threshold", "NaN"}, "alert-capacity-threshold = NaN is outside its range"},
		{[]string{"--alert-repeat", "30s"}, "alert-repeat = 30s is outside its range 1m0s..24h0m0s"},
		{[]string{"--alert-title", ""}, "--alert-title \"\": want 1 to 64 characters"},
	} {
		db := filepath.Join(t.TempDir(), "idkeeper.db")
		code, _, stderr := runInProcess(context.Background(), append([]string{"server", "--listen", "127.0.0.1:0", "--store", "bolt:" + db}, c.args...), nil)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
}
