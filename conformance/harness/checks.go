package harness

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"time"

	"github.com/idkeeper/idkeeper/conformance/internal/leasejson"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// tolerance is what timing checks allow for scheduling on a loaded machine.
const tolerance = 400 * time.Millisecond

// checks are the named checks a scenario's "check" step runs on the proxy's log
// and the driver's events.
var checks = map[string]func(*run) error{
	"alloc-backoff":           checkAllocBackoff,
	"renew-retry-interval":    checkRenewRetry,
	"renew-at-once-then-half": checkRenewSchedule,
	"remove-minted-up-to":     checkMintedUpTo,
	"no-remove":               checkNoRemove,
	"requesters":              checkRequesters,
	"receipts":                checkReceipts,
}

func of(log []*Exchange, route string) []*Exchange {
	var out []*Exchange
	for _, e := range log {
		if e.Route == route {
			out = append(out, e)
		}
	}
	return out
}

func eventsOf(d *Driver, ev, op string) []Message {
	var out []Message
	for _, e := range d.Events() {
		if e.Msg.Str("ev") == ev && (op == "" || e.Msg.Str("op") == op) {
			out = append(out, e.Msg)
		}
	}
	return out
}

func delayOf(m Message) time.Duration {
	f, _ := m["delayMs"].(float64)
	return time.Duration(f) * time.Millisecond
}

// checkAllocBackoff: the k-th Alloc retry (k from 0) waits b × (1 ± 0.2), b =
// min(60 s, 3 s × 2^k), never above 60 s; at least two retries.
func checkAllocBackoff(r *run) error {
	log, _ := r.proxy.Log()
	allocs := of(log, "alloc")
	if len(allocs) < 3 {
		return fmt.Errorf("%d Alloc requests, want at least 3 (two retries)", len(allocs))
	}
	retries := eventsOf(r.drv, "retry", "alloc")
	for k := range len(allocs) - 1 {
		b := min(60*time.Second, time.Duration(float64(3*time.Second)*math.Pow(2, float64(k))))
		lo, hi := time.Duration(float64(b)*0.8), min(60*time.Second, time.Duration(float64(b)*1.2))
		gap := allocs[k+1].Received.Sub(allocs[k].Answered)
		if gap < lo-tolerance || gap > hi+tolerance {
			return fmt.Errorf("Alloc retry %d came %v after the failure, want %v..%v", k+1, gap.Round(time.Millisecond), lo, hi)
		}
		if k < len(retries) {
			if d := delayOf(retries[k]); d < lo-time.Millisecond || d > hi+time.Millisecond {
				return fmt.Errorf("retry event %d announces %v, want %v..%v", k+1, d, lo, hi)
			}
		}
	}
	if len(retries) < len(allocs)-1 {
		return fmt.Errorf("%d retry events for %d Alloc retries", len(retries), len(allocs)-1)
	}
	return nil
}

// checkRenewRetry: after a failed Renew the next comes max(5 s, min(10 min,
// time left / 4)) later; at least two retries.
func checkRenewRetry(r *run) error {
	log, _ := r.proxy.Log()
	retries := eventsOf(r.drv, "retry", "renew")
	checked := 0
	for i, e := range log {
		if e.Route != "renew" || e.Granted() {
			continue
		}
		var deadline time.Time
		for _, g := range log[:i] {
			if g.Granted() {
				deadline = g.Received.Add(g.LeaseTime())
			}
		}
		next := firstAfter(log[i+1:], "renew")
		if next == nil || deadline.IsZero() {
			continue
		}
		want := max(5*time.Second, min(10*time.Minute, deadline.Sub(e.Answered)/4))
		slack := want/10 + tolerance
		gap := next.Received.Sub(e.Answered)
		if gap < want-slack || gap > want+slack {
			return fmt.Errorf("Renew retry %d came %v after the failure, want %v ± %v", checked+1,
				gap.Round(time.Millisecond), want.Round(time.Millisecond), slack)
		}
		if checked < len(retries) {
			if d := delayOf(retries[checked]); d < want-slack || d > want+slack {
				return fmt.Errorf("retry event %d announces %v, want %v ± %v", checked+1, d, want.Round(time.Millisecond), slack)
			}
		}
		checked++
	}
	if checked < 2 {
		return fmt.Errorf("%d Renew retries seen, want at least 2", checked)
	}
	if len(retries) < checked {
		return fmt.Errorf("%d renew retry events for %d retries", len(retries), checked)
	}
	return nil
}

func firstAfter(log []*Exchange, route string) *Exchange {
	for _, e := range log {
		if e.Route == route {
			return e
		}
	}
	return nil
}

