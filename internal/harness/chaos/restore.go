package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/internal/harness/chaos/history"
	"github.com/idkeeper/idkeeper/redis"
)

// This file holds the restore scenario of issue #12: a backup taken with
// `idkeeper backup export` while the cluster runs, imported again with
// `idkeeper backup import` some seconds later while the servers and clients
// still run — the worst case of a restore: every holder granted a node ID after
// the backup is unknown to the restored store.

// restoreRun is one backup of a run and its import.
type restoreRun struct {
	file       string
	exportedAt time.Time
	fence      uint64    // the backup's fencing counter: a token above it is unknown to the backup
	importAt   time.Time // when the import started; zero before it
	importEnd  time.Time // when it returned
}

// ExportBackup runs `idkeeper backup export` on the run's Redis while the cluster
// runs and returns the file and the backup's fencing counter.
func (c *Cluster) ExportBackup(ctx context.Context) (*restoreRun, error) {
	c.mu.Lock()
	file := filepath.Join(c.dir, fmt.Sprintf("backup-%d.idk", len(c.restores)+1))
	c.mu.Unlock()
	at := time.Now()
	out, err := exec.CommandContext(ctx, c.bins.Server, "backup", "export", "--store", c.store, "--out", file).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("idkeeper backup export: %v\n%s", err, out)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd, err := backup.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("read the backup's header: %w", err)
	}
	run := &restoreRun{file: file, exportedAt: at, fence: rd.Header().Meta.Fence}
	c.mu.Lock()
	c.restores = append(c.restores, run)
	c.mu.Unlock()
	c.t.Logf("backup export at %s: %s", at.Format("15:04:05.000"), strings.TrimSpace(string(out)))
	return run, nil
}

// ImportBackup imports run's backup into the run's Redis while the servers and
// clients run, and records it as a global fault. The import is the production
// one, `idkeeper backup import` with the servers' lease duration and grace (the
// hidden --unsafe-short-leases lets it take their leases of seconds). With raw,
// the negative control: the harness loads the backup itself without the restore
// plan (see loadRaw).
func (c *Cluster) ImportBackup(ctx context.Context, run *restoreRun, raw bool) error {
	at := time.Now()
	kind := "restore-old-backup"
	var out []byte
	var err error
	if raw {
		kind += " (control: without the restore plan)"
		err = c.loadRaw(ctx, run.file)
	} else {
		set := c.opts.Settings
		out, err = exec.CommandContext(ctx, c.bins.Server, "backup", "import", "--store", c.store, "--in", run.file,
			"--unsafe-short-leases", "--lease-duration", set.LeaseDuration.String(), "--cleanup-grace", set.Grace.String()).CombinedOutput()
	}
	end := time.Now()
	if err != nil {
		return fmt.Errorf("import %s: %v\n%s", run.file, err, out)
	}
	c.mu.Lock()
	run.importAt, run.importEnd = at, end
	c.mu.Unlock()
	c.t.Logf("backup of %s imported in %v: %s", run.exportedAt.Format("15:04:05.000"), end.Sub(at).Round(time.Millisecond),
		strings.TrimSpace(string(out)))
	c.record(Fault{Kind: kind, Global: true, At: at, Heal: end})
	return nil
}

// loadRaw is the negative control's import: the backup's records loaded as they
// were taken — no quarantine, no raised watermark floors, nothing restorable —
// under the store's current generation and a fencing counter above every token it
// handed out, so that the running servers have nothing to notice (no new
// generation, no counter below a token they know): an import without the restore
// plan (snapshot.RestorePlan) that a running cluster cannot tell from no import.
// It uses the store adapter and package backup, never the command.
func (c *Cluster) loadRaw(ctx context.Context, file string) error {
	s, err := redis.Open(c.store, redis.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	rd, err := backup.NewReader(bufio.NewReader(f))
	if err != nil {
		return err
	}
	st, err := s.Status(ctx)
	if err != nil {
		return err
	}
	meta := rd.Header().Meta
	meta.Generation = st.Generation
	// Tokens granted between the Status read and the load stay below the counter.
	meta.Fence = max(meta.Fence, st.Fence) + 1000
	return s.LoadSnapshot(ctx, meta, rd)
}

// restoreCounts reads the clients' histories against the run's imports: Unknown
// counts the grants an imported backup did not know (a token above its fencing
// counter, acquired before the import) whose holders still found their leases
// valid after the import returned (restored from their receipts, or cut off and
// minting unaware); Regranted counts the grants to other sessions, after the
// import, of those grants' node IDs.
func (c *Cluster) restoreCounts(clients []ClientRun) (imports, unknown, regranted int) {
	c.mu.Lock()
	var runs []restoreRun
	for _, r := range c.restores {
		if !r.importAt.IsZero() {
			runs = append(runs, *r)
		}
	}
	c.mu.Unlock()
	type session struct {
		who       string
		acq, last int64
		leases    []history.Lease
	}
	var all []*session
	for _, cl := range clients {
		evs, err := history.ReadEvents(cl.Dir)
		if err != nil {
			continue
		}
		type key struct{ s, g int }
		by := map[key]*session{}
		for _, e := range evs {
			k := key{e.S, e.G}
			switch {
			case e.Ev == history.EvAcquired:
				s := &session{who: fmt.Sprintf("%s/s%d/g%d", cl.Name, e.S, e.G), acq: e.T, leases: e.Leases}
				by[k] = s
				all = append(all, s)
			case e.Digest != nil && by[k] != nil:
				by[k].last = max(by[k].last, e.Digest.LastValid)
			}
		}
	}
	for i, r := range runs {
		next := int64(1<<63 - 1)
		if i+1 < len(runs) {
			next = runs[i+1].importAt.UnixNano()
		}
		at, end := r.importAt.UnixNano(), r.importEnd.UnixNano()
		holders := map[int64]map[string]bool{} // node → the sessions the backup did not know
		for _, s := range all {
			if s.acq >= at || s.last <= end {
				continue
			}
			for _, l := range s.leases {
				if l.Token > r.fence {
					unknown++
					if holders[l.Node] == nil {
						holders[l.Node] = map[string]bool{}
					}
					holders[l.Node][s.who] = true
				}
			}
		}
		for _, s := range all {
			if s.acq <= end || s.acq >= next {
				continue
			}
			for _, l := range s.leases {
				if h := holders[l.Node]; len(h) > 0 && !h[s.who] {
					regranted++
				}
			}
		}
	}
	return len(runs), unknown, regranted
}

// RestoreOldBackup takes a backup of the running cluster with `idkeeper backup
// export`, lets the clients go on — churning sessions get new node IDs, renewals
// move the watermarks, and three newcomers (started, or restarted, just after the
// export) get node IDs the backup shows free — then cuts two newcomers off and
// imports the old backup with `idkeeper backup import` while the servers and
// clients run (issue #12). docs/backup.md says to stop the servers first; this is
// the worst case: the servers see the new generation as a store reset, the holders
// the backup does not know renew with their receipts (the third newcomer at
// least), the two cut off go on minting unaware until their leases run out, and
// nobody may get their node IDs before those leases end.
func RestoreOldBackup() Scenario { return restoreOldBackup(false) }

func restoreOldBackup(raw bool) Scenario {
	return Scenario{
		Name: "restore-old-backup",
		// The sessions (3 × 2 churning, 3 newcomers) and the gateway's two hold 11:
		// a small pool, so that the newcomers' node IDs are granted again in the run.
		Nodes: 16,
		Clients: func(p Plan) []ClientSpec {
			return uniform(3, ClientSpec{Sessions: 2, Batch: p.Batch, HoldMin: 500 * time.Millisecond, HoldMax: 2 * time.Second,
				BackoffMax: 300 * time.Millisecond})
		},
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			lease := p.Settings.LeaseDuration
			var newcomers []*Client
			period := 2*lease + p.Settings.LivenessBound() + GatewayBackoffSlack + 4*time.Second
			return every(ctx, max(p.Faulting, time.Second), period, func(round int) error {
				run, err := c.ExportBackup(ctx)
				if err != nil {
					return err
				}
				// Newcomers the backup does not know: new processes, each one session
				// that runs until it loses its lease. Two are cut off across the
				// import; the third renews with its receipt and must keep its lease.
				for i := range 3 {
					if round == 0 {
						n, err := c.AddClient(ClientSpec{Sessions: 1, Batch: p.Batch})
						if err != nil {
							return err
						}
						newcomers = append(newcomers, n)
					} else if newcomers[i], err = c.KillClient(ctx, newcomers[i], 0); err != nil {
						return err
					}
				}
				for _, n := range newcomers {
					if err := waitAcquired(n.Name, n.Dir, n.p, 10*time.Second); err != nil {
						return err
					}
				}
				// Every lease in the backup is renewed past it, or closed, by now.
				sleepCtx(ctx, time.Until(run.exportedAt.Add(lease+time.Second)))
				heal := []func(){c.Disturbing(newcomers[0].Name, newcomers[0].Proxy, Drop, 0),
					c.Disturbing(newcomers[1].Name, newcomers[1].Proxy, Drop, 0)}
				if err := c.ImportBackup(ctx, run, raw); err != nil {
					return err
				}
				sleepCtx(ctx, lease+time.Second)
				for _, h := range heal {
					h()
				}
				return nil
			})
		},
		Expect: func(r *Report) error {
			return errIf(r.Imports == 0 || r.Unknown < 3 || r.Regranted == 0 || r.Resets == 0 || r.Restored == 0 || r.Lost < 2,
				"%d imports, %d grants the backup did not know minting past its import, %d of their node IDs granted again, "+
					"%d store resets recovered, %d restores from receipts, %d leases lost",
				r.Imports, r.Unknown, r.Regranted, r.Resets, r.Restored, r.Lost)
		},
	}
}
