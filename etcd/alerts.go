package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
)

// The alert jobs' state (alert.StateStore): one JSON record per alert under
// alert/<name>, changed by compare and set on the key's revision. It is not part
// of a snapshot: a restored store alerts afresh.

var _ alert.StateStore = (*Store)(nil)

// alertRec is the JSON of an alert state; times are Unix ms (zero time: absent).
type alertRec struct {
	Firing   bool   `json:"firing,omitempty"`
	Since    int64  `json:"since,omitempty"`
	LastSent int64  `json:"lastSent,omitempty"`
	Checked  int64  `json:"checked,omitempty"`
	Summary  string `json:"summary,omitempty"`
	Version  uint64 `json:"version"`
}

// optMs is t in Unix ms, 0 for the zero time; optTime is its inverse.
func optMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return timeMs(t)
}

func optTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return msTime(ms)
}

func decodeAlert(name string, v []byte) (alert.State, error) {
	var r alertRec
	if err := json.Unmarshal(v, &r); err != nil {
		return alert.State{}, fmt.Errorf("etcd: corrupt alert state %q: %w", name, err)
	}
	return alert.State{Name: name, Firing: r.Firing, Since: optTime(r.Since), LastSent: optTime(r.LastSent),
		Checked: optTime(r.Checked), Summary: r.Summary, Version: r.Version}, nil
}

// AlertState implements alert.StateStore.
func (s *Store) AlertState(ctx context.Context, name string) (alert.State, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.k.alert+name)
	if err != nil {
		return alert.State{}, wrap("alert state", err)
	}
	if len(resp.Kvs) == 0 {
		return alert.State{Name: name}, nil
	}
	return decodeAlert(name, resp.Kvs[0].Value)
}

// PutAlertState implements alert.StateStore: compare and set on the record's
// key, the stored Version checked against s.Version.
func (s *Store) PutAlertState(ctx context.Context, st alert.State) error {
	if err := st.Validate(); err != nil {
		return err
	}
	if st.Version == math.MaxUint64 {
		return idkeeper.ErrConflict
	}
	return s.cas(ctx, "put alert state", s.k.alert+st.Name, func(v []byte, ok bool) (casOp, string, error) {
		var cur uint64
		if ok {
			old, err := decodeAlert(st.Name, v)
			if err != nil {
				return casKeep, "", err
			}
			cur = old.Version
		}
		if cur != st.Version {
			return casKeep, "", idkeeper.ErrConflict
		}
		rec, err := jsonString(alertRec{Firing: st.Firing, Since: optMs(st.Since), LastSent: optMs(st.LastSent),
			Checked: optMs(st.Checked), Summary: st.Summary, Version: st.Version + 1})
		return casPut, rec, err
	})
}
