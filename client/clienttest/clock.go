// Package clienttest helps test programs that use the client package: a fake Clock
// whose time moves only when the test says so, so that lease lifecycles of hours
// run in microseconds.
package clienttest

import (
	"slices"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper/client"
)

// Clock is a fake client.Clock, safe for concurrent use. Its wall clock reads
// start + Mono() + the sum of the steps made with StepWall; Mono starts at zero.
//
// Timers fire only inside Advance, in the goroutine that called it, in the order of
// their due time, with the clock set to that due time while each callback runs.
// A timer created with a delay ≤ 0 fires at the next Advance (Advance(0) will do).
// No lock is held while a callback runs: a callback may read the clock, create
// timers (due ones fire within the same Advance), and even call Advance itself.
type Clock struct {
	mu     sync.Mutex
	start  time.Time
	mono   time.Duration
	offset time.Duration // wall − (start + mono)
	timers []*timer
	seq    uint64
	change chan struct{} // closed and replaced whenever timers change
}

var _ client.Clock = (*Clock)(nil)

type timer struct {
	c   *Clock
	due time.Duration
	seq uint64 // creation order, to fire timers due at the same time in order
	f   func()
}

// NewClock returns a clock whose wall time is start and whose Mono is zero.
func NewClock(start time.Time) *Clock {
	return &Clock{start: start.UTC(), change: make(chan struct{})}
}

// Now returns the wall clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start.Add(c.mono + c.offset)
}

// Mono returns the monotonic reading: the sum of every Advance and Jump.
func (c *Clock) Mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// AfterFunc schedules f to run when Mono reaches Mono()+d, from within Advance.
func (c *Clock) AfterFunc(d time.Duration, f func()) client.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &timer{c: c, due: c.mono + max(d, 0), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	c.changed()
	return t
}

// Stop cancels the timer; false when it has fired or was stopped already.
func (t *timer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.timers, t)
	if i < 0 {
		return false
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	c.changed()
	return true
}

func (c *Clock) changed() {
	close(c.change)
	c.change = make(chan struct{})
}

// Advance moves the wall and the monotonic clock forward by d (d < 0 panics) and
// runs every timer that falls due on the way, returning once they have all returned.
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		panic("clienttest: Advance with a negative duration; use StepWall to move the wall clock back")
	}
	c.mu.Lock()
	target := c.mono + d
	c.mu.Unlock()
	for {
		c.mu.Lock()
		t := c.nextDue(target)
		if t == nil {
			c.mono = max(c.mono, target)
			c.mu.Unlock()
			return
		}
		c.mono = max(c.mono, t.due)
		c.timers = slices.DeleteFunc(c.timers, func(x *timer) bool { return x == t })
		c.changed()
		c.mu.Unlock()
		t.f()
	}
}

func (c *Clock) nextDue(target time.Duration) *timer {
	var next *timer
	for _, t := range c.timers {
		if t.due <= target && (next == nil || t.due < next.due || t.due == next.due && t.seq < next.seq) {
			next = t
		}
	}
	return next
}

// Jump moves the wall and the monotonic clock forward by d without running any
// timer, as if the process had been starved of CPU: timers that fell due fire at the
// next Advance.
func (c *Clock) Jump(d time.Duration) {
	if d < 0 {
		panic("clienttest: Jump with a negative duration")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mono += d
}

// StepWall moves only the wall clock, by d (either way), as an NTP step or a
// mis-set clock would. Mono and timers are not affected.
func (c *Clock) StepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// Pending returns, sorted, how long until each pending timer is due (≤ 0 when
// already due).
func (c *Clock) Pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	ds := make([]time.Duration, len(c.timers))
	for i, t := range c.timers {
		ds[i] = t.due - c.mono
	}
	slices.Sort(ds)
	return ds
}

// WaitPending blocks until at least n timers are pending, or until timeout of real
// time has passed; it reports whether n were reached. Tests use it to wait for a
// goroutine to arm its next timer.
func (c *Clock) WaitPending(n int, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok, ch := len(c.timers) >= n, c.change
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}
