package harness

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/conformance/internal/leasejson"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/snowflake"
)

// ErrBreakUnsupported is Run's error when the driver answers open with the code
// BREAK_UNSUPPORTED: the run proves nothing, neither way.
var ErrBreakUnsupported = errors.New("the driver does not implement the break")

// Options say how to run one scenario.
type Options struct {
	Driver    string   // the driver's name: "go", "python", "typescript"
	Argv      []string // the command that starts the driver
	Dir       string   // the driver's working directory (the module's root)
	TempDir   string   // for the registry's store
	Break     string   // "" for the positive run, else the scenario's break
	MachineID string
}

// run is the state of one scenario run.
type run struct {
	sc    *Scenario
	o     Options
	reg   *LiveRegistry
	proxy *Proxy
	drv   *Driver

	opens   int // successful opens
	nodeIDs []int64
	layout  snowflake.Layout
	minted  map[int64]bool
	last    map[int64]int64 // the last ID per node ID, this session
	maxTS   time.Time       // the latest timestamp minted, this session
	closeAt time.Time
}

// Run runs sc once as o says. It returns nil when every step passed, else the
// first failure, with the driver's log.
func Run(sc *Scenario, o Options) (err error) {
	r := &run{sc: sc, o: o, minted: map[int64]bool{}}
	if r.reg, err = StartRegistry(o.TempDir, sc.Registry); err != nil {
		return err
	}
	defer func() { r.reg.Kill() }()
	if r.proxy, err = StartProxy(r.reg.URL, time.Duration(sc.SkewMs)*time.Millisecond); err != nil {
		return err
	}
	defer r.proxy.Close()
	if r.drv, err = StartDriver(o.Dir, o.Argv); err != nil {
		return fmt.Errorf("start the %s driver: %w", o.Driver, err)
	}
	defer r.drv.Stop()
	for i := range sc.Steps {
		if err := r.step(&sc.Steps[i]); err != nil {
			return fmt.Errorf("step %d (%s): %w\n--- proxy log:\n%s--- driver stderr (last 4 KiB):\n%s",
				i+1, sc.Steps[i].Do, err, r.proxyLog(), tail(r.drv.Stderr(), 4096))
		}
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (r *run) proxyLog() string {
	log, _ := r.proxy.Log()
	var s string
	t0 := time.Time{}
	for _, e := range log {
		if t0.IsZero() {
			t0 = e.Received
		}
		s += fmt.Sprintf("  +%6dms %-6s %-18s status %d lease %v\n", e.Received.Sub(t0).Milliseconds(), e.Route, e.Action, e.Status, e.LeaseTime())
	}
	return s
}

func within(d Duration, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return time.Duration(d)
}

func (r *run) step(st *Step) error {
	switch st.Do {
	case "open":
		return r.open(st)
	case "next":
		return r.next(st)
	case "state":
		m, err := r.drv.Call(map[string]any{"op": "state"}, 10*time.Second)
		if err != nil {
			return err
		}
		if st.Issuing != nil && m["issuing"] != *st.Issuing {
			return fmt.Errorf("state: issuing = %v, want %v (%v)", m["issuing"], *st.Issuing, m)
		}
	case "close":
		m, err := r.drv.Call(map[string]any{"op": "close"}, 30*time.Second)
		if err != nil {
			return err
		}
		r.closeAt = time.Now()
		if m.Str("ev") != "closed" {
			return fmt.Errorf("close answered %v", m)
		}
		if st.Removed != nil && m["removed"] != *st.Removed {
			return fmt.Errorf("close: removed = %v, want %v", m["removed"], *st.Removed)
		}
	case "fault":
		r.proxy.Fault(st.Route, st.Actions, st.Always)
	case "clear":
		r.proxy.Clear(st.Route)
	case "await":
		return r.await(st)
	case "event":
		match := func(m Message) bool {
			return m.Str("ev") == st.Ev && (st.Op == "" || m.Str("op") == st.Op) &&
				(len(st.Reason) == 0 || slices.Contains(st.Reason, m.Str("reason")))
		}
		if _, ok := r.drv.AwaitEvent(within(st.Within, 5*time.Second), match); !ok {
			return fmt.Errorf("no event %q (op %q, reason %v) within %v; events: %v", st.Ev, st.Op, st.Reason,
				within(st.Within, 5*time.Second), r.drv.Events())
		}
	case "sleep":
		time.Sleep(time.Duration(st.Ms) * time.Millisecond)
	case "deadline":
		d, ok := r.deadline()
		if !ok {
			return fmt.Errorf("no lease was granted")
		}
		time.Sleep(time.Until(d.Add(time.Duration(st.Ms) * time.Millisecond)))
	case "kill":
		r.reg.Kill()
		r.proxy.SetBackend("")
	case "restart":
		if err := r.reg.Restart(); err != nil {
			return err
		}
		r.proxy.SetBackend(r.reg.URL)
	case "check":
		return checks[st.Check](r)
	}
	return nil
}

// expected reports whether code is one of want's codes ("A|B"); false for no want.
func expected(want, code string) bool {
	return want != "" && slices.Contains(strings.Split(want, "|"), code)
}

// deadURL is the URL of a loopback port nobody listens on: a replica that is down.
func deadURL() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return "http://" + ln.Addr().String(), nil
}

// deadline is the latest lease deadline the proxy has handed out: the arrival of
// a granting request plus the lease its answer grants. The client sent the
// request earlier, so its own deadline is no later.
func (r *run) deadline() (time.Time, bool) {
	log, _ := r.proxy.Log()
	var d time.Time
	for _, e := range log {
		if e.Granted() {
			if t := e.Received.Add(e.LeaseTime()); t.After(d) {
				d = t
			}
		}
	}
	return d, !d.IsZero()
}

func (r *run) open(st *Step) error {
	count := max(r.sc.Count, 1)
	brk := r.o.Break
	servers := []string{r.proxy.URL}
	if st.DeadReplicaFirst {
		dead, err := deadURL()
		if err != nil {
			return err
		}
		servers = []string{dead, r.proxy.URL}
	}
	m, err := r.drv.Call(map[string]any{"op": "open", "servers": servers, "apiKey": r.reg.APIKey,
		"count": count, "machineId": r.o.MachineID, "leaseHint": nil, "break": brk}, within(st.Within, 90*time.Second))
	if err != nil {
		return err
	}
	if m.Str("ev") == "error" {
		if m.Str("code") == "BREAK_UNSUPPORTED" {
			return fmt.Errorf("%w: %s", ErrBreakUnsupported, m.Str("message"))
		}
		if expected(st.Expect, m.Str("code")) {
			return nil
		}
		return fmt.Errorf("open: error %s: %s (want %q)", m.Str("code"), m.Str("message"), st.Expect)
	}
	if st.Expect != "" {
		return fmt.Errorf("open succeeded (%v), want error %s", m, st.Expect)
	}
	r.opens++
	r.nodeIDs = r.nodeIDs[:0]
	ids, _ := m["nodeIds"].([]any)
	for _, v := range ids {
		f, _ := v.(float64)
		r.nodeIDs = append(r.nodeIDs, int64(f))
	}
	if len(r.nodeIDs) != count {
		return fmt.Errorf("open: %d node IDs %v, want %d", len(r.nodeIDs), ids, count)
	}
	lm, _ := m["layout"].(map[string]any)
	epoch, err := wire.ParseTime(fmt.Sprint(lm["epoch"]))
	if err != nil {
		return fmt.Errorf("open: layout epoch: %v", err)
	}
	num := func(k string) int { f, _ := lm[k].(float64); return int(f) }
	r.layout = snowflake.Layout{Epoch: epoch, TimestampBits: num("timestampBits"), NodeBits: num("nodeBits"), SequenceBits: num("sequenceBits")}
	if err := r.layout.Validate(); err != nil {
		return fmt.Errorf("open: the driver reports layout %v: %v", lm, err)
	}
	r.last, r.maxTS = map[int64]int64{}, time.Time{}
	return nil
}

// next mints and checks the IDs: decimal strings, unique in the run, of the
// session's node IDs, ascending per node ID, inside a lease the proxy saw granted.
func (r *run) next(st *Step) error {
	n := max(st.N, 1)
	m, err := r.drv.Call(map[string]any{"op": "next", "n": n}, 30*time.Second)
	if err != nil {
		return err
	}
	if m.Str("ev") == "error" {
		if expected(st.Expect, m.Str("code")) {
			return nil
		}
		return fmt.Errorf("next %d: error %s: %s", n, m.Str("code"), m.Str("message"))
	}
	if st.Expect != "" {
		d, _ := r.deadline()
		return fmt.Errorf("next %d: minted IDs, want error %s (the lease deadline the proxy saw: %s from now)",
			n, st.Expect, time.Until(d).Round(time.Millisecond))
	}
	raw, _ := m["ids"].([]any)
	if len(raw) != n {
		return fmt.Errorf("next %d: %d IDs", n, len(raw))
	}
	windows := r.windows()
	perNode := map[int64]int{}
	for _, v := range raw {
		s, _ := v.(string)
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 || strconv.FormatInt(id, 10) != s {
			return fmt.Errorf("next: %q is not a positive decimal int64", s)
		}
		if r.minted[id] {
			return fmt.Errorf("next: ID %d minted twice", id)
		}
		r.minted[id] = true
		p, _ := r.layout.Decode(id)
		if !slices.Contains(r.nodeIDs, p.Node) {
			return fmt.Errorf("next: ID %d has node ID %d, the session holds %v", id, p.Node, r.nodeIDs)
		}
		if last, ok := r.last[p.Node]; ok && id <= last {
			return fmt.Errorf("next: ID %d of node ID %d after %d: not ascending", id, p.Node, last)
		}
		r.last[p.Node] = id
		w, ok := windows[p.Node]
		if !ok || p.Time.Before(w[0].Truncate(time.Millisecond)) || p.Time.After(w[1]) {
			return fmt.Errorf("next: ID %d has timestamp %s, outside every window granted for node ID %d (%v)",
				id, wire.FormatTime(p.Time), p.Node, w)
		}
		if p.Time.After(r.maxTS) {
			r.maxTS = p.Time
		}
		perNode[p.Node]++
	}
	if st.RoundRobin && len(r.nodeIDs) > 1 {
		for _, node := range r.nodeIDs {
			// Per ID or in batches split over the node IDs (as the Go client's NextIDs):
			// either way every node ID takes a fair part of a large request.
			if c := perNode[node]; c < n/(2*len(r.nodeIDs)) {
				return fmt.Errorf("next %d: node ID %d minted %d of them, not round robin over %v (%v)", n, node, c, r.nodeIDs, perNode)
			}
		}
	}
	return nil
}

// windows are, per node ID, the earliest notBefore and the latest expiresAt of
// the leases the proxy saw granted.
func (r *run) windows() map[int64][2]time.Time {
	log, _ := r.proxy.Log()
	out := map[int64][2]time.Time{}
	for _, e := range log {
		if !e.Granted() {
			continue
		}
		ls, _ := e.Answer["leases"].([]any)
		for _, l := range ls {
			lm, _ := l.(map[string]any)
			f, _ := lm["nodeId"].(float64)
			nb, ok1 := leasejson.Time(lm["notBefore"])
			ex, ok2 := leasejson.Time(lm["expiresAt"])
			if !ok1 || !ok2 {
				continue
			}
			w, seen := out[int64(f)]
			if !seen || nb.Before(w[0]) {
				w[0] = nb
			}
			if ex.After(w[1]) {
				w[1] = ex
			}
			out[int64(f)] = w
		}
	}
	return out
}

func (r *run) await(st *Step) error {
	end := time.Now().Add(within(st.Within, 10*time.Second))
	for {
		log, changed := r.proxy.Log()
		n := 0
		for _, e := range log {
			if e.Route == st.Route {
				n++
			}
		}
		switch {
		case st.Faulted && r.proxy.Pending(st.Route) == 0 && n > 0:
			// The last queued fault has been taken; wait for its exchange to end.
			if last := lastOf(log, st.Route); last != nil && last.Action != "pass" {
				return nil
			}
		case !st.Faulted && n >= st.Count:
			return nil
		}
		select {
		case <-changed:
		case <-time.After(time.Until(end)):
			return fmt.Errorf("route %s: %d requests answered within %v, want %d (faulted %v, %d faults pending)",
				st.Route, n, within(st.Within, 10*time.Second), st.Count, st.Faulted, r.proxy.Pending(st.Route))
		}
	}
}

func lastOf(log []*Exchange, route string) *Exchange {
	for _, e := range slices.Backward(log) {
		if e.Route == route {
			return e
		}
	}
	return nil
}
