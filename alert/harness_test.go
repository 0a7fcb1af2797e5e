package alert_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/discord/discordtest"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/password"
	"github.com/idkeeper/idkeeper/redis"
)

var (
	quiet = slog.New(slog.DiscardHandler)
	// start is 12:30 UTC: the clock-skew alert's first check evaluates at once,
	// the next at 13:00.
	start = time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC)
	cheap = password.Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}
)

// store is what a test needs of bolt and redis.
type store interface {
	idkeeper.Store
	account.Store
	alert.StateStore
}

// replica is one registry with its alerter.
type replica struct {
	st    store
	reg   *idkeeper.Registry
	acct  *account.Service
	al    *alert.Alerter
	prom  *prometheus.Registry
	owner string
}

// env is a fake clock, a fake Discord and one or more replicas on one store.
type env struct {
	t   *testing.T
	clk *fakeclock.Clock
	fd  *discordtest.Server
	rs  []*replica
	// hooks are the webhook URLs by user name.
	hooks map[string]string
}

type envOpts struct {
	redis    bool
	replicas int
	nodes    int
	cfg      alert.Config // Store, Sender, Owner, Clock, Logger, Audit, Registerer are set by newEnv
	grace    time.Duration
	replies  map[string][]discordtest.Reply // per user: the fake's answers
}

