// Package fakeclock is a settable clock for tests: time moves only when the test
// says so, so lease tests never sleep.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a fake wall clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock that reads start until moved.
func New(start time.Time) *Clock { return &Clock{now: start.UTC()} }

// Now returns the clock's time. Its method value satisfies idkeeper.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d (backwards when d is negative) and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t.UTC()
}
