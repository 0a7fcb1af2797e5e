package bolt

import (
	"context"
	"math"
	"time"

	"github.com/idkeeper/idkeeper"
)

// bucketAlerts holds the alert jobs' state (idkeeper.AlertStore), keyed by alert
// name. It is not part of a snapshot: a restored store alerts afresh.
var bucketAlerts = []byte("alerts")

// encodeAlert is firing | since | lastSent | checked | summary | version.
func encodeAlert(s idkeeper.AlertState) []byte {
	return newRec(40 + len(s.Summary)).flag(s.Firing).ms(timeMs(s.Since)).ms(timeMs(s.LastSent)).
		ms(timeMs(s.Checked)).str(s.Summary).u64(s.Version)
}

func decodeAlert(name string, v []byte) (idkeeper.AlertState, error) {
	r := readRec("alert state "+name, v)
	s := idkeeper.AlertState{Name: name, Firing: r.flag(), Since: zeroOr(r.ms()), LastSent: zeroOr(r.ms()),
		Checked: zeroOr(r.ms()), Summary: r.str(), Version: r.u64()}
	return s, r.end()
}

// zeroOr reads back a time written by timeMs: the zero time stays zero.
func zeroOr(ms int64) time.Time {
	if ms == zeroMs {
		return time.Time{}
	}
	return msTime(ms)
}

// AlertState implements idkeeper.AlertStore.
func (s *Store) AlertState(ctx context.Context, name string) (idkeeper.AlertState, error) {
	st := idkeeper.AlertState{Name: name}
	err := s.view(ctx, func(t *txn) error {
		b := t.tx.Bucket(bucketAlerts)
		if b == nil {
			return nil
		}
		v := b.Get([]byte(name))
		if v == nil {
			return nil
		}
		var err error
		st, err = decodeAlert(name, v)
		return err
	})
	return st, err
}

// PutAlertState implements idkeeper.AlertStore.
func (s *Store) PutAlertState(ctx context.Context, st idkeeper.AlertState) error {
	if err := st.Validate(); err != nil {
		return err
	}
	if st.Version == math.MaxUint64 {
		return idkeeper.ErrConflict
	}
	return s.update(ctx, nil, func(t *txn) error {
		b, err := writeBucket(t, bucketAlerts)
		if err != nil {
			return err
		}
		var cur uint64
		if v := b.Get([]byte(st.Name)); v != nil {
			old, err := decodeAlert(st.Name, v)
			if err != nil {
				return err
			}
			cur = old.Version
		}
		if cur != st.Version {
			return idkeeper.ErrConflict
		}
		st.Version++
		return b.Put([]byte(st.Name), encodeAlert(st))
	})
}
