package bolt

import (
	"context"
	"math"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
)

// bucketAlerts holds the alert jobs' state (alert.StateStore), keyed by alert
// name. It is not part of a snapshot: a restored store alerts afresh.
var bucketAlerts = []byte("alerts")

// encodeAlert is firing | since | lastSent | checked | summary | version.
func encodeAlert(s alert.State) []byte {
	return newRec(40 + len(s.Summary)).flag(s.Firing).ms(timeMs(s.Since)).ms(timeMs(s.LastSent)).
		ms(timeMs(s.Checked)).str(s.Summary).u64(s.Version)
}

func decodeAlert(name string, v []byte) (alert.State, error) {
	r := readRec("alert state "+name, v)
	s := alert.State{Name: name, Firing: r.flag(), Since: zeroOr(r.ms()), LastSent: zeroOr(r.ms()),
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

// AlertState implements alert.StateStore.
func (s *Store) AlertState(ctx context.Context, name string) (alert.State, error) {
	st := alert.State{Name: name}
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

// PutAlertState implements alert.StateStore.
func (s *Store) PutAlertState(ctx context.Context, st alert.State) error {
	if err := st.Validate(); err != nil {
		return err
	}
	return s.putVersioned(ctx, bucketAlerts, []byte(st.Name), st.Version,
		func(v []byte) (uint64, error) {
			old, err := decodeAlert(st.Name, v)
			return old.Version, err
		},
		func(next uint64) []byte {
			st.Version = next
			return encodeAlert(st)
		})
}

// putVersioned writes, in one transaction, the record at key of bucket when the
// stored one's version (version reads it; 0 when there is none) is want; encode
// makes the record of version want+1. ErrConflict, and nothing written, when the
// stored version is another or want is the largest there is.
func (s *Store) putVersioned(ctx context.Context, bucket, key []byte, want uint64,
	version func([]byte) (uint64, error), encode func(next uint64) []byte) error {
	if want == math.MaxUint64 {
		return idkeeper.ErrConflict
	}
	return s.update(ctx, nil, func(t *txn) error {
		b, err := writeBucket(t, bucket)
		if err != nil {
			return err
		}
		var cur uint64
		if v := b.Get(key); v != nil {
			if cur, err = version(v); err != nil {
				return err
			}
		}
		if cur != want {
			return idkeeper.ErrConflict
		}
		return b.Put(key, encode(want+1))
	})
}
