package redis

import (
	"context"
	"fmt"
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
