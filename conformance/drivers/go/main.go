// Command go is the Go client's conformance driver: it wraps package client and
// speaks the driver line protocol (docs/clients.md, "Conformance") on stdin and
// stdout, one JSON object per line. Logs go to stderr.
//
// The client reports what the protocol calls events through its Logger, so the
// driver turns the client's own log records into events (eventLog). The break
// controls (negative controls) live here, never in package client: a wrapped
// transport that rewrites requests or answers (breakTransport), a clock whose
// monotonic face stands still or whose timers run late (breakClock), Config
// values, or the driver itself doing what the client must not (sending a Remove
// after the lease became invalid).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/snowflake"
)

// command is one line of the harness.
type command struct {
	ID        int      `json:"id"`
	Op        string   `json:"op"`
	Servers   []string `json:"servers"`
	APIKey    string   `json:"apiKey"`
	Count     int      `json:"count"`
	MachineID string   `json:"machineId"`
	Break     string   `json:"break"`
	N         int      `json:"n"`
}

// breaks are the negative controls this driver implements: the protocol's seven
// and the optional ones of the scenarios whose breakDrivers name "go".
var breaks = map[string]bool{
	"": true, "ignore-empty-renew": true, "ignore-count-mismatch": true, "ignore-expiry": true,
	"deadline-from-receive": true, "no-backoff": true, "remove-without-minted": true, "remove-when-invalid": true,
	"reuse-instance": true, "renew-late": true, "renew-retry-fast": true, "no-receipts": true,
	"accept-bad-layout": true, "single-node": true, "first-replica-only": true,
}

// out writes protocol lines; safe for concurrent use.
type out struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *out) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(b)
	o.w.WriteByte('\n')
	o.w.Flush()
}

func (o *out) fail(id int, code string, err error) {
	o.send(map[string]any{"id": id, "ev": "error", "code": code, "message": err.Error()})
}

// driver holds the one session the harness drives at a time.
type driver struct {
	out    *out
	stderr io.Writer

	sess  *client.Session
	log   *eventLog
	trans *breakTransport
	brk   string
	cfg   client.Config
}

func main() {
	d := &driver{out: &out{w: bufio.NewWriter(os.Stdout)}, stderr: os.Stderr}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			fmt.Fprintf(os.Stderr, "go driver: bad command %q: %v\n", in.Text(), err)
			continue
		}
		if c.Op == "quit" {
			d.out.send(map[string]any{"id": c.ID, "ev": "bye"})
			return
		}
		d.handle(c)
	}
}

func (d *driver) handle(c command) {
	switch c.Op {
	case "open":
		d.open(c)
	case "next":
		d.next(c)
	case "state":
		d.state(c)
	case "close":
		d.close(c)
	default:
		d.out.fail(c.ID, "UNKNOWN_OP", fmt.Errorf("unknown op %q", c.Op))
	}
}

func (d *driver) open(c command) {
	if !breaks[c.Break] {
		d.out.fail(c.ID, "BREAK_UNSUPPORTED", fmt.Errorf("the Go driver has no break %q", c.Break))
		return
	}
	r, err := client.ProcessRequester()
	if err != nil {
		d.out.fail(c.ID, "TRANSPORT", err)
		return
	}
	if c.MachineID != "" {
		r.MachineID = c.MachineID
	}
	d.brk = c.Break
	d.log = &eventLog{out: d.out, text: slog.NewTextHandler(d.stderr, &slog.HandlerOptions{Level: slog.LevelDebug})}
	d.trans = &breakTransport{brk: c.Break}
	cfg := client.Config{
		ServerURLs:    c.Servers,
		APIKey:        c.APIKey,
		Count:         c.Count,
		Requester:     r,
		Host:          "-",
		Logger:        slog.New(d.log),
		OnFatal:       func(error) {}, // reported as an "invalid" event by eventLog
		WrapTransport: d.trans.wrap,
		Clock:         newBreakClock(c.Break),
	}
	switch c.Break {
	case "first-replica-only":
		cfg.ServerURLs = c.Servers[:min(len(c.Servers), 1)]
	case "no-backoff":
		cfg.BackoffInitial, cfg.BackoffMax, cfg.BackoffJitter = time.Millisecond, time.Millisecond, -1
	case "renew-retry-fast":
		cfg.RenewLoopDuration, cfg.MinRetryInterval = time.Second, time.Second
	}
	s, err := client.New(cfg)
	if err != nil {
		d.out.fail(c.ID, "INVALID_CONFIG", err)
		return
	}
	d.sess, d.cfg = s, cfg
	d.log.sess = s
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.Open(ctx); err != nil {
		d.out.fail(c.ID, openCode(err), err)
		return
	}
	d.out.send(map[string]any{"id": c.ID, "ev": "opened", "nodeIds": d.nodeIDs(), "layout": layoutJSON(s.Layout())})
}

