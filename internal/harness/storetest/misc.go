package storetest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

func (e *env) tryLock(name, owner string, atMostFor time.Duration) (idkeeper.Lock, bool) {
	e.t.Helper()
	l, ok, err := e.s.TryLock(e.ctx, name, owner, atMostFor)
	e.must(err, fmt.Sprintf("TryLock(%s, %s)", name, owner))
	return l, ok
}

func (e *env) unlock(name, owner string, atLeastFor time.Duration) bool {
	e.t.Helper()
	held, err := e.s.Unlock(e.ctx, name, owner, atLeastFor)
	e.must(err, fmt.Sprintf("Unlock(%s, %s)", name, owner))
	return held
}

func (e *env) wantLocked(name, owner string) {
	e.t.Helper()
	if _, ok := e.tryLock(name, owner, time.Minute); ok {
		e.t.Fatalf("%s took lock %q, which should be held", owner, name)
	}
}

func (e *env) wantFree(name, owner string, atMostFor time.Duration) {
	e.t.Helper()
	now := e.now()
	l, ok := e.tryLock(name, owner, atMostFor)
	if !ok {
		e.t.Fatalf("%s could not take lock %q, which should be free", owner, name)
	}
	if l.Name != name || l.Owner != owner || !l.LockedAt.Equal(now) || !l.Until.Equal(now.Add(atMostFor)) {
		e.t.Fatalf("TryLock = %+v, want {%s %s %s %s}", l, name, owner, fmtTime(now), fmtTime(now.Add(atMostFor)))
	}
}

