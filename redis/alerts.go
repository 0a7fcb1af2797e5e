package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
)

// keyAlerts is the hash of the alert jobs' state (alert.StateStore), keyed by
// alert name. It is not part of a snapshot: a restored store alerts afresh.
const keyAlerts = "alerts"

// alertRecord is the JSON of one alert state. Times are Unix ms; 0 stands for
// the zero time.
type alertRecord struct {
	Firing   bool   `json:"firing,omitempty"`
	Since    int64  `json:"since,omitempty"`
	LastSent int64  `json:"lastSent,omitempty"`
	Checked  int64  `json:"checked,omitempty"`
	Summary  string `json:"summary,omitempty"`
	Version  uint64 `json:"version"`
}

func msOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return ms(t)
}

func timeOrZero(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return fromMs(v)
}

// alertState reads the state of name and its record as stored ("" when none).
func (s *Store) alertState(ctx context.Context, name string) (alert.State, string, error) {
	st := alert.State{Name: name}
	rec, err := s.client.HGet(ctx, s.adminKey(keyAlerts), name).Result()
	if errors.Is(err, goredis.Nil) {
		return st, "", nil
	}
	if err != nil {
		return st, "", fmt.Errorf("redis: alert state: %w", err)
	}
	var r alertRecord
	if err := decodeRecord("alert state", name, rec, &r); err != nil {
		return st, "", err
	}
	st.Firing, st.Since, st.LastSent, st.Checked = r.Firing, timeOrZero(r.Since), timeOrZero(r.LastSent), timeOrZero(r.Checked)
	st.Summary, st.Version = r.Summary, r.Version
	return st, rec, nil
}

// AlertState implements alert.StateStore: one HGET.
func (s *Store) AlertState(ctx context.Context, name string) (alert.State, error) {
	st, _, err := s.alertState(ctx, name)
	return st, err
}

// PutAlertState implements alert.StateStore: HSETNX for a first state, else the
// compare-and-set script over the record read.
func (s *Store) PutAlertState(ctx context.Context, st alert.State) error {
	if err := st.Validate(); err != nil {
		return err
	}
	cur, old, err := s.alertState(ctx, st.Name)
	if err != nil {
		return err
	}
	if cur.Version != st.Version || st.Version == math.MaxUint64 {
		return idkeeper.ErrConflict
	}
	rec, err := encodeRecord("alert state", alertRecord{Firing: st.Firing, Since: msOrZero(st.Since),
		LastSent: msOrZero(st.LastSent), Checked: msOrZero(st.Checked), Summary: st.Summary, Version: st.Version + 1})
	if err != nil {
		return err
	}
	if old == "" {
		added, err := s.client.HSetNX(ctx, s.adminKey(keyAlerts), st.Name, rec).Result()
		if err != nil {
			return fmt.Errorf("redis: put alert state: %w", err)
		}
		if !added {
			return idkeeper.ErrConflict
		}
		return nil
	}
	// user_update is a compare-and-set of one hash field: it replaces the record
	// only while it is still the one read.
	v, err := s.run(ctx, scriptUserUpdate, []string{s.adminKey(keyAlerts)}, false, st.Name, old, rec)
	if err != nil {
		return wrap("put alert state", err)
	}
	if v != int64(1) {
		return idkeeper.ErrConflict
	}
	return nil
}
