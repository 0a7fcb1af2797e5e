package storetest

import (
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
)

// The cases of LockStore.Locks: every lock that has not lapsed at the store's
// now, sorted by name.

// wantLocks checks that Locks lists exactly want, in that order.
func (e *env) wantLocks(what string, want ...idkeeper.Lock) {
	e.t.Helper()
	got, err := e.s.Locks(e.ctx)
	e.must(err, "Locks")
	if got == nil {
		e.t.Fatalf("%s: Locks = nil, want an empty or full slice", what)
	}
	if len(got) != len(want) {
		e.t.Fatalf("%s: Locks = %+v, want %+v", what, got, want)
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Owner != w.Owner || !g.LockedAt.Equal(w.LockedAt) || !g.Until.Equal(w.Until) {
			e.t.Fatalf("%s: Locks[%d] = {%s %s %s %s}, want {%s %s %s %s}", what, i, g.Name, g.Owner, fmtTime(g.LockedAt),
				fmtTime(g.Until), w.Name, w.Owner, fmtTime(w.LockedAt), fmtTime(w.Until))
		}
	}
}

// take takes name for owner, which must succeed, and returns the lock.
func (e *env) take(name, owner string, atMostFor time.Duration) idkeeper.Lock {
	e.t.Helper()
	l, ok := e.tryLock(name, owner, atMostFor)
	if !ok {
		e.t.Fatalf("%s could not take lock %q", owner, name)
	}
	return l
}

func testLocksNone(t *testing.T, open Factory) {
	e := openEnv(t, open)
	e.wantLocks("a new store")
	e.take("cleanup", "A", time.Minute)
	if !e.unlock("cleanup", "A", 0) {
		t.Fatal("A's Unlock reported held = false")
	}
	e.wantLocks("after an Unlock without atLeastFor")
}

func testLocksHeld(t *testing.T, open Factory) {
	e := openEnv(t, open)
	l := e.take("cleanup", "replica-a/ä 1", time.Minute)
	e.wantLocks("one held", idkeeper.Lock{Name: "cleanup", Owner: "replica-a/ä 1", LockedAt: e.now(), Until: e.now().Add(time.Minute)})
	// Another owner's attempt changes nothing; more locks come sorted by name.
	e.wantLocked("cleanup", "B")
	e.advance(time.Second)
	m := e.take("api-key-expiry:0123", "B", 24*time.Hour)
	z := e.take("audit-retention", "C,with,commas", time.Hour)
	e.wantLocks("three held", m, z, l)
}

func testLocksLapsed(t *testing.T, open Factory) {
	e := openEnv(t, open)
	short := e.take("short", "A", time.Second)
	long := e.take("long", "A", time.Minute)
	e.wantLocks("both held", long, short)
	e.clock.Set(short.Until.Add(-ms))
	e.wantLocks("a millisecond before the short one lapses", long, short)
	e.clock.Set(short.Until)
	e.wantLocks("the short one lapsed at its Until", long)
	e.clock.Set(long.Until.Add(time.Hour))
	e.wantLocks("both lapsed")
	// A lapsed lock taken again is listed with its new holder.
	again := e.take("short", "B", time.Minute)
	e.wantLocks("taken again", again)
}

func testLocksAtLeastFor(t *testing.T, open Factory) {
	e := openEnv(t, open)
	l := e.take("cleanup", "A", 10*time.Minute)
	e.advance(time.Second)
	if !e.unlock("cleanup", "A", 30*time.Second) {
		t.Fatal("A's Unlock reported held = false")
	}
	kept := idkeeper.Lock{Name: "cleanup", Owner: "A", LockedAt: l.LockedAt, Until: l.LockedAt.Add(30 * time.Second)}
	e.wantLocks("after Unlock, kept until LockedAt + atLeastFor", kept)
	e.clock.Set(kept.Until.Add(-ms))
	e.wantLocks("a millisecond before atLeastFor ends", kept)
	e.clock.Set(kept.Until)
	e.wantLocks("atLeastFor over")
}
