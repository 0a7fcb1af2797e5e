package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/discord"
)

// The server's Discord alerts (issue #11, docs/alerts.md): always on, sent to the
// webhooks the admin web's users set on their profile; with none set, nothing
// is sent.

// alertFlags are the server's alert flags.
type alertFlags struct {
	capacity float64 // percent of the pool
	repeat   time.Duration
	title    string
}

func (f *alertFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&f.capacity, "alert-capacity-threshold", alert.DefaultCapacityThreshold*100,
		"alert the users' Discord webhooks when free node IDs fall below this percentage of the pool; 0.1..100")
	fs.DurationVar(&f.repeat, "alert-repeat", alert.DefaultRepeat, "send a standing capacity alert again this often; 1m..24h")
	fs.StringVar(&f.title, "alert-title", "IdKeeper", "the start of every alert's title, to tell deployments apart in one channel; 1..64 characters")
}

// alertConfig is what the alert flags say.
type alertConfig struct {
	Threshold float64 // share of the pool, 0.001..1
	Repeat    time.Duration
	Title     string

	interval time.Duration // how often capacity is checked; 0: alert.DefaultInterval (tests set it)
	http     *http.Client  // Discord's client; nil: discord's default (tests point it at a fake)
}

func (f *alertFlags) config() (alertConfig, error) {
	switch {
	case !(f.capacity >= 0.1 && f.capacity <= 100):
		return alertConfig{}, usageError{&idkeeper.RangeError{Setting: "alert-capacity-threshold",
			Value: strconv.FormatFloat(f.capacity, 'g', -1, 64), Min: "0.1", Max: "100"}}
	case f.repeat < time.Minute || f.repeat > 24*time.Hour:
		return alertConfig{}, usageError{&idkeeper.RangeError{Setting: "alert-repeat", Value: f.repeat.String(), Min: "1m0s", Max: "24h0m0s"}}
	case f.title == "" || len([]rune(f.title)) > 64:
		return alertConfig{}, usagef("--alert-title %q: want 1 to 64 characters", f.title)
	}
	return alertConfig{Threshold: f.capacity / 100, Repeat: f.repeat, Title: f.title}, nil
}

// alerts is the server's Alerter and the context of its checks.
type alerts struct {
	al   *alert.Alerter
	stop context.CancelFunc
	done chan struct{}
}

// newAlerts makes the Alerter of a server over store, sending with dc, auditing
// through audit, its metrics on promReg. Nil, with a warning, for a store that
// keeps no alert state.
func newAlerts(cfg alertConfig, store idkeeper.Store, dc *discord.Client, owner string, audit idkeeper.Auditor,
	promReg prometheus.Registerer, log *slog.Logger) (*alerts, error) {
	as, ok := store.(alert.Store)
	if !ok {
		log.Warn("Discord alerts are off: the store keeps no alert state", "store", fmt.Sprintf("%T", store))
		return nil, nil
	}
	al, err := alert.New(alert.Config{Store: as, Sender: dc, Audit: audit, Owner: owner, Logger: log, Registerer: promReg,
		CapacityThreshold: cfg.Threshold, Repeat: cfg.Repeat, Title: cfg.Title, Interval: cfg.interval})
	if err != nil {
		return nil, err
	}
	return &alerts{al: al}, nil
}

// observer wraps next so the registry's resets, clock-guard failures and job
// lock overruns alert; next itself for nil alerts.
func (a *alerts) observer(next idkeeper.Observer, reg **idkeeper.Registry) idkeeper.Observer {
	if a == nil {
		return next
	}
	return a.al.Observer(next, func() *idkeeper.RecoveredReset {
		if *reg == nil {
			return nil
		}
		return (*reg).LastReset()
	})
}

// run starts the state-based alerts' checks on reg.
func (a *alerts) run(reg *idkeeper.Registry) {
	if a == nil {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	a.stop, a.done = stop, make(chan struct{})
	go func() {
		defer close(a.done)
		a.al.Run(ctx, reg)
	}()
}

// backupFailed alerts a scheduled backup's failure; a manual one is answered
// to the person who asked.
func (a *alerts) backupFailed(owner string) func(backup.Run) {
	return func(r backup.Run) {
		if a == nil || r.Err == nil || r.Actor != "system" || errors.Is(r.Err, context.Canceled) {
			return
		}
		a.al.Notify(alert.BackupFailure(owner, r.Err))
	}
}

// close stops the checks and sends the events still queued.
func (a *alerts) close() closeStep {
	return closeStep{"stop the alerts", func() error {
		if a == nil {
			return nil
		}
		if a.stop != nil {
			a.stop()
			<-a.done
		}
		return a.al.Close()
	}}
}