// checkRenewSchedule: the first Renew follows the Alloc at once (within 1 s);
// the next comes at half the lease the first one granted.
func checkRenewSchedule(r *run) error {
	log, _ := r.proxy.Log()
	allocs, renews := of(log, "alloc"), of(log, "renew")
	if len(allocs) == 0 || len(renews) < 2 {
		return fmt.Errorf("%d Allocs and %d Renews, want 1 and 2", len(allocs), len(renews))
	}
	if gap := renews[0].Received.Sub(allocs[len(allocs)-1].Answered); gap > time.Second {
		return fmt.Errorf("the first Renew came %v after the Alloc's answer, want it at once (within 1 s)", gap.Round(time.Millisecond))
	}
	want := renews[0].LeaseTime() / 2
	slack := want/10 + tolerance
	if gap := renews[1].Received.Sub(renews[0].Received); gap < want-slack || gap > want+slack {
		return fmt.Errorf("the second Renew came %v after the first, want half the lease: %v ± %v", gap.Round(time.Millisecond), want, slack)
	}
	return nil
}

// checkMintedUpTo: the session's Remove carries mintedUpTo, no earlier than the
// latest timestamp minted and no later than the Close.
func checkMintedUpTo(r *run) error {
	log, _ := r.proxy.Log()
	removes := of(log, "remove")
	if len(removes) == 0 {
		return fmt.Errorf("no Remove was sent")
	}
	if r.maxTS.IsZero() {
		return fmt.Errorf("the scenario minted nothing before Close")
	}
	rm := removes[len(removes)-1]
	s, ok := rm.Request["mintedUpTo"].(string)
	if !ok {
		return fmt.Errorf("the Remove carries no mintedUpTo (%v)", rm.Request)
	}
	t, err := wire.ParseTime(s)
	if err != nil {
		return fmt.Errorf("mintedUpTo %q: %v", s, err)
	}
	if t.Before(r.maxTS) || t.After(rm.Received) {
		return fmt.Errorf("mintedUpTo %s, want from the latest timestamp minted (%s) to the Remove (%s)", s,
			wire.FormatTime(r.maxTS), wire.FormatTime(rm.Received))
	}
	return nil
}

func checkNoRemove(r *run) error {
	log, _ := r.proxy.Log()
	if n := len(of(log, "remove")); n > 0 {
		return fmt.Errorf("%d Remove requests were sent for a lease already invalid", n)
	}
	return nil
}

var instanceChars = regexp.MustCompile(`^[A-Za-z0-9_-]{22,}$`)

// checkRequesters: every Alloc names the requester: the machine ID given, a PID,
// a start time and an instance of at least 128 random bits in base64url; each
// session has its own instance, kept across its retries and used by its Renews
// and Remove.
func checkRequesters(r *run) error {
	log, _ := r.proxy.Log()
	var instances []string
	current := ""
	for _, e := range log {
		req, _ := e.Request["requester"].(map[string]any)
		inst, _ := req["instance"].(string)
		if e.Route == "alloc" {
			if req["machineId"] != r.o.MachineID {
				return fmt.Errorf("Alloc sent machineId %v, want %q", req["machineId"], r.o.MachineID)
			}
			if pid, _ := req["pid"].(float64); pid < 1 {
				return fmt.Errorf("Alloc sent pid %v", req["pid"])
			}
			if _, ok := leasejson.Time(req["startedAt"]); !ok {
				return fmt.Errorf("Alloc sent startedAt %v", req["startedAt"])
			}
			if !instanceChars.MatchString(inst) {
				return fmt.Errorf("Alloc sent instance %q: want 22 or more base64url characters (128 random bits)", inst)
			}
			if inst != current {
				if slices.Contains(instances, inst) {
					return fmt.Errorf("instance %q is used by two sessions", inst)
				}
				instances = append(instances, inst)
				current = inst
			}
			continue
		}
		if (e.Route == "renew" || e.Route == "remove") && inst != current {
			return fmt.Errorf("%s sent instance %q, the session's Alloc %q", e.Route, inst, current)
		}
	}
	if len(instances) != r.opens {
		return fmt.Errorf("%d instances for %d sessions", len(instances), r.opens)
	}
	return nil
}

// checkReceipts: every Renew sends back the receipts of the last lease answer.
func checkReceipts(r *run) error {
	log, _ := r.proxy.Log()
	var held []string
	renews := 0
	for _, e := range log {
		if e.Route == "renew" {
			renews++
			var sent []string
			rs, _ := e.Request["receipts"].([]any)
			for _, v := range rs {
				s, _ := v.(string)
				sent = append(sent, s)
			}
			slices.Sort(sent)
			if len(held) == 0 {
				return fmt.Errorf("the registry handed out no receipt")
			}
			if !slices.Equal(sent, held) {
				return fmt.Errorf("Renew %d sent receipts %q, want %q", renews, sent, held)
			}
		}
		if e.Granted() {
			held = held[:0]
			ls, _ := e.Answer["leases"].([]any)
			for _, l := range ls {
				lm, _ := l.(map[string]any)
				if s, _ := lm["receipt"].(string); s != "" {
					held = append(held, s)
				}
			}
			slices.Sort(held)
		}
	}
	if renews < 2 {
		return fmt.Errorf("%d Renews seen, want at least 2", renews)
	}
	return nil
}
