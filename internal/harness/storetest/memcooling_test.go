package storetest

import (
	"context"
	"time"
)

// The reference memStore's cooling charges (idkeeper.LeaseStore.Remove): each
// node remembers the key a Remove charged its cooling to, and until when.

func (s *memStore) keyCooling(keyID string, now time.Time) int {
	c := 0
	for _, n := range s.d.nodes {
		if n.cooling(keyID, now) {
			c++
		}
	}
	return c
}

func (s *memStore) KeyCooling(context.Context) (map[string]int, error) {
	defer s.lock()()
	now, out := s.now(), map[string]int{}
	for _, n := range s.d.nodes {
		if n.coolKey != "" && n.cooling(n.coolKey, now) {
			out[n.coolKey]++
		}
	}
	return out, nil
}
