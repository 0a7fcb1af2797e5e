package alert

import (
	"cmp"
	"context"
	"fmt"
	"github.com/idkeeper/idkeeper/internal/plural"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/discord"
)

// checkSkew runs the clock-skew alert (the brief's ClockSkewAlertJob) at the
// first check of each UTC hour, and at the very first check: when any requester's
// last observation stands at warn or reject, as the registry judged it when it
// made it, every webhook gets one message listing the refused requesters first,
// then the warned ones. It repeats every hour while any stands; a "resolved"
// message follows once healthy observations replaced them or they lapsed (the
// store drops an observation lease + grace after it was made).
func (a *Alerter) checkSkew(ctx context.Context, src Source) error {
	now := a.cfg.Clock()
	st, err := a.cfg.Store.AlertState(ctx, ClockSkew)
	if err != nil {
		return fmt.Errorf("alert: read the clock-skew alert's state: %w", err)
	}
	if !st.Checked.IsZero() && !st.Checked.Before(now.UTC().Truncate(time.Hour)) {
		return nil
	}
	obs, err := src.SkewObservations(ctx)
	if err != nil {
		return fmt.Errorf("alert: read the clock-skew observations: %w", err)
	}
	bad := skewed(obs)
	refused := 0
	for _, o := range bad {
		if o.Level == idkeeper.SkewReject {
			refused++
		}
	}
	next := st
	next.Checked, next.Summary = now, fmt.Sprintf("%s refused, %d warned for clock skew", plural.N(refused, "requester", "requesters"), len(bad)-refused)
	switch {
	case len(bad) > 0:
		state := "repeat"
		if !st.Firing {
			state, next.Firing, next.Since = "firing", true, now
		}
		next.LastSent = now
		a.send(ctx, ClockSkew, state, a.skewMessage(bad, refused, next.Since))
	case st.Firing:
		next.Firing, next.Since, next.LastSent = false, time.Time{}, now
		a.send(ctx, ClockSkew, "resolved", a.embed("resolved: no clock skew over the threshold",
			fmt.Sprintf("Every requester's last clock reading is within the thresholds again, or has lapsed. "+
				"The alert lasted %s.", now.Sub(st.Since).Round(time.Second)), colorResolved))
	}
	a.metrics.firing.WithLabelValues(ClockSkew).Set(b2f(len(bad) > 0))
	return a.put(ctx, next)
}

// skewed returns the observations at warn or reject: rejected first, then by
// the size of the skew, largest first, then by requester.
func skewed(obs []idkeeper.SkewObservation) []idkeeper.SkewObservation {
	bad := slices.DeleteFunc(slices.Clone(obs), func(o idkeeper.SkewObservation) bool {
		return o.Level != idkeeper.SkewReject && o.Level != idkeeper.SkewWarn
	})
	rank := func(l idkeeper.SkewLevel) int {
		if l == idkeeper.SkewReject {
			return 0
		}
		return 1
	}
	slices.SortFunc(bad, func(x, y idkeeper.SkewObservation) int {
		return cmp.Or(cmp.Compare(rank(x.Level), rank(y.Level)), cmp.Compare(y.Skew.Abs(), x.Skew.Abs()),
			strings.Compare(x.Requester.Key(), y.Requester.Key()))
	})
	return bad
}

func (a *Alerter) skewMessage(bad []idkeeper.SkewObservation, refused int, since time.Time) discord.Message {
	warned := len(bad) - refused
	color := colorWarning
	if refused > 0 {
		color = colorCritical
	}
	intro := fmt.Sprintf("Requesters whose last clock reading was off by more than the registry allows: above half the "+
		"cleanup grace it warns, above the grace it refuses their Alloc, so refused ones hold no node ID and show "+
		"nowhere else. Fix the time sync (NTP) on these machines. Since %s; repeats every hour while any stands.\n\n",
		stamp(since))
	lines := make([]string, 0, len(bad))
	for _, o := range bad {
		lines = append(lines, skewLine(o))
	}
	desc := intro + discord.CutList(lines, discord.MaxDescription-utf8.RuneCountInString(intro))
	return a.embed(fmt.Sprintf("clock skew: %d refused, %d warned", refused, warned), desc, color,
		discord.Field{Name: "Refused (Alloc rejected)", Value: fmt.Sprint(refused), Inline: true},
		discord.Field{Name: "Warned", Value: fmt.Sprint(warned), Inline: true})
}

// skewLine renders one observation; everything the client sent is in code spans.
func skewLine(o idkeeper.SkewObservation) string {
	verdict := "**Warned**"
	if o.Level == idkeeper.SkewReject {
		verdict = "**Refused**"
	}
	dir := "behind"
	if o.Skew < 0 {
		dir = "ahead"
	}
	from := ""
	if o.RemoteIP != "" {
		from = " from " + code(o.RemoteIP, 45)
	}
	return fmt.Sprintf("%s %s pid %d: clock %s %s (threshold %s), %s%s at %s", verdict, code(o.Requester.MachineID, 80),
		o.Requester.PID, o.Skew.Abs().Round(time.Millisecond), dir, o.Threshold, clean(o.Operation, 10, true), from,
		o.ObservedAt.UTC().Format("15:04:05 UTC"))
}
