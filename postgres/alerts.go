package postgres

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
)

// The alert state (alert.StateStore) and the backup schedule
// (idkeeper.BackupScheduleStore): versioned rows, each put one statement
// conditioned on the Version it was read with (putVersioned).

var (
	_ alert.StateStore             = (*Store)(nil)
	_ idkeeper.BackupScheduleStore = (*Store)(nil)
)

// backupScheduleName is the settings row of the backup schedule.
const backupScheduleName = "backup-schedule"

// putVersioned stores the row of table whose column key is name, with the
// columns cols set to vals and version set to version + 1, when the stored
// version is version (0: no row, so of several first writers one wins);
// ErrConflict, changing nothing, when it is not.
func (s *Store) putVersioned(ctx context.Context, op, table, key, name string, version uint64, cols []string, vals ...any) error {
	if version >= math.MaxInt64 {
		return idkeeper.ErrConflict
	}
	args := append([]any{name, int64(version) + 1}, vals...)
	var sql string
	if version == 0 {
		ph := make([]string, len(cols))
		for i := range cols {
			ph[i] = "$" + strconv.Itoa(i+3)
		}
		sql = `INSERT INTO ` + table + ` (` + key + `, version, ` + strings.Join(cols, ", ") + `) VALUES ($1, $2, ` +
			strings.Join(ph, ", ") + `) ON CONFLICT (` + key + `) DO NOTHING`
	} else {
		set := make([]string, len(cols))
		for i, c := range cols {
			set[i] = c + " = $" + strconv.Itoa(i+3)
		}
		sql = `UPDATE ` + table + ` SET version = $2, ` + strings.Join(set, ", ") + ` WHERE ` + key + ` = $1 AND version = $` +
			strconv.Itoa(len(cols)+3)
		args = append(args, int64(version))
	}
	n, err := s.execCount(ctx, op, sql, args...)
	if err == nil && n == 0 {
		return idkeeper.ErrConflict
	}
	return err
}

// AlertState implements alert.StateStore.
func (s *Store) AlertState(ctx context.Context, name string) (alert.State, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	st := alert.State{Name: name}
	var since, sent, checked, version int64
	err := s.pool.QueryRow(ctx, `SELECT firing, since, last_sent, checked, summary, version FROM `+s.t.alerts+` WHERE name = $1`,
		name).Scan(&st.Firing, &since, &sent, &checked, &st.Summary, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return alert.State{}, s.wrap("alert state", err)
	}
	st.Since, st.LastSent, st.Checked, st.Version = msTime(since), msTime(sent), msTime(checked), uint64(version)
	return st, nil
}

// PutAlertState implements alert.StateStore.
func (s *Store) PutAlertState(ctx context.Context, st alert.State) error {
	if err := st.Validate(); err != nil {
		return err
	}
	return s.putVersioned(ctx, "put alert state", s.t.alerts, "name", st.Name, st.Version,
		[]string{"firing", "since", "last_sent", "checked", "summary"},
		st.Firing, timeMs(st.Since), timeMs(st.LastSent), timeMs(st.Checked), st.Summary)
}

// BackupSchedule implements idkeeper.BackupScheduleStore.
func (s *Store) BackupSchedule(ctx context.Context) (idkeeper.BackupSchedule, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var b idkeeper.BackupSchedule
	var at, version int64
	err := s.pool.QueryRow(ctx, `SELECT value, updated_by, updated_at, version FROM `+s.t.settings+` WHERE name = $1`,
		backupScheduleName).Scan(&b.Spec, &b.UpdatedBy, &at, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return idkeeper.BackupSchedule{}, nil
	}
	if err != nil {
		return idkeeper.BackupSchedule{}, s.wrap("backup schedule", err)
	}
	b.UpdatedAt, b.Version = msTime(at), uint64(version)
	return b, nil
}

// PutBackupSchedule implements idkeeper.BackupScheduleStore.
func (s *Store) PutBackupSchedule(ctx context.Context, b idkeeper.BackupSchedule) error {
	if err := b.Validate(); err != nil {
		return err
	}
	return s.putVersioned(ctx, "put backup schedule", s.t.settings, "name", backupScheduleName, b.Version,
		[]string{"value", "updated_by", "updated_at"}, b.Spec, b.UpdatedBy, timeMs(b.UpdatedAt))
}
