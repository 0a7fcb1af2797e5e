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

// HogShare is the share of the pool one API key may hold before the capacity
// alert names it and fires: a key whose leases and cooling node IDs (after its
// Removes without mintedUpTo) hold more than half the pool.
const HogShare = 0.5

// hogging is whether a key holding held of total node IDs holds more than
// HogShare of them.
func hogging(held, total int) bool { return total > 0 && float64(held) > HogShare*float64(total) }

// charged is the node IDs counted against k's quota: its leases' and its
// cooling ones.
func charged(k idkeeper.KeyInfo) int { return k.NodesHeld + k.NodesCooling }

// checkCapacity sends the capacity alert when free node IDs are below the
// threshold or an API key holds more than HogShare of the pool: when first
// found, every Repeat while it holds, and "resolved" once it clears.
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
	keys, err := src.Keys(ctx)
	if err != nil {
		// The free node IDs alone still decide; the message goes out without keys.
		a.log.Warn("read the API keys for the capacity alert", "err", err)
		keys = nil
	}
	limit := a.capacityLimit(c.Total)
	hogs := hogs(keys, c.Total)
	low := c.Total > 0 && c.Remaining < limit
	bad := low || len(hogs) > 0
	next := st
	next.Checked, next.Summary = now, fmt.Sprintf("%d of %d node IDs free; the alert threshold is %d", c.Remaining, c.Total, limit)
	if len(hogs) > 0 {
		next.Summary += fmt.Sprintf("; API key %s holds %d (more than half the pool)", hogs[0].Key.ID, charged(hogs[0]))
	}
	switch {
	case bad && !st.Firing:
		next.Firing, next.Since, next.LastSent = true, now, now
		a.send(ctx, Capacity, "firing", a.capacityMessage(keys, hogs, c, limit, now))
	case bad && now.Sub(st.LastSent) >= a.cfg.Repeat:
		next.LastSent = now
		a.send(ctx, Capacity, "repeat", a.capacityMessage(keys, hogs, c, limit, st.Since))
	case !bad && st.Firing:
		next.Firing, next.Since, next.LastSent = false, time.Time{}, now
		a.send(ctx, Capacity, "resolved", a.capacityResolved(c, limit, now.Sub(st.Since)))
	}
	a.metrics.firing.WithLabelValues(Capacity).Set(b2f(bad))
	return a.put(ctx, next)
}

// hogs are the keys of keys holding more than HogShare of a pool of total node
// IDs, most first.
func hogs(keys []idkeeper.KeyInfo, total int) []idkeeper.KeyInfo {
	out := slices.DeleteFunc(slices.Clone(keys), func(k idkeeper.KeyInfo) bool { return !hogging(charged(k), total) })
	sortByHeld(out)
	return out
}

// sortByHeld sorts keys by node IDs charged, most first, then by ID.
func sortByHeld(keys []idkeeper.KeyInfo) {
	slices.SortFunc(keys, func(x, y idkeeper.KeyInfo) int {
		if x, y := charged(x), charged(y); x != y {
			return y - x
		}
		return strings.Compare(x.Key.ID, y.Key.ID)
	})
}

// keyLine is one key of a message: its ID, description (in code spans) and the
// node IDs charged to it, never its secret.
func keyLine(k idkeeper.KeyInfo) string {
	l := fmt.Sprintf("%s %s: %d", code(k.Key.ID, 40), code(k.Key.Description, 80), charged(k))
	if k.NodesCooling > 0 {
		l += fmt.Sprintf(" (%d of them cooling after its Removes)", k.NodesCooling)
	}
	return l
}

// capacityLimit is the threshold in node IDs: the alert stands while fewer are
// free. It is at least 1, so that a pool with none free always alerts.
func (a *Alerter) capacityLimit(total int) int {
	return max(1, int(math.Ceil(a.cfg.CapacityThreshold*float64(total))))
}

func (a *Alerter) capacityMessage(keys, hogs []idkeeper.KeyInfo, c idkeeper.Counts, limit int, since time.Time) discord.Message {
	low := c.Remaining < limit
	color, title := colorWarning, fmt.Sprintf("node IDs running low: %d of %d free", c.Remaining, c.Total)
	switch {
	case c.Remaining == 0:
		color, title = colorCritical, fmt.Sprintf("no node ID free (pool of %d)", c.Total)
	case !low:
		title = fmt.Sprintf("one API key holds %d of %d node IDs", charged(hogs[0]), c.Total)
	}
	desc := fmt.Sprintf("Free node IDs are below the alert threshold of %s %% of the pool (%d). "+
		"A process that asks for a node ID while none is free is refused with NODE_IDS_EXHAUSTED.",
		percent(a.cfg.CapacityThreshold*100), limit)
	if !low {
		desc = fmt.Sprintf("%d of %d node IDs are free, but one API key holds more than half the pool: "+
			"it can starve every other key.", c.Remaining, c.Total)
	}
	if len(hogs) > 0 {
		desc += " Node IDs cooling after a key's Removes count as held by it until they are ready. " +
			"Give the key a quota (or a lower one), or revoke it."
	}
	desc += fmt.Sprintf("\nSince %s. This message repeats %s while it lasts.", stamp(since), every(a.cfg.Repeat))
	fields := a.countFields(c)
	if len(hogs) > 0 {
		lines := make([]string, len(hogs))
		for i, k := range hogs {
			lines[i] = keyLine(k)
		}
		fields = append(fields, discord.Field{Name: "API keys holding more than half the pool",
			Value: discord.CutList(lines, discord.MaxFieldValue)})
	}
	if top := topKeysList(keys); top != "" {
		fields = append(fields, discord.Field{Name: "Top API keys by node IDs held", Value: top})
	}
	return a.embed(title, desc, color, fields...)
}

func (a *Alerter) capacityResolved(c idkeeper.Counts, limit int, lasted time.Duration) discord.Message {
	desc := fmt.Sprintf("Free node IDs are back at or above the alert threshold (%d), and no API key holds more "+
		"than half the pool. The alert lasted %s.",
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

// topKeysList lists the API keys holding the most node IDs (leases and cooling
// ones), or "" when none holds any or they could not be read.
func topKeysList(keys []idkeeper.KeyInfo) string {
	keys = slices.DeleteFunc(slices.Clone(keys), func(k idkeeper.KeyInfo) bool { return charged(k) == 0 })
	sortByHeld(keys)
	lines := make([]string, 0, len(keys))
	for i, k := range keys {
		if i == topKeys {
			lines = append(lines, fmt.Sprintf("… and %d more", len(keys)-topKeys))
			break
		}
		lines = append(lines, keyLine(k))
	}
	return discord.CutList(lines, discord.MaxFieldValue)
}

// put stores the state read and changed; a conflict means another replica ran
// the job at the same time (its lock lapsed), which is logged: the next run
// reads its state.
func (a *Alerter) put(ctx context.Context, st State) error {
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
