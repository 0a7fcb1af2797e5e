package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idkeeper/idkeeper"
)

// DurabilityRecheck is how often a serving server asks its store again what an
// acknowledged write survives: a synchronous standby of PostgreSQL that stops
// streaming, a Redis whose appendfsync an operator changed. /readyz and the admin
// store page show the latest answer; a store that cannot be asked keeps the last.
var DurabilityRecheck = time.Minute

// durabilityCheckTimeout bounds one recheck.
const durabilityCheckTimeout = 10 * time.Second

// durabilityWatch holds the durability text of a serving server and keeps it
// fresh (watch).
type durabilityWatch struct {
	text atomic.Pointer[string]
	stop context.CancelFunc
	done sync.WaitGroup
}

// newDurabilityWatch holds text, the durability decided at start.
func newDurabilityWatch(text string) *durabilityWatch {
	w := &durabilityWatch{stop: func() {}}
	w.text.Store(&text)
	return w
}

// String is the durability now.
func (w *durabilityWatch) String() string { return *w.text.Load() }

// watch asks s every DurabilityRecheck until Close, logging each change: a store
// that is no longer safe, and that the operator did not accept, is logged as an
// error and shown as "UNSAFE since …" (the server goes on serving: a loss of
// writes is detected as a reset, DESIGN §7, and refusing grants would not bring
// them back).
func (w *durabilityWatch) watch(s idkeeper.Store, accept bool, log *slog.Logger) {
	d, ok := s.(Durable)
	if !ok {
		return
	}
	risk := riskOf(s)
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		// last is what the store said at the previous check, without the time an
		// UNSAFE text keeps from the check that first saw it.
		last := w.String()
		t := time.NewTicker(DurabilityRecheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, ccancel := context.WithTimeout(ctx, durabilityCheckTimeout)
			safe, why, err := d.Durability(cctx)
			ccancel()
			if err != nil {
				if ctx.Err() == nil {
					log.Debug("cannot ask the store what it keeps; the durability shown stays the last", "err", err)
				}
				continue
			}
			said, refusal := risk.judge(safe, why, accept)
			if refusal != nil {
				said = operatorWords(why) + ": " + risk.event + " would lose acknowledged grants (" + risk.fix + ")"
			}
			if said == last {
				continue
			}
			last = said
			text, old := said, w.String()
			if refusal != nil {
				text = "UNSAFE since " + time.Now().UTC().Format(time.RFC3339) + ": " + said
			}
			w.text.Store(&text)
			if refusal != nil {
				log.Error("the store may now lose acknowledged writes: "+risk.event+" would be a reset that quarantines "+
					"the pool for lease + grace", "durability", operatorWords(why), "was", old)
			} else {
				log.Warn("the store's durability changed", "durability", text, "was", old)
			}
		}
	}()
}

// Close stops the watch and waits for it.
func (w *durabilityWatch) Close() error {
	if w == nil {
		return nil
	}
	w.stop()
	w.done.Wait()
	return nil
}
