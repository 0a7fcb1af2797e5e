package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// combiner runs the steps of concurrent callers in one transaction, a savepoint
// each, as bbolt's Batch does: a caller that finds no transaction running runs
// one for every step queued by then, its own included, and hands the queue on
// to the first caller that queued meanwhile. It is the prototype of what the
// lease store needs to get past BenchmarkMetaRowCommit's ceiling.
type combiner struct {
	pool  *pgxpool.Pool
	mu    sync.Mutex
	queue []*step
	busy  bool
}

type step struct {
	fn   func(pgx.Tx) error
	err  error
	done chan struct{} // closed when the step ran
	lead chan struct{} // closed when this caller is to run the next transaction
}

func (c *combiner) run(ctx context.Context, fn func(pgx.Tx) error) error {
	st := &step{fn: fn, done: make(chan struct{}), lead: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, st)
	if c.busy {
		c.mu.Unlock()
		select {
		case <-st.done:
			return st.err
		case <-st.lead:
		}
		c.mu.Lock()
	}
	c.busy = true
	steps := c.queue
	c.queue = nil
	c.mu.Unlock()
	c.commit(ctx, steps)
	c.mu.Lock()
	if len(c.queue) > 0 {
		close(c.queue[0].lead)
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	return st.err
}

// commit runs steps in one transaction, each in a savepoint: a step's error
// undoes that step alone.
func (c *combiner) commit(ctx context.Context, steps []*step) {
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		for _, st := range steps {
			sp, err := tx.Begin(ctx) // a savepoint
			if err != nil {
				return err
			}
			if st.err = st.fn(sp); st.err != nil {
				if err := sp.Rollback(ctx); err != nil {
					return err
				}
				continue
			}
			if err := sp.Commit(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	for _, st := range steps {
		if err != nil {
			st.err = err
		}
		close(st.done)
	}
}

// BenchmarkMetaRowCommitBatched is BenchmarkMetaRowCommit with the callers'
// transactions combined: the same 64 callers, each step locking and updating
// the one meta row, but one commit (one WAL flush) for every step queued while
// the previous transaction ran.
func BenchmarkMetaRowCommitBatched(b *testing.B) {
	for _, sv := range benchServers(b) {
		b.Run(sv.name, func(b *testing.B) {
			ctx := b.Context()
			pool, err := pgxpool.New(ctx, sv.srv.URL()+"&pool_max_conns=8")
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			table := fmt.Sprintf("meta_bench_%d", schemaSeq.Add(1))
			if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (one boolean PRIMARY KEY, fence bigint NOT NULL);
				INSERT INTO `+table+` VALUES (true, 0)`); err != nil {
				b.Fatal(err)
			}
			c := &combiner{pool: pool}
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					err := c.run(ctx, func(tx pgx.Tx) error {
						var f int64
						if err := tx.QueryRow(ctx, `SELECT fence FROM `+table+` FOR UPDATE`).Scan(&f); err != nil {
							return err
						}
						_, err := tx.Exec(ctx, `UPDATE `+table+` SET fence = $1`, f+1)
						return err
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			var fence int64
			if err := pool.QueryRow(ctx, `SELECT fence FROM `+table).Scan(&fence); err != nil || fence != int64(b.N) {
				b.Fatalf("fence %d after %d steps: %v", fence, b.N, err)
			}
		})
	}
}