// newEnv starts the replicas and creates users ann and bob (with webhooks),
// cy (disabled, with a webhook) and dee (none).
func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, clk: fakeclock.New(start), fd: discordtest.New(t), hooks: map[string]string{}}
	if o.replicas == 0 {
		o.replicas = 1
	}
	if o.nodes == 0 {
		o.nodes = 20
	}
	var url, path string
	if o.redis {
		url = redistest.Start(t).URL()
	} else {
		path = filepath.Join(t.TempDir(), "idk.db")
	}
	sender := &discord.Client{HTTP: e.fd.HTTPClient(), BaseBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	for i := range o.replicas {
		var st store
		if o.redis {
			rs, err := redis.Open(url, redis.Options{Clock: e.clk.Now, Logger: quiet, Prefix: "alerts"})
			if err != nil {
				t.Fatal(err)
			}
			st = rs
		} else {
			bs, err := bolt.Open(path, bolt.Options{Clock: e.clk.Now, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			st = bs
		}
		t.Cleanup(func() { _ = st.Close() })
		if i == 0 {
			if _, err := st.Init(ctx, idkeeper.PoolSpec{Nodes: o.nodes}); err != nil {
				t.Fatal(err)
			}
		}
		acct, err := account.New(st, password.Hasher{Params: cheap}, account.Config{Clock: e.clk.Now, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		owner := fmt.Sprintf("replica-%d", i+1)
		reg, err := idkeeper.NewRegistry(st, idkeeper.Config{Clock: e.clk.Now, Logger: quiet, Nodes: o.nodes, Owner: owner,
			Grace: o.grace})
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Open(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Close() })
		cfg := o.cfg
		cfg.Store, cfg.Sender, cfg.Owner, cfg.Clock, cfg.Logger, cfg.Audit = st, sender, owner, e.clk.Now, quiet, acct
		r := &replica{st: st, reg: reg, acct: acct, prom: prometheus.NewRegistry(), owner: owner}
		cfg.Registerer = r.prom
		if r.al, err = alert.New(cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.al.Close() })
		e.rs = append(e.rs, r)
	}
	st := e.rs[0].st
	for _, u := range []struct {
		name     string
		webhook  bool
		disabled bool
	}{{"ann", true, false}, {"bob", true, false}, {"cy", true, true}, {"dee", false, false}} {
		var hook string
		if u.webhook {
			hook = e.fd.Webhook(webhookID(u.name), o.replies[u.name]...)
			e.hooks[u.name] = hook
		}
		err := st.CreateUser(ctx, account.User{Name: u.name, Role: account.RoleViewer, PasswordHash: "$argon2id$x",
			Disabled: u.disabled, CreatedAt: start, Epoch: 1, Webhook: hook})
		if err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// webhookID is the Discord webhook ID newEnv gave the user.
func webhookID(user string) string {
	return map[string]string{"ann": "1001", "bob": "1002", "cy": "1003", "dee": "1004"}[user]
}

// check runs one alert check on replica i.
func (e *env) check(i int) bool {
	e.t.Helper()
	ran, err := e.rs[i].al.Check(context.Background(), e.rs[i].reg)
	if err != nil {
		e.t.Fatalf("Check on replica %d: %v", i+1, err)
	}
	return ran
}

// key creates an API key and returns it.
func (e *env) key(desc string) idkeeper.APIKey {
	e.t.Helper()
	_, k, err := apikey.NewAdmin(e.rs[0].reg).Create(context.Background(), apikey.Spec{Description: desc})
	if err != nil {
		e.t.Fatal(err)
	}
	return k
}

func requester(i int) idkeeper.Requester {
	return idkeeper.Requester{MachineID: fmt.Sprintf("host-%d", i), PID: 100 + i, StartedAt: start, Instance: fmt.Sprintf("inst%d", i)}
}

// alloc allocates n node IDs for requester i with key k.
func (e *env) alloc(k idkeeper.APIKey, i, n int) {
	e.t.Helper()
	now := e.clk.Now()
	if _, err := e.rs[0].reg.Alloc(context.Background(), idkeeper.AllocRequest{Requester: requester(i), Count: n, Key: k, ClientNow: &now}); err != nil {
		e.t.Fatalf("Alloc %d for requester %d: %v", n, i, err)
	}
}

// remove removes requester i's leases.
func (e *env) remove(k idkeeper.APIKey, i int) {
	e.t.Helper()
	if _, err := e.rs[0].reg.Remove(context.Background(), idkeeper.RemoveRequest{Requester: requester(i), KeyID: k.ID}); err != nil {
		e.t.Fatal(err)
	}
}

// calls returns what the fake received so far, waiting up to a second for at
// least n, and fails unless exactly n came.
func (e *env) calls(n int) []discordtest.Call {
	e.t.Helper()
	if n > 0 {
		e.fd.WaitCalls(e.t, n, 5*time.Second)
	}
	cs := e.fd.Calls()
	if len(cs) != n {
		e.t.Fatalf("%d calls to Discord, want %d: %s", len(cs), n, titles(cs))
	}
	return cs
}

func titles(cs []discordtest.Call) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "\n  %s: %s", c.WebhookID, title(c))
	}
	return b.String()
}

func title(c discordtest.Call) string {
	if len(c.Message.Embeds) == 0 {
		return c.Message.Content
	}
	return c.Message.Embeds[0].Title
}

// text is everything a message shows.
func text(c discordtest.Call) string {
	var b strings.Builder
	b.WriteString(c.Message.Content)
	for _, em := range c.Message.Embeds {
		b.WriteString("\n" + em.Title + "\n" + em.Description)
		for _, f := range em.Fields {
			b.WriteString("\n" + f.Name + ": " + f.Value)
		}
	}
	return b.String()
}

// deliveries is idkeeper_alert_deliveries_total of replica i for alert and result.
func (e *env) deliveries(i int, alertName, result string) float64 {
	e.t.Helper()
	mfs, err := e.rs[i].prom.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "idkeeper_alert_deliveries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["alert"] == alertName && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// audit returns the audit entries of action, waiting a little for the registry's
// background appends (an alert's are synchronous).
func (e *env) audit(action string) []audit.Entry {
	e.t.Helper()
	all, err := e.rs[0].st.AuditEntries(context.Background(), 1, 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []audit.Entry
	for _, a := range all {
		if a.Action == action {
			out = append(out, a)
		}
	}
	return out
}
