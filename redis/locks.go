package redis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
)

// TryLock takes the job lock name for owner until now+atMostFor, timed by the
// store's clock, as idkeeper.LockStore says. A lock is free once now reaches its
// Until. When ok is false, l is the lock that is held.
func (s *Store) TryLock(ctx context.Context, name, owner string, atMostFor time.Duration) (idkeeper.Lock, bool, error) {
	v, err := s.run(ctx, scriptTryLock, []string{s.keys.locks}, false, s.nowArg(), name, owner, atMostFor.Milliseconds())
	if err != nil {
		return idkeeper.Lock{}, false, wrap("trylock", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return idkeeper.Lock{}, false, fmt.Errorf("redis: trylock: unexpected reply %v", v)
	}
	got, _ := a[0].(int64)
	at, _ := a[1].(int64)
	until, _ := a[2].(int64)
	holder, _ := a[3].(string)
	return idkeeper.Lock{Name: name, Owner: holder, LockedAt: fromMs(at), Until: fromMs(until)}, got == 1, nil
}

// Unlock ends owner's hold on name, as idkeeper.LockStore says. A lock whose Until
// has passed is no longer held: Unlock leaves it alone and reports false.
func (s *Store) Unlock(ctx context.Context, name, owner string, atLeastFor time.Duration) (bool, error) {
	v, err := s.run(ctx, scriptUnlock, []string{s.keys.locks}, false, s.nowArg(), name, owner, atLeastFor.Milliseconds())
	if err != nil {
		return false, wrap("unlock", err)
	}
	n, ok := v.(int64)
	if !ok {
		return false, fmt.Errorf("redis: unlock: unexpected reply %v", v)
	}
	return n == 1, nil
}

// Locks returns every job lock that has not lapsed at the store's now, sorted by
// name, as idkeeper.LockStore says: one script reads the locks hash and the time
// together. A record it cannot read is an error, not a lock left out.
func (s *Store) Locks(ctx context.Context) ([]idkeeper.Lock, error) {
	v, err := s.run(ctx, scriptLocks, []string{s.keys.locks}, false, s.nowArg())
	if err != nil {
		return nil, wrap("locks", err)
	}
	a, ok := v.([]any)
	if !ok || len(a)%4 != 0 {
		return nil, fmt.Errorf("redis: locks: unexpected reply %v", v)
	}
	out := make([]idkeeper.Lock, 0, len(a)/4)
	for i := 0; i < len(a); i += 4 {
		name, ok1 := a[i].(string)
		at, ok2 := a[i+1].(int64)
		until, ok3 := a[i+2].(int64)
		holder, ok4 := a[i+3].(string)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, fmt.Errorf("redis: locks: unexpected entry %v", a[i:i+4])
		}
		out = append(out, idkeeper.Lock{Name: name, Owner: holder, LockedAt: fromMs(at), Until: fromMs(until)})
	}
	slices.SortFunc(out, func(x, y idkeeper.Lock) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}