func testLockExclusive(t *testing.T, open Factory) {
	e := openEnv(t, open)
	e.wantFree("cleanup", "A", time.Minute)
	e.wantLocked("cleanup", "B")
	e.wantLocked("cleanup", "A") // the same owner, from an earlier run
	e.wantFree("backup", "B", time.Minute)
	if e.unlock("cleanup", "B", 0) {
		t.Fatalf("B unlocked A's lock")
	}
	e.wantLocked("cleanup", "C")
	if !e.unlock("cleanup", "A", 0) {
		t.Fatalf("A's Unlock reported held = false")
	}
	e.wantFree("cleanup", "B", time.Minute)
	if e.unlock("never-taken", "A", 0) {
		t.Fatalf("Unlock of a lock never taken reported held = true")
	}

	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		won int
	)
	for i := range 10 {
		wg.Go(func() {
			_, ok, err := e.s.TryLock(e.ctx, "race", fmt.Sprintf("owner-%d", i), time.Minute)
			if err != nil {
				t.Errorf("TryLock: %v", err)
			}
			if ok {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d concurrent TryLock calls won, want 1", won)
	}
}

func testLockAtMostFor(t *testing.T, open Factory) {
	e := openEnv(t, open)
	t0 := e.now()
	e.wantFree("job", "A", time.Minute)
	e.clock.Set(t0.Add(time.Minute - ms))
	e.wantLocked("job", "B")
	e.clock.Set(t0.Add(time.Minute)) // Until: the lock lapses
	e.wantFree("job", "B", time.Minute)
	if e.unlock("job", "A", 0) {
		t.Fatalf("A unlocked a lock that lapsed and B took")
	}
	e.wantLocked("job", "C")

	// A lapsed lock is no longer held, even when nobody took it since.
	e.wantFree("job2", "A", time.Minute)
	e.advance(time.Minute)
	if e.unlock("job2", "A", 0) {
		t.Fatalf("Unlock of a lapsed lock reported held = true")
	}
	e.wantFree("job2", "B", time.Minute)
}

func testLockAtLeastFor(t *testing.T, open Factory) {
	e := openEnv(t, open)
	t0 := e.now()
	e.wantFree("job", "A", 10*time.Minute)
	e.advance(time.Second)
	if !e.unlock("job", "A", 10*time.Second) {
		t.Fatalf("A's Unlock reported held = false")
	}
	e.wantLocked("job", "B")
	e.clock.Set(t0.Add(10*time.Second - ms))
	e.wantLocked("job", "B")
	e.clock.Set(t0.Add(10 * time.Second))
	e.wantFree("job", "B", time.Minute)

	t1 := e.now()
	e.wantFree("job2", "A", 10*time.Minute)
	e.clock.Set(t1.Add(10 * time.Second))
	if !e.unlock("job2", "A", 10*time.Second) {
		t.Fatalf("A's Unlock reported held = false")
	}
	e.wantFree("job2", "B", time.Minute)
}

func testAPIKeys(t *testing.T, open Factory) {
	e := openEnv(t, open)
	if ks, err := e.s.APIKeys(e.ctx); err != nil || len(ks) != 0 {
		t.Fatalf("APIKeys on an empty store = %v, %v", ks, err)
	}
	hash := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	now := e.now()
	kb := idkeeper.APIKey{ID: "kb", Hash: hash("b"), Description: "gateway", CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
	ka := idkeeper.APIKey{ID: "ka", Hash: hash("a"), Description: "server ä", CreatedAt: now.Add(-time.Hour)}
	e.must(e.s.CreateAPIKey(e.ctx, kb), "CreateAPIKey(kb)")
	e.must(e.s.CreateAPIKey(e.ctx, ka), "CreateAPIKey(ka)")
	dup := ka
	dup.Description = "impostor"
	if err := e.s.CreateAPIKey(e.ctx, dup); !errors.Is(err, idkeeper.ErrConflict) {
		t.Fatalf("CreateAPIKey of an existing ID: err = %v, want ErrConflict", err)
	}
	got, err := e.s.APIKey(e.ctx, "ka")
	e.must(err, "APIKey(ka)")
	wantKey(t, got, ka)
	ks, err := e.s.APIKeys(e.ctx)
	e.must(err, "APIKeys")
	if len(ks) != 2 {
		t.Fatalf("APIKeys = %d keys, want 2", len(ks))
	}
	wantKey(t, ks[0], ka)
	wantKey(t, ks[1], kb)
	if _, err := e.s.APIKey(e.ctx, "nope"); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("APIKey(nope): err = %v, want ErrNotFound", err)
	}
}

// testAPIKeyRevokeAndTouch: a revoked key stays listed with its RevokedAt, a second
// revoke keeps the first time; LastUsedAt only rises; both fields, the quota and
// the bootstrap mark round trip.
func testAPIKeyRevokeTouch(t *testing.T, open Factory) {
	e := openEnv(t, open)
	hash := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	now := e.now()
	k := idkeeper.APIKey{ID: "kq", Hash: hash("q"), Description: "quota", CreatedAt: now, MaxNodes: 17, Bootstrap: true}
	e.must(e.s.CreateAPIKey(e.ctx, k), "CreateAPIKey")
	got, err := e.s.APIKey(e.ctx, "kq")
	e.must(err, "APIKey")
	wantKey(t, got, k)

	t1 := now.Add(time.Minute + 1500*time.Microsecond)
	e.must(e.s.TouchAPIKey(e.ctx, "kq", t1), "TouchAPIKey")
	e.must(e.s.TouchAPIKey(e.ctx, "kq", now), "TouchAPIKey earlier")
	e.must(e.s.TouchAPIKey(e.ctx, "missing", t1), "TouchAPIKey of a missing key")
	k.LastUsedAt = protocol.Millis(t1)
	got, err = e.s.APIKey(e.ctx, "kq")
	e.must(err, "APIKey")
	wantKey(t, got, k)

	t2 := now.Add(2 * time.Hour)
	e.must(e.s.RevokeAPIKey(e.ctx, "kq", t2), "RevokeAPIKey")
	e.must(e.s.RevokeAPIKey(e.ctx, "kq", t2.Add(time.Hour)), "RevokeAPIKey again")
	if err := e.s.RevokeAPIKey(e.ctx, "nope", t2); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("RevokeAPIKey(nope): err = %v, want ErrNotFound", err)
	}
	k.RevokedAt = t2
	ks, err := e.s.APIKeys(e.ctx)
	e.must(err, "APIKeys")
	if len(ks) != 1 || !ks[0].Revoked() {
		t.Fatalf("APIKeys after revoke = %+v, want the one revoked key", ks)
	}
	wantKey(t, ks[0], k)
}

func wantKey(t *testing.T, got, want idkeeper.APIKey) {
	t.Helper()
	if got.ID != want.ID || !bytes.Equal(got.Hash, want.Hash) || got.Description != want.Description ||
		got.CreatedBy != want.CreatedBy || !got.CreatedAt.Equal(want.CreatedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) ||
		got.ExpiresAt.IsZero() != want.ExpiresAt.IsZero() || got.MaxNodes != want.MaxNodes ||
		got.Bootstrap != want.Bootstrap || got.Admin != want.Admin || !got.RevokedAt.Equal(want.RevokedAt) ||
		got.RevokedAt.IsZero() != want.RevokedAt.IsZero() || !got.LastUsedAt.Equal(want.LastUsedAt) ||
		got.LastUsedAt.IsZero() != want.LastUsedAt.IsZero() {
		t.Fatalf("API key = %+v, want %+v", got, want)
	}
}

func testSkew(t *testing.T, open Factory) {
	e := openEnv(t, open)
	t0 := e.now()
	// PIDs 10 and 9: by key, "10/…" sorts before "9/…".
	r1, r2 := req(1), req(2)
	r1.PID, r2.PID = 10, 9
	o1 := idkeeper.SkewObservation{Requester: r1, Skew: 1500 * ms, Threshold: 10 * time.Minute,
		Level: idkeeper.SkewOK, ObservedAt: t0, RemoteIP: "10.0.0.1", Operation: "alloc"}
	o2 := idkeeper.SkewObservation{Requester: r2, Skew: -7 * time.Minute, Threshold: 10 * time.Minute,
		Level: idkeeper.SkewWarn, ObservedAt: t0, RemoteIP: "2001:db8::1", Operation: "renew"}
	e.wantSkews()
	e.must(e.s.RecordSkew(e.ctx, o2, 30*time.Minute), "RecordSkew(o2)")
	e.must(e.s.RecordSkew(e.ctx, o1, time.Hour), "RecordSkew(o1)")
	e.wantSkews(o1, o2)

	e.advance(10 * time.Minute)
	o1b := o1
	o1b.Skew, o1b.Level, o1b.ObservedAt, o1b.Operation = 6*time.Minute, idkeeper.SkewWarn, e.now(), "renew"
	e.must(e.s.RecordSkew(e.ctx, o1b, time.Hour), "RecordSkew(o1 again)")
	e.wantSkews(o1b, o2)

	e.clock.Set(t0.Add(30*time.Minute - ms))
	e.wantSkews(o1b, o2)
	e.clock.Set(t0.Add(30 * time.Minute))
	e.wantSkews(o1b)
	e.clock.Set(t0.Add(time.Hour)) // the first record of r1 would have lapsed here
	e.wantSkews(o1b)
	e.clock.Set(t0.Add(70 * time.Minute))
	e.wantSkews()
}

func (e *env) wantSkews(want ...idkeeper.SkewObservation) {
	e.t.Helper()
	got, err := e.s.SkewObservations(e.ctx)
	e.must(err, "SkewObservations")
	if len(got) != len(want) {
		e.t.Fatalf("SkewObservations = %d, want %d: %+v", len(got), len(want), got)
	}
	for i, g := range got {
		w := want[i]
		if g.Requester.Key() != w.Requester.Key() || !g.Requester.StartedAt.Equal(w.Requester.StartedAt) ||
			g.Skew != w.Skew || g.Threshold != w.Threshold || g.Level != w.Level ||
			!g.ObservedAt.Equal(w.ObservedAt) || g.RemoteIP != w.RemoteIP || g.Operation != w.Operation {
			e.t.Fatalf("SkewObservations[%d] = %+v, want %+v", i, g, w)
		}
	}
}
