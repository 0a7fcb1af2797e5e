package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
	"github.com/idkeeper/idkeeper/postgres"
)

// benchServers are the servers the benchmarks run on: the package's, without
// fsync (the store's own work and PostgreSQL's), and one with fsync (what a
// production server pays per commit).
func benchServers(b *testing.B) []struct {
	name string
	srv  *pgtest.Server
} {
	return []struct {
		name string
		srv  *pgtest.Server
	}{{"nofsync", sharedServer(b)}, {"fsync", pgtest.StartWith(b, pgtest.Options{Fsync: true})}}
}

// BenchmarkTryLockUnlock takes a job lock and gives it back: two transactions.
func BenchmarkTryLockUnlock(b *testing.B) {
	for _, sv := range benchServers(b) {
		b.Run(sv.name, func(b *testing.B) {
			s := open(b, sv.srv, postgres.Options{})
			ctx := b.Context()
			for b.Loop() {
				if _, ok, err := s.TryLock(ctx, "cleanup", "me", time.Minute); err != nil || !ok {
					b.Fatal(ok, err)
				}
				if _, err := s.Unlock(ctx, "cleanup", "me", 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIdempotency runs one record's life: Begin, Complete with a 64-byte
// body, as the gateway stores a batch of IDs.
func BenchmarkIdempotency(b *testing.B) {
	for _, sv := range benchServers(b) {
		b.Run(sv.name, func(b *testing.B) {
			s := open(b, sv.srv, postgres.Options{})
			o := s.Owned("gateway", 1_000_000)
			ctx := b.Context()
			res := idempotency.Stored{Outcome: 200, Body: make([]byte, 64)}
			i := 0
			for b.Loop() {
				scope := fmt.Sprintf("scope-%d", i)
				i++
				if _, started, err := o.Begin(ctx, scope, "fp", "tok", time.Minute); err != nil || !started {
					b.Fatal(started, err)
				}
				if err := o.Complete(ctx, scope, "tok", res, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMetaRowCommit is the ceiling of a design whose lease transactions all
// lock one meta row first: 64 callers, each transaction locks the row, updates
// it and commits, so they commit one at a time and every commit waits for its
// own WAL flush (no group commit across them). The lease store's throughput can
// be no higher unless it grants to several callers in one transaction.
func BenchmarkMetaRowCommit(b *testing.B) {
	for _, sv := range benchServers(b) {
		b.Run(sv.name, func(b *testing.B) {
			ctx := b.Context()
			pool, err := pgxpool.New(ctx, sv.srv.URL()+"&pool_max_conns=64")
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			table := fmt.Sprintf("meta_bench_%d", schemaSeq.Add(1))
			if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (one boolean PRIMARY KEY, fence bigint NOT NULL);
				INSERT INTO `+table+` VALUES (true, 0)`); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(32) // 64 callers on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
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
		})
	}
}
