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
			text, refusal := risk.judge(safe, why, accept)
			if refusal != nil {
				text = "UNSAFE since " + time.Now().UTC().Format(time.RFC3339) + ": " + operatorWords(why) + ": " + risk.event +
					" would lose acknowledged grants (" + risk.fix + ")"
			}
			old := w.String()
			if sameDurability(old, text) {
				continue
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

// sameDurability reports whether the texts say the same: an UNSAFE text keeps
// the time it was first seen.
func sameDurability(old, now string) bool {
	const unsafe = "UNSAFE since "
	if len(old) > len(unsafe) && len(now) > len(unsafe) && old[:len(unsafe)] == unsafe && now[:len(unsafe)] == unsafe {
		return afterStamp(old) == afterStamp(now)
	}
	return old == now
}

// afterStamp is an UNSAFE text after its time.
func afterStamp(s string) string {
	const skip = len("UNSAFE since 2006-01-02T15:04:05Z: ")
	if len(s) < skip {
		return s
	}
	return s[skip:]
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
