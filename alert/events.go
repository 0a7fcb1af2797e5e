package alert

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idkeeper/idkeeper"
)

// Event is an alert sent at once, not a state the jobs follow.
type Event struct {
	Name string // StoreReset, ClockGuard, LockOverrun, BackupFailed
	// Key tells apart events of one Name that must each be sent: a reset's
	// generation, a job's name, a replica. An event of the same Name and Key is
	// sent once per EventQuiet, by whichever replica reports it first.
	Key         string
	Title, Text string
	Critical    bool // red; else orange
	Resolved    bool // green: the end of an earlier event
}

// lockName is the job lock that spaces the event's messages.
func (e Event) lockName() string {
	n := "alert:" + e.Name
	if e.Key != "" {
		n += ":" + e.Key
	}
	if e.Resolved {
		n += ":resolved"
	}
	return n
}

// Notify queues e for delivery and returns at once: the registry never waits
// for Discord. When the queue is full, e is dropped, logged and counted
// (idkeeper_alert_events_dropped_total).
func (a *Alerter) Notify(e Event) {
	select {
	case a.events <- e:
	default:
		a.metrics.dropped.Inc()
		a.log.Error("alert event dropped: the queue is full", "alert", e.Name, "title", e.Title)
	}
}

func (a *Alerter) eventLoop() {
	defer close(a.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		select {
		case e := <-a.events:
			a.deliverEvent(ctx, e)
		case <-a.stop:
			// What is queued still goes out, within one SendTimeout.
			ctx, cancel := context.WithTimeout(ctx, a.cfg.SendTimeout)
			defer cancel()
			for {
				select {
				case e := <-a.events:
					a.deliverEvent(ctx, e)
				default:
					return
				}
			}
		}
	}
}

// deliverEvent sends e unless the same event was sent within EventQuiet: its
// job lock, taken for EventQuiet and never released, says so across replicas.
// A store that cannot be asked does not hold the message back: an event is
// most often about a store in trouble.
func (a *Alerter) deliverEvent(ctx context.Context, e Event) {
	if ctx.Err() != nil {
		return
	}
	lock, ok, err := a.cfg.Store.TryLock(ctx, e.lockName(), a.cfg.Owner, a.cfg.EventQuiet)
	switch {
	case err != nil:
		a.log.Warn("take the alert event's lock; sending anyway", "alert", e.Name, "err", err)
	case !ok:
		a.log.Info("alert event already sent", "alert", e.Name, "key", e.Key, "by", lock.Owner, "quietUntil", lock.Until)
		return
	}
	color := colorWarning
	switch {
	case e.Resolved:
		color = colorResolved
	case e.Critical:
		color = colorCritical
	}
	state := "event"
	if e.Resolved {
		state = "resolved"
	}
	a.send(ctx, e.Name, state, a.embed(e.Title, e.Text, color))
}

// Observer returns an idkeeper.Observer that passes every report on to next and
// also raises events: a store reset this replica recovered into a new generation
// (lastReset, called when the event is sent, gives its details; nil: none), the
// store's clock starting and ceasing to disagree with this registry's (the clock
// guard), and a job that ran past its job lock.
func (a *Alerter) Observer(next idkeeper.Observer, lastReset func() *idkeeper.RecoveredReset) idkeeper.Observer {
	o := &observer{Observer: next, a: a, lastReset: lastReset}
	o.clockOK.Store(true)
	return o
}

type observer struct {
	idkeeper.Observer
	a         *Alerter
	lastReset func() *idkeeper.RecoveredReset
	clockOK   atomic.Bool
}

func (o *observer) StoreReset(newGeneration bool) {
	o.Observer.StoreReset(newGeneration)
	if !newGeneration {
		return // the replica that recovered it alerts
	}
	e := Event{Name: StoreReset, Critical: true, Title: "store reset detected and recovered",
		Text: "The store lost data this registry knew of (DESIGN §7): every node ID nobody claims is quarantined for a " +
			"lease plus the grace, and every watermark was raised. Holders keep their node IDs when their Renew shows " +
			"their receipts. Find out what happened to the store (a restart without its data, a failover to a lagging " +
			"replica, a restore)."}
	if o.lastReset != nil {
		if r := o.lastReset(); r != nil {
			e.Key = r.Generation.ID
			e.Text += fmt.Sprintf("\n\nWhat showed it: %s\nQuarantined until: %s\nNew generation: %d",
				code(r.Why, 600), stamp(r.Until), r.Generation.Number)
		}
	}
	o.a.Notify(e)
}

func (o *observer) Phase(p idkeeper.Phase, clockOK bool, offset time.Duration) {
	o.Observer.Phase(p, clockOK, offset)
	if o.clockOK.Swap(clockOK) == clockOK {
		return
	}
	owner := o.a.cfg.Owner
	if !clockOK {
		o.a.Notify(Event{Name: ClockGuard, Key: owner, Critical: true,
			Title: "the store's clock disagrees with a registry's",
			Text: fmt.Sprintf("The store's clock is %s from the clock of registry %s, more than it tolerates. That "+
				"registry grants, renews and reclaims nothing until they agree: check the time sync (NTP) of both.",
				signed(offset), code(owner, 200))})
		return
	}
	o.a.Notify(Event{Name: ClockGuard, Key: owner, Resolved: true,
		Title: "resolved: the store's clock agrees with a registry's again",
		Text:  fmt.Sprintf("Registry %s and the store agree again (offset %s).", code(owner, 200), signed(offset))})
}

func (o *observer) JobLockOverrun(job string, overrun time.Duration) {
	o.Observer.JobLockOverrun(job, overrun)
	o.a.Notify(Event{Name: LockOverrun, Key: job, Title: "a job ran past its job lock",
		Text: fmt.Sprintf("The %s job on registry %s ran %s past its job lock, so another replica may have run it at "+
			"the same time. Its work is safe to repeat, but the store is slow: look at its latency and load.",
			code(job, 64), code(o.a.cfg.Owner, 200), overrun.Round(time.Millisecond))})
}

// ClockUnverified is the event of a registry whose clock check failed (DESIGN
// §8): it grants, renews and reclaims nothing, hands back its job locks and
// exits, for its supervisor to start a fresh process.
func ClockUnverified(owner, reason string, err error) Event {
	return Event{Name: ClockCheck, Key: owner, Critical: true, Title: "a registry's clock is no longer verified",
		Text: fmt.Sprintf("The clock agent no longer vouches for the clock of registry %s (%s): %s\nIt grants, renews and "+
			"reclaims nothing, reports not ready, hands back its job locks and exits (status 75) for its supervisor to start a "+
			"fresh process, which serves once the agent vouches for its clock again; the other replicas serve. Check the "+
			"agent, its NTP servers and this machine's time sync.", code(owner, 200), code(reason, 40),
			code(err.Error(), 600))}
}

// BackupFailure is the event of a scheduled backup that failed.
func BackupFailure(owner string, err error) Event {
	return Event{Name: BackupFailed, Critical: true, Title: "a scheduled backup failed",
		Text: fmt.Sprintf("The scheduled backup on registry %s failed: %s\nThe next one runs on schedule; until one "+
			"succeeds, the newest backup is older than planned.", code(owner, 200), code(err.Error(), 1000))}
}

// signed renders d with its sign, to the millisecond.
func signed(d time.Duration) string {
	d = d.Round(time.Millisecond)
	if d >= 0 {
		return "+" + d.String()
	}
	return d.String()
}
