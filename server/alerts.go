package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/internal/httpserve"
)

// The server's Discord alerts (issue #11, docs/alerts.md): always on, sent to the
// webhooks the admin web's users set on their profile; with none set, nothing
// is sent.

// alerts is the server's Alerter and the context of its checks.
type alerts struct {
	al   *alert.Alerter
	stop context.CancelFunc
	done chan struct{}
}

// newAlerts makes the Alerter of a server over store, sending with dc, auditing
// through audit, its metrics on promReg. Nil, with a warning, for a store that
// keeps no alert state.
func newAlerts(cfg AlertConfig, store idkeeper.Store, dc *discord.Client, owner string, audit idkeeper.Auditor,
	promReg prometheus.Registerer, log *slog.Logger) (*alerts, error) {
	as, ok := store.(alert.Store)
	if !ok {
		log.Warn("Discord alerts are off: the store keeps no alert state", "store", fmt.Sprintf("%T", store))
		return nil, nil
	}
	al, err := alert.New(alert.Config{Store: as, Sender: dc, Audit: audit, Owner: owner, Logger: log, Registerer: promReg,
		CapacityThreshold: cfg.Threshold, Repeat: cfg.Repeat, Title: cfg.Title, Interval: cfg.Interval})
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
func (a *alerts) close() httpserve.Step {
	return httpserve.Step{What: "stop the alerts", Close: func() error {
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
