// Package controls holds the registry side of the fault-injection suite's negative
// controls (internal/harness/chaos): Store wrappers that each switch one safety mechanism
// of the registry off from outside, by changing what one Store method does. The
// registry and the stores stay the production code; only the chaos server
// (internal/harness/chaos/cmd/chaosserver) wraps its store with one of these. Never use
// them anywhere else.
package controls

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper"
)

// Names of the store controls, as chaosserver --control takes them.
const (
	NoResetQuarantine = "no-reset-quarantine"
	StaleReclaim      = "stale-reclaim"
)

// Wrap returns s with the control name switched on; "" returns s unchanged. A
// Redis store's replication methods stay reachable through the wrapper, so that
// the registry detects a Redis restart as it does on the bare store.
func Wrap(s idkeeper.Store, name string) (idkeeper.Store, error) {
	var w idkeeper.Store
	switch name {
	case "":
		return s, nil
	case NoResetQuarantine:
		w = noResetQuarantine{s}
	case StaleReclaim:
		w = &staleReclaim{Store: s}
	default:
		return nil, fmt.Errorf("unknown store control %q (want %s or %s)", name, NoResetQuarantine, StaleReclaim)
	}
	if r, ok := s.(replicated); ok {
		return struct {
			idkeeper.Store
			replicated
		}{w, r}, nil
	}
	return w, nil
}

// replicated is the registry's optional view of a Redis store (recovery.go).
type replicated interface {
	ReplicationID(ctx context.Context) (string, error)
	ReplicationChangeSafe(ctx context.Context, prev string) (safe bool, why string, err error)
}

// noResetQuarantine recovers a reset store without its quarantine: Reset gets
// Until = the store's now instead of now + lease + grace, so the node IDs that
// holders the empty store forgot may still mint with are neither quarantined nor
// fenced by a raised watermark floor, and are handed out again at once.
type noResetQuarantine struct{ idkeeper.Store }

func (s noResetQuarantine) Reset(ctx context.Context, p idkeeper.ResetParams) (idkeeper.ResetResult, error) {
	now, err := s.Store.Now(ctx)
	if err != nil {
		return idkeeper.ResetResult{}, err
	}
	p.Until = now
	return s.Store.Reset(ctx, p)
}

// staleReclaim is a cleanup job that acts on a stale read: each Reclaim frees
// the node IDs that the previous run read as expired past grace, without checking
// again whether their leases were renewed, or freed and granted anew, since — as a
// replica does that resumes from a long pause between its read and its writes. The
// stale window is one cleanup interval, so the race happens on every run. A node
// ID is freed by removing its current holder's leases (Remove without mintedUpTo:
// watermarks stay, as Reclaim keeps them), so a node ID reclaimed at one run and
// granted again before the next is taken from its new, valid holder.
type staleReclaim struct {
	idkeeper.Store
	mu    sync.Mutex
	stale []idkeeper.NodeID // read as expired past grace by the previous run
}

func (s *staleReclaim) Reclaim(ctx context.Context, g idkeeper.Guard, grace time.Duration) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, err := s.Store.Now(ctx)
	if err != nil {
		return 0, err
	}
	leases, err := s.Store.Leases(ctx)
	if err != nil {
		return 0, err
	}
	holders := make(map[idkeeper.NodeID]idkeeper.Lease, len(leases))
	var expired []idkeeper.NodeID
	for _, l := range leases {
		holders[l.NodeID] = l
		if l.ExpiresAt.Add(grace).Before(now) {
			expired = append(expired, l.NodeID)
		}
	}
	stale := s.stale
	s.stale = expired
	freed, done := 0, map[string]bool{}
	for _, n := range stale {
		l, held := holders[n]
		if !held || done[l.Requester.Key()] {
			continue
		}
		done[l.Requester.Key()] = true
		k, err := s.Store.Remove(ctx, g, idkeeper.RemoveParams{Requester: l.Requester, KeyID: l.KeyID})
		if err != nil {
			return freed, err
		}
		freed += k
	}
	return freed, nil
}
