package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/postgres"
)

// The PostgreSQL scenarios of issue #32: the store is a PostgreSQL primary (fsync
// on, as production runs it) with one streaming standby made by pg_basebackup
// (internal/harness/pgtest), and the primary is killed with SIGKILL mid-run and
// the standby promoted, as a failover manager (Patroni, pg_auto_failover, an
// operator) would.
//
// The replicas follow the failover as a deployment does, with no proxy: the
// store URL lists both servers with target_session_attrs=read-write (libpq's
// multi-host form, which pgx dials), so every new connection goes to whichever of
// them takes writes. Before the failover that is the primary (the standby, in
// recovery, is passed over); while neither takes writes the calls fail with
// STORE_UNAVAILABLE; once the standby is promoted the pool's new connections land
// on it. connect_timeout=2 bounds a dial to a host that does not answer. The
// password is in a file the URL names (password_file), so that no process's argv
// holds it.

// pgStandbyName is the standby's application_name, as synchronous_standby_names
// names it.
const pgStandbyName = "standby1"

// pgPromoteTimeout bounds each read of a fencing counter (pgFence: a standby's
// replay included); cutTimeout the wait for a grant while CutStandby keeps the
// standby down.
const (
	pgPromoteTimeout = 30 * time.Second
	cutTimeout       = 10 * time.Second
)

// Readiness lines of a replica's /readyz (postgres.Durability.String) with a
// synchronous and with an asynchronous standby.
const (
	pgDurableSync  = "an acknowledged grant is on a standby"
	pgDurableAsync = "may lose acknowledged grants"
)

// startPostgres starts the primary and its standby, makes the standby
// synchronous when Options.SyncStandby asks (and waits until the primary reports
// it so: the replicas read the durability at start, and recheck it only every
// minute) and points c.store at
// both. The standby gets synchronous_standby_names from neither its command line
// nor its configuration files (SetSynchronous writes the primary's
// postgresql.auto.conf after the base backup), so once promoted it waits for no
// standby of its own.
func (c *Cluster) startPostgres() {
	c.PG = pgtest.StartWith(c.t, pgtest.Options{Fsync: true})
	c.PGStandby = c.PG.StartStandby(c.t, pgStandbyName)
	if c.opts.SyncStandby {
		c.PG.SetSynchronous(c.t, pgStandbyName)
		if err := waitSyncStandby(c.PG, 10*time.Second); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	pwFile := filepath.Join(c.dir, "postgres.password")
	if err := os.WriteFile(pwFile, []byte(c.PG.Password()+"\n"), 0o600); err != nil {
		c.t.Fatal(err)
	}
	q := url.Values{"sslmode": {"disable"}, "target_session_attrs": {"read-write"}, "connect_timeout": {"2"},
		"password_file": {pwFile}}
	u := url.URL{Scheme: "postgres", User: url.User(pgtest.SuperUser), Host: c.PG.Addr() + "," + c.PGStandby.Addr(),
		Path: "/postgres", RawQuery: q.Encode()}
	c.store = u.String()
}

// waitSyncStandby waits until the server reports a synchronous standby streaming
// (the walsender takes synchronous_standby_names up a moment after the reload).
func waitSyncStandby(pg *pgtest.Server, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := postgres.Open(ctx, pg.URL(), postgres.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		d, err := s.CheckDurability(ctx)
		if err == nil && d.OnStandby() {
			return nil
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return fmt.Errorf("no synchronous standby within %v: %v (%v)", timeout, d, err)
		}
	}
}

// pgFence reads the fencing counter (the highest token handed out) of the store on
// pg alone, through the store's own read (postgres.Store.Status, a read-only
// transaction, which a standby in recovery serves too). On a standby it first
// waits until the standby replayed every WAL record it has (replayed).
func pgFence(ctx context.Context, pg *pgtest.Server, standby bool) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, pgPromoteTimeout)
	defer cancel()
	pool, err := pgxpool.New(ctx, pg.URL())
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	s, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		return 0, err
	}
	for {
		if standby {
			err = replayed(ctx, pool)
		}
		if err == nil {
			var st idkeeper.StoreStatus
			if st, err = s.Status(ctx); err == nil {
				return st.Fence, nil
			}
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return 0, fmt.Errorf("the fencing counter of PostgreSQL at %s: %w", pg.Addr(), err)
		}
	}
}

