package clienttest

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestAdvanceFiresInOrderAtTheirTime(t *testing.T) {
	c := NewClock(t0)
	var fired []string
	at := func(name string) func() {
		return func() { fired = append(fired, name+"@"+c.Mono().String()) }
	}
	c.AfterFunc(3*time.Second, at("c"))
	c.AfterFunc(time.Second, at("a"))
	c.AfterFunc(time.Second, at("b")) // same due time: creation order
	stopped := c.AfterFunc(2*time.Second, at("x"))
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop should succeed once")
	}
	c.AfterFunc(time.Second, func() { // a callback that arms a timer due within this Advance
		c.AfterFunc(500*time.Millisecond, at("chained"))
	})
	c.Advance(2 * time.Second)
	want := []string{"a@1s", "b@1s", "chained@1.5s"}
	if !slices.Equal(fired, want) {
		t.Fatalf("fired %v, want %v", fired, want)
	}
	if got := c.Pending(); !slices.Equal(got, []time.Duration{time.Second}) {
		t.Fatalf("pending %v, want [1s]", got)
	}
	if !c.Now().Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("Now = %v", c.Now())
	}
}

func TestJumpAndStepWall(t *testing.T) {
	c := NewClock(t0)
	fired := false
	c.AfterFunc(time.Second, func() { fired = true })
	c.Jump(time.Minute)
	if fired || c.Mono() != time.Minute {
		t.Fatalf("Jump fired a timer or did not move Mono (%v)", c.Mono())
	}
	c.StepWall(-time.Hour)
	if c.Mono() != time.Minute || !c.Now().Equal(t0.Add(time.Minute-time.Hour)) {
		t.Fatalf("StepWall: Mono %v, Now %v", c.Mono(), c.Now())
	}
	c.Advance(0)
	if !fired {
		t.Fatal("the overdue timer did not fire at the next Advance")
	}
}

func TestWaitPending(t *testing.T) {
	c := NewClock(t0)
	if c.WaitPending(1, 10*time.Millisecond) {
		t.Fatal("WaitPending reported a timer that does not exist")
	}
	go func() {
		time.Sleep(5 * time.Millisecond)
		c.AfterFunc(time.Second, func() {})
	}()
	if !c.WaitPending(1, 5*time.Second) {
		t.Fatal("WaitPending missed the timer")
	}
}
