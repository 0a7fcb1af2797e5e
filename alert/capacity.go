package alert

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/discord"
)

// topKeys is how many API keys a capacity message lists by node IDs held.
const topKeys = 5

// checkCapacity sends the capacity alert when free node IDs are below the
// threshold: when first found, every Repeat while it holds, and "resolved" once
// it clears.
func (a *Alerter) checkCapacity(ctx context.Context, src Source) error {
	now := a.cfg.Clock()
	c, err := src.Remaining(ctx)
	if err != nil {
		return fmt.Errorf("alert: read the free node IDs: %w", err)
	}
	st, err := a.cfg.Store.AlertState(ctx, Capacity)
	if err != nil {
		return fmt.Errorf("alert: read the capacity alert's state: %w", err)
	}
	limit := a.capacityLimit(c.Total)
	low := c.Total > 0 && c.Remaining < limit
	next := st
	next.Checked, next.Summary = now, fmt.Sprintf("%d of %d node IDs free; the alert threshold is %d", c.Remaining, c.Total, limit)
	switch {
	case low && !st.Firing:
		next.Firing, next.Since, next.LastSent = true, now, now
		a.send(ctx, Capacity, "firing", a.capacityMessage(ctx, src, c, limit, now))
	case low && now.Sub(st.LastSent) >= a.cfg.Repeat:
		next.LastSent = now
		a.send(ctx, Capacity, "repeat", a.capacityMessage(ctx, src, c, limit, st.Since))
	case !low && st.Firing:
		next.Firing, next.Since, next.LastSent = false, time.Time{}, now
		a.send(ctx, Capacity, "resolved", a.capacityResolved(c, limit, now.Sub(st.Since)))
	}
	a.metrics.firing.WithLabelValues(Capacity).Set(b2f(low))
	return a.put(ctx, next)
}

// capacityLimit is the threshold in node IDs: the alert stands while fewer are
// free. It is at least 1, so that a pool with none free always alerts.
func (a *Alerter) capacityLimit(total int) int {
	return max(1, int(math.Ceil(a.cfg.CapacityThreshold*float64(total))))
}

func (a *Alerter) capacityMessage(ctx context.Context, src Source, c idkeeper.Counts, limit int, since time.Time) discord.Message {
	color, title := colorWarning, fmt.Sprintf("node IDs running low: %d of %d free", c.Remaining, c.Total)
	if c.Remaining == 0 {
		color, title = colorCritical, fmt.Sprintf("no node ID free (pool of %d)", c.Total)
	}
	desc := fmt.Sprintf("Free node IDs are below the alert threshold of %s %% of the pool (%d). "+
		"A process that asks for a node ID while none is free is refused with NODE_IDS_EXHAUSTED.\n"+
		"Since %s. This message repeats %s while it lasts.",
		percent(a.cfg.CapacityThreshold*100), limit, stamp(since), every(a.cfg.Repeat))
	fields := a.countFields(c)
	if top := a.topKeys(ctx, src); top != "" {
		fields = append(fields, discord.Field{Name: "Top API keys by node IDs held", Value: top})
	}
	return a.embed(title, desc, color, fields...)
}

func (a *Alerter) capacityResolved(c idkeeper.Counts, limit int, lasted time.Duration) discord.Message {
	desc := fmt.Sprintf("Free node IDs are back at or above the alert threshold (%d). The alert lasted %s.",
		limit, lasted.Round(time.Second))
	return a.embed(fmt.Sprintf("resolved: %d of %d node IDs free", c.Remaining, c.Total), desc, colorResolved, a.countFields(c)...)
}

func (a *Alerter) countFields(c idkeeper.Counts) []discord.Field {
	n := func(name string, v int) discord.Field {
		return discord.Field{Name: name, Value: strconv.Itoa(v), Inline: true}
	}
	return []discord.Field{n("Free", c.Remaining), n("Leased", c.Leased), n("In grace", c.InGrace),
		n("Quarantined", c.Quarantined), n("Cooling (free, must wait)", c.Cooling), n("Pool", c.Total)}
}

// topKeys lists the API keys holding the most node IDs, or "" when none holds
// any or they cannot be read (the message goes out without them).
func (a *Alerter) topKeys(ctx context.Context, src Source) string {
	keys, err := src.Keys(ctx)
	if err != nil {
		a.log.Warn("read the API keys for the capacity alert", "err", err)
		return ""
	}
	keys = slices.DeleteFunc(keys, func(k idkeeper.KeyInfo) bool { return k.NodesHeld == 0 })
	slices.SortFunc(keys, func(x, y idkeeper.KeyInfo) int {
		if x.NodesHeld != y.NodesHeld {
			return y.NodesHeld - x.NodesHeld
		}
		return strings.Compare(x.Key.ID, y.Key.ID)
	})
	lines := make([]string, 0, len(keys))
	for i, k := range keys {
		if i == topKeys {
			lines = append(lines, fmt.Sprintf("… and %d more", len(keys)-topKeys))
			break
		}
		lines = append(lines, fmt.Sprintf("%s %s: %d", code(k.Key.ID, 40), code(k.Key.Description, 80), k.NodesHeld))
	}
	return discord.CutList(lines, discord.MaxFieldValue)
}

// put stores the state read and changed; a conflict means another replica ran
// the job at the same time (its lock lapsed), which is logged: the next run
// reads its state.
func (a *Alerter) put(ctx context.Context, st idkeeper.AlertState) error {
	err := a.cfg.Store.PutAlertState(ctx, st)
	if errors.Is(err, idkeeper.ErrConflict) {
		a.log.Warn("another replica updated the alert's state at the same time", "alert", st.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("alert: store the %s alert's state: %w", st.Name, err)
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// percent renders p with at most one decimal: "10", "2.5".
func percent(p float64) string { return strconv.FormatFloat(math.Round(p*10)/10, 'f', -1, 64) }

// every renders a period: "every hour", "every 2 hours", "every 30m0s".
func every(d time.Duration) string {
	switch {
	case d == time.Hour:
		return "every hour"
	case d%time.Hour == 0:
		return fmt.Sprintf("every %d hours", d/time.Hour)
	}
	return "every " + d.String()
}

// stamp renders t for a message: UTC to the second.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }
