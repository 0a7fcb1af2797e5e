package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Durability is what the server says about keeping an acknowledged commit, read
// at Open (CheckDurability).
type Durability struct {
	Fsync             bool   // fsync: off loses commits in a crash of the machine
	SynchronousCommit string // synchronous_commit of the store's sessions: off loses the last commits in a crash
	// SyncStandbyNames is synchronous_standby_names: the standbys a commit waits
	// for; "" for none.
	SyncStandbyNames string
	// SyncStandbys is how many standbys stream synchronously now
	// (pg_stat_replication: sync or quorum), Standbys how many stream at all.
	SyncStandbys, Standbys int
	// InRecovery is true on a standby (read-only).
	InRecovery bool
}

// ErrLostWrites is wrapped by Durability.Check for a server that may lose
// acknowledged writes in a crash.
var ErrLostWrites = errors.New("postgres: the server may lose acknowledged writes")

// Check refuses a server that may lose acknowledged writes in a crash of its own:
// fsync or synchronous_commit off. (A standby that is not synchronous may lose
// them in a failover: Standby says so.)
func (d Durability) Check() error {
	var bad []string
	if !d.Fsync {
		bad = append(bad, "fsync is off")
	}
	if d.SynchronousCommit == "off" {
		bad = append(bad, "synchronous_commit is off")
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w (%s): turn it on, or accept the loss explicitly", ErrLostWrites, strings.Join(bad, ", "))
}

// OnStandby reports whether an acknowledged commit is on a standby too: the
// server waits for a synchronous standby (synchronous_standby_names and
// synchronous_commit on, remote_write or remote_apply) and one streams now.
func (d Durability) OnStandby() bool {
	switch d.SynchronousCommit {
	case "on", "remote_write", "remote_apply":
		return d.SyncStandbyNames != "" && d.SyncStandbys > 0
	}
	return false
}

// waitsForStandby reports whether commits wait for a synchronous standby that
// does not stream.
func (d Durability) waitsForStandby() bool {
	switch d.SynchronousCommit {
	case "on", "remote_write", "remote_apply":
		return d.SyncStandbyNames != "" && d.SyncStandbys == 0
	}
	return false
}

// String says it in a line, for /readyz and the admin store page.
func (d Durability) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fsync %s, synchronous_commit %s", onOff(d.Fsync), d.SynchronousCommit)
	switch {
	case d.OnStandby():
		fmt.Fprintf(&b, "; %d synchronous standby(s) of %d: an acknowledged grant is on a standby", d.SyncStandbys, d.Standbys)
	case d.waitsForStandby():
		// PostgreSQL holds every commit until a listed standby confirms it:
		// nothing is lost, but no grant is answered meanwhile.
		fmt.Fprintf(&b, "; synchronous_standby_names %q but no synchronous standby streams (%d standby(s)): "+
			"every grant waits until one does", d.SyncStandbyNames, d.Standbys)
	case d.Standbys > 0:
		fmt.Fprintf(&b, "; %d asynchronous standby(s): a failover may lose acknowledged grants (detected as a store reset)", d.Standbys)
	default:
		b.WriteString("; no standby")
	}
	return b.String()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// CheckDurability reads the server's settings that decide whether an acknowledged
// commit survives a crash or a failover.
func (s *Store) CheckDurability(ctx context.Context) (Durability, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var d Durability
	var fsync string
	err := s.pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'),
		current_setting('synchronous_standby_names'), pg_is_in_recovery(),
		(SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')),
		(SELECT count(*) FROM pg_stat_replication)`).
		Scan(&fsync, &d.SynchronousCommit, &d.SyncStandbyNames, &d.InRecovery, &d.SyncStandbys, &d.Standbys)
	if err != nil {
		return Durability{}, s.wrap("durability", err)
	}
	d.Fsync = fsync == "on"
	return d, nil
}

// Durability is the server's start-up check of the store (server.Durable):
// safe when a crash of PostgreSQL loses no acknowledged commit (fsync and
// synchronous_commit on: Durability.Check); why is Durability.String, which says
// whether an acknowledged grant is on a synchronous standby too, or may be lost
// in a failover to an asynchronous one (then detected as a store reset). err is
// set only when the server could not be asked.
func (s *Store) Durability(ctx context.Context) (safe bool, why string, err error) {
	d, err := s.CheckDurability(ctx)
	if err != nil {
		return false, "", err
	}
	return d.Check() == nil, "PostgreSQL: " + d.String(), nil
}