// openCode is the protocol's code for an error of Open.
func openCode(err error) string {
	var se *client.ServerError
	switch {
	case errors.As(err, &se) && se.Code != "":
		return string(se.Code)
	case errors.Is(err, client.ErrInvalidGrant) && (strings.Contains(err.Error(), "already past by the local clock") ||
		strings.Contains(err.Error(), "before the server's answer arrived")):
		return "NOT_ISSUING" // a grant over on arrival
	case errors.Is(err, client.ErrInvalidGrant):
		return "LAYOUT_REFUSED"
	case errors.Is(err, client.ErrLeaseLost):
		return "NOT_ISSUING"
	case errors.Is(err, client.ErrClosed):
		return "CLOSED"
	}
	return "TRANSPORT"
}

func layoutJSON(l snowflake.Layout) map[string]any {
	return map[string]any{"epoch": l.Epoch.UTC().Format("2006-01-02T15:04:05.000Z"), "timestampBits": l.TimestampBits,
		"nodeBits": l.NodeBits, "sequenceBits": l.SequenceBits}
}

func (d *driver) nodeIDs() []int64 {
	if d.sess == nil {
		return []int64{}
	}
	ids := make([]int64, d.sess.NumGenerators())
	for i := range ids {
		ids[i] = d.sess.Generator(i).NodeID()
	}
	return ids
}

func (d *driver) next(c command) {
	if d.sess == nil {
		d.out.fail(c.ID, "NOT_ISSUING", client.ErrNotOpen)
		return
	}
	if c.N < 1 || c.N > 100000 {
		d.out.fail(c.ID, "INVALID_REQUEST", fmt.Errorf("n %d is outside 1..100000", c.N))
		return
	}
	ids := make([]string, 0, c.N)
	for range c.N {
		var id int64
		var err error
		if d.brk == "single-node" {
			id, err = d.sess.Generator(0).NextID()
		} else {
			id, err = d.sess.NextID()
		}
		if err != nil {
			d.out.fail(c.ID, nextCode(err), err)
			return
		}
		ids = append(ids, fmt.Sprint(id))
	}
	d.out.send(map[string]any{"id": c.ID, "ev": "ids", "ids": ids})
}

// nextCode is the protocol's code for an error of issuing: NOT_ISSUING when the
// session refuses for want of a valid lease.
func nextCode(err error) string {
	for _, e := range []error{client.ErrNotOpen, client.ErrClosed, client.ErrLeaseLost, snowflake.ErrWindowEnded, snowflake.ErrBeforeWindow} {
		if errors.Is(err, e) {
			return "NOT_ISSUING"
		}
	}
	return "GENERATOR"
}

func (d *driver) state(c command) {
	st := map[string]any{"id": c.ID, "ev": "state", "issuing": false, "nodeIds": d.nodeIDs(), "renewals": 0, "leaseRemainingMs": 0}
	if d.sess != nil {
		st["issuing"] = d.sess.Check() == nil
		st["renewals"] = d.log.renewals()
		st["leaseRemainingMs"] = d.sess.TimeLeft().Milliseconds()
	}
	d.out.send(st)
}

func (d *driver) close(c command) {
	if d.sess == nil {
		d.out.send(map[string]any{"id": c.ID, "ev": "closed", "removed": false})
		return
	}
	before := d.trans.removes.Load()
	err := d.sess.Close()
	removed := d.trans.removes.Load() > before
	if !removed && d.brk == "remove-when-invalid" {
		removed = d.removeAnyway()
	}
	if err != nil {
		fmt.Fprintf(d.stderr, "go driver: close: %v\n", err)
	}
	d.out.send(map[string]any{"id": c.ID, "ev": "closed", "removed": removed})
}
