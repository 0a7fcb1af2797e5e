package postgres

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// maxBatch bounds the steps one combined transaction runs.
const maxBatch = 64

// Lease steps commit one at a time (they all lock the meta row), each waiting
// for its own WAL flush; so the Alloc, Renew and Remove steps of concurrent
// callers run in one transaction, a savepoint each, as bbolt's Batch does: one
// lock of the meta row and one commit for all of them. A step that fails rolls
// back to its savepoint, its changes to the meta row undone, and returns its
// error alone; the others commit. A serialization failure or a deadlock runs the
// whole batch again; any other failure of the transaction fails every step of
// it. A caller returns once the transaction that ran its step committed.

// combiner collects the steps waiting for a transaction.
type combiner struct {
	mu      sync.Mutex
	pending []*step
	running bool
}

// step is one caller's lease step in a combined transaction.
type step struct {
	op   string
	g    *idkeeper.Guard
	fn   func(*txn) error
	done chan error
}

// combined runs fn as one lease step (as update does), in a transaction it may
// share with the steps of concurrent callers. The first caller that finds no
// batch running runs the batches until none waits.
func (s *Store) combined(ctx context.Context, op string, g *idkeeper.Guard, fn func(*txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	st := &step{op: op, g: g, fn: fn, done: make(chan error, 1)}
	c := &s.comb
	c.mu.Lock()
	c.pending = append(c.pending, st)
	lead := !c.running
	c.running = true
	c.mu.Unlock()
	if lead {
		for {
			c.mu.Lock()
			n := min(len(c.pending), maxBatch)
			if n == 0 {
				c.running = false
				c.mu.Unlock()
				break
			}
			batch := c.pending[:n:n]
			c.pending = c.pending[n:]
			c.mu.Unlock()
			s.runBatch(ctx, batch)
		}
	}
	return <-st.done
}

// runBatch runs the steps of batch in one transaction and tells each its end.
func (s *Store) runBatch(ctx context.Context, batch []*step) {
	// The leader's cancellation must not fail the others' steps.
	ctx, cancel := s.bound(context.WithoutCancel(ctx))
	defer cancel()
	results := make([]error, len(batch))
	var err error
	for n := 1; ; n++ {
		err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			return s.steps(ctx, tx, batch, results)
		})
		if err == nil || !retryable(err) {
			break
		}
		if n >= maxAttempts {
			err = fmt.Errorf("postgres: %d attempts in a row aborted by the server: %w", n, err)
			break
		}
		if err = leasetx.Backoff(ctx, n); err != nil {
			break
		}
	}
	for i, st := range batch {
		if err != nil {
			st.done <- s.wrap(st.op, err)
		} else {
			st.done <- s.wrap(st.op, results[i])
		}
	}
}

// steps runs each step of batch after a savepoint in tx, its error in results.
func (s *Store) steps(ctx context.Context, tx pgx.Tx, batch []*step, results []error) error {
	t, err := s.begin(ctx, tx, nil)
	if err != nil {
		return err
	}
	for i, st := range batch {
		if _, err := tx.Exec(ctx, `SAVEPOINT step`); err != nil {
			return err
		}
		saved := t.m
		err := error(nil)
		if st.g != nil {
			err = st.g.Check(t.m.genID, t.m.fence, msTime(t.now))
		}
		if err == nil {
			err = st.fn(t)
		}
		results[i] = err
		if err == nil {
			// Not released: ROLLBACK TO names the newest savepoint of the name,
			// and a release would cost a round trip a step.
			continue
		}
		if retryable(err) || ctx.Err() != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT step`); err != nil {
			return err
		}
		t.m = saved
		clear(t.nodes)
		t.promoted = false
	}
	return t.flush()
}