// replayed returns once a standby whose primary is gone replayed all the WAL it
// has: the position it replayed stayed put for 300 ms. (What it received and
// flushed, which a synchronous commit waited for, may be ahead of what it
// applied; promotion applies it all first.)
func replayed(ctx context.Context, pool *pgxpool.Pool) error {
	var last string
	for same := 0; same < 3; {
		var lsn string
		if err := pool.QueryRow(ctx, `SELECT coalesce(pg_last_wal_replay_lsn()::text, '')`).Scan(&lsn); err != nil {
			return err
		}
		if lsn == last {
			same++
		} else {
			last, same = lsn, 0
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

// PGFailover is what FailoverPostgres saw: the fencing counter of the primary a
// moment before it was killed, and of the standby just before its promotion
// (after it, the replicas may already have raised it recovering from a reset).
type PGFailover struct {
	Before, After uint64
	Heal          time.Time
}

// CutStandby kills the standby with SIGKILL and waits d, and longer (up to
// cutTimeout) until the primary granted a node ID meanwhile (its fencing counter
// grew): grants committed on the primary only (asynchronous replication does not
// wait), which the standby, resumed by FailoverPostgres after the primary is
// gone, never gets. A synchronous standby's primary would stall its commits
// instead: refused.
func (c *Cluster) CutStandby(ctx context.Context, d time.Duration) error {
	if c.PGStandby == nil || c.opts.SyncStandby {
		return fmt.Errorf("CutStandby needs a PostgreSQL store with an asynchronous standby")
	}
	at := time.Now()
	c.PGStandby.Kill(c.t)
	// Read after the kill: the standby has at most this, so a higher counter
	// later is a grant on the primary alone.
	before, err := pgFence(ctx, c.PG, false)
	if err != nil {
		return err
	}
	ok := sleepCtx(ctx, d)
	fence := before
	for ok && fence == before && time.Since(at) < cutTimeout {
		if fence, err = pgFence(ctx, c.PG, false); err != nil {
			return err
		}
		ok = fence > before || sleepCtx(ctx, 100*time.Millisecond)
	}
	c.record(Fault{Kind: "postgres-standby-down", Target: "standby", Global: true, At: at, Heal: time.Now()})
	if !ok {
		return ctx.Err()
	}
	return errIf(fence == before, "no node ID was granted in the %v the standby was down (fence %d)", cutTimeout, fence)
}

// FailoverPostgres reads the primary's fencing counter, kills the primary with
// SIGKILL (the postmaster and every backend), starts the standby again if
// CutStandby stopped it, reads the standby's fencing counter once it replayed
// what it has, and promotes it (pg_ctl promote); the failover is recorded as a
// global fault healed once the promoted standby answers.
func (c *Cluster) FailoverPostgres(ctx context.Context, standbyDown bool) (PGFailover, error) {
	var f PGFailover
	if c.PG == nil {
		return f, fmt.Errorf("FailoverPostgres needs a PostgreSQL store (Options.Postgres)")
	}
	var err error
	if f.Before, err = pgFence(ctx, c.PG, false); err != nil {
		return f, err
	}
	at := time.Now()
	c.PG.Kill(c.t)
	if standbyDown {
		c.PGStandby.Resume(c.t)
	}
	if f.After, err = pgFence(ctx, c.PGStandby, true); err != nil {
		return f, err
	}
	read := time.Now()
	c.PGStandby.Promote(c.t)
	promoted := time.Now()
	if _, err = pgFence(ctx, c.PGStandby, false); err != nil {
		return f, err
	}
	f.Heal = time.Now()
	c.t.Logf("postgres failover: primary %s killed (fence %d), standby %s promoted (fence %d) in %v "+
		"(standby read %v, promoted %v, answered %v)", c.PG.Addr(), f.Before, c.PGStandby.Addr(), f.After,
		f.Heal.Sub(at).Round(time.Millisecond), read.Sub(at).Round(time.Millisecond),
		promoted.Sub(read).Round(time.Millisecond), f.Heal.Sub(promoted).Round(time.Millisecond))
	c.record(Fault{Kind: "postgres-failover", Global: true, At: at, Heal: f.Heal})
	return f, nil
}

// readyDurability is the durability line of every replica's /readyz.
func (c *Cluster) readyDurability(ctx context.Context) ([]string, error) {
	c.mu.Lock()
	n := len(c.servers)
	c.mu.Unlock()
	var out []string
	for i := range n {
		ok, body := c.ServerReady(ctx, i)
		var r wire.ReadyResponse
		if err := json.Unmarshal([]byte(body), &r); !ok || err != nil {
			return nil, fmt.Errorf("server%d /readyz: %s", i+1, body)
		}
		out = append(out, r.Durability)
	}
	return out, nil
}

// PostgresFailover kills the PostgreSQL primary with SIGKILL a third into the
// run, while four clients mint (two churning: sessions of 1–3 s, so node IDs are
// granted all through the run), and promotes the streaming standby. Every live
// client and the gateway must be granted or renewed a lease after the failover
// within the liveness bound, no replica may fail its clock check for good, and
// the checker must find no duplicate. Before the fault, each replica's /readyz
// must say what a failover would cost.
//
// With sync (synchronous_standby_names names the standby) PostgreSQL answers a
// commit only once the standby has it: the promoted standby holds every
// acknowledged grant. /readyz says "an acknowledged grant is on a standby"; the
// standby's fencing counter, read before its promotion once it replayed what it
// has (after it, a replica's reset recovery could raise it), is at least the
// primary's a moment before the kill; the replicas log no store reset, restore nothing from a receipt and see
// no contest; the checker is clean, property 6 included (every grant is still in
// the lease history).
//
// Without it the standby is asynchronous, and the loss is made real: the standby
// is killed 3 s before the primary (CutStandby: longer if no node ID was granted
// meanwhile), so the grants of those seconds are on the primary only, then
// resumed on its data and promoted. /readyz says "may lose acknowledged grants";
// the standby's fencing counter is below the primary's (the fault bit);
// the replicas must detect the lower counter (the fencing check of DESIGN §7) and
// declare a store reset (Resets ≥ 1; both replicas log it: one writes the new
// generation, the other adopts it), quarantining every unclaimed node ID for lease
// + grace (allocs are refused meanwhile); no node ID is served twice, and property
// 6 is not judged (the lost grants are missing from the lease history). The
// holders whose lease outlived the outage renew with their receipts and are
// restored (Report.Restored, not judged: 0 when the failover outlasts the lease).
func PostgresFailover(sync bool) Scenario {
	sc := Scenario{Name: "postgres-failover-async", Postgres: true, SyncStandby: sync}
	want := pgDurableAsync
	if sync {
		sc.Name, want = "postgres-failover-sync", pgDurableSync
	}
	var after afterFailover // filled by Inject, judged by Expect
	var fo PGFailover
	sc.Clients = storeFaultClients
	sc.Inject = func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
		start := time.Now()
		lines, err := c.readyDurability(ctx)
		if err != nil {
			return err
		}
		for i, l := range lines {
			if !strings.Contains(l, want) {
				return fmt.Errorf("server%d /readyz durability %q, want it to say %q", i+1, l, want)
			}
		}
		c.t.Logf("/readyz durability: %s", lines[0])
		if !sleepCtx(ctx, p.Faulting/3) {
			return ctx.Err()
		}
		if !sync {
			if err := c.CutStandby(ctx, 3*time.Second); err != nil {
				return err
			}
		}
		if fo, err = c.FailoverPostgres(ctx, !sync); err != nil {
			return err
		}
		after, err = c.awaitGrants(ctx, fo.Heal, start, p, "the failover")
		return err
	}
	sc.Expect = func(r *Report) error {
		if err := after.checkWith(r, "the failover"); err != nil {
			return err
		}
		if sync {
			return errIf(fo.After < fo.Before || r.Resets+r.Restored+r.Contested > 0 || r.Grants < 20,
				"fence %d on the promoted standby, %d on the primary before the kill; %d store resets, %d restores "+
					"from receipts, %d contests (want none: the standby had every grant); %d grants",
				fo.After, fo.Before, r.Resets, r.Restored, r.Contested, r.Grants)
		}
		return errIf(fo.After >= fo.Before || r.Resets < 1,
			"fence %d on the promoted standby, %d on the primary before the kill (want lower: grants lost); %d store resets (want ≥ 1)",
			fo.After, fo.Before, r.Resets)
	}
	return sc
}
