package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
)

// replicas are the registry's base URLs (Config.ServerURLs) and what the session
// learnt about them. A session and its extra sessions (Config.MaxCount) share one.
type replicas struct {
	urls  []string
	stats []replicaCounters // one per URL
	cur   atomic.Int32      // index of the replica tried first: the last that answered
	moves atomic.Uint64     // failovers: moves to the next replica within a call
	log   *slog.Logger
}

type replicaCounters struct {
	requests atomic.Uint64
	failures atomic.Uint64
}

func newReplicas(urls []string, log *slog.Logger) *replicas {
	return &replicas{urls: urls, stats: make([]replicaCounters, len(urls)), log: log}
}

// ReplicaStats are the counters of one registry URL (Config.ServerURL or one of
// Config.ServerURLs) since the session was created; they never decrease.
type ReplicaStats struct {
	URL string // any password redacted
	// Requests counts the Alloc, Renew and Remove requests sent to it.
	Requests uint64
	// Failures counts those that failed with a transport error or a 5xx answer:
	// the ones that moved the call on to the next replica (when there was one).
	Failures uint64
	// Current: it is the replica the next request goes to first.
	Current bool
}

func (r *replicas) snapshot() ([]ReplicaStats, uint64) {
	cur := int(r.cur.Load())
	out := make([]ReplicaStats, len(r.urls))
	for i, u := range r.urls {
		out[i] = ReplicaStats{URL: redactURL(u), Requests: r.stats[i].requests.Load(), Failures: r.stats[i].failures.Load(), Current: i == cur}
	}
	return out, r.moves.Load()
}

// failsOver reports whether a request that failed with err is tried on the next
// replica: a transport error or a 5xx answer says nothing about the registry's
// verdict. Any other answer (a 4xx, a 3xx, a malformed 200) is the replica's answer,
// and every replica of the deployment would give the same.
func failsOver(err error) bool {
	var se *ServerError
	var me *MalformedError
	switch {
	case err == nil, errors.As(err, &me):
		return false
	case errors.As(err, &se):
		return se.Status >= http.StatusInternalServerError
	}
	return true
}

// post sends one request (payload, already encoded) to the replicas, starting with
// the current one, each at most once, until one answers other than by a transport
// error or a 5xx, or ctx ends; it returns that answer's error (nil for a 200), or
// the last replica's. Each attempt has its own RequestTimeout. The replica that
// answered becomes the current one.
func (a *api) post(ctx context.Context, op, path string, body, out any) error {
	payload, err := encode(op, body)
	if err != nil {
		return err
	}
	r := a.reps
	n := len(r.urls)
	start := int(r.cur.Load())
	for i := range n {
		at := (start + i) % n
		r.stats[at].requests.Add(1)
		err = a.postTo(ctx, r.urls[at], op, path, payload, out)
		if !failsOver(err) {
			r.cur.Store(int32(at))
			return err
		}
		r.stats[at].failures.Add(1)
		if ctx.Err() != nil || i == n-1 {
			break
		}
		next := (at + 1) % n
		r.moves.Add(1)
		r.log.Warn("idkeeper client: registry replica failed; trying the next one", "op", op,
			"server", redactURL(r.urls[at]), "next", redactURL(r.urls[next]), "err", err)
	}
	if n > 1 && ctx.Err() == nil {
		return fmt.Errorf("idkeeper client: %s: all %d registry replicas failed; the last: %w", op, n, err)
	}
	return err
}
