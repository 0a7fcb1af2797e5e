package storetest

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/protocol"
)

// AlertFactory opens a new, empty AlertStore. It registers the store's Close with
// t.Cleanup.
type AlertFactory func(t *testing.T) alert.StateStore

// RunAlerts runs the contract suite of alert.StateStore as subtests of t.
func RunAlerts(t *testing.T, open AlertFactory) {
	t.Run("ReadPutVersion", func(t *testing.T) { testAlertReadPut(t, open(t)) })
	t.Run("Validate", func(t *testing.T) { testAlertValidate(t, open(t)) })
	t.Run("ConcurrentPuts", func(t *testing.T) { testAlertConcurrent(t, open(t)) })
}

func testAlertReadPut(t *testing.T, s alert.StateStore) {
	st, err := s.AlertState(ctx0, "capacity")
	must(t, err)
	if st != (alert.State{Name: "capacity"}) {
		t.Fatalf("AlertState of a state never stored = %+v, want only the name", st)
	}
	put := alert.State{Name: "capacity", Firing: true, Since: t0.Add(1500 * time.Microsecond),
		LastSent: t0.Add(2 * time.Second), Checked: t0.Add(3 * time.Second), Summary: "12 of 4096 node IDs remain"}
	must(t, s.PutAlertState(ctx0, put))
	got, err := s.AlertState(ctx0, "capacity")
	must(t, err)
	want := put
	want.Since, want.Version = t0.Add(time.Millisecond), 1
	if got.Name != want.Name || got.Firing != want.Firing || !got.Since.Equal(want.Since) || !got.LastSent.Equal(want.LastSent) ||
		!got.Checked.Equal(want.Checked) || got.Summary != want.Summary || got.Version != 1 {
		t.Fatalf("AlertState after a put:\n got %+v\nwant %+v (times to the millisecond)", got, want)
	}
	wantErr(t, "PutAlertState over a version not stored", s.PutAlertState(ctx0, put), idkeeper.ErrConflict)
	stale := got
	stale.Version = 7
	wantErr(t, "PutAlertState over a later version", s.PutAlertState(ctx0, stale), idkeeper.ErrConflict)

	// Clearing: zero times read back as zero times.
	cleared := got
	cleared.Firing, cleared.Since, cleared.LastSent, cleared.Summary = false, time.Time{}, time.Time{}, ""
	must(t, s.PutAlertState(ctx0, cleared))
	got, err = s.AlertState(ctx0, "capacity")
	must(t, err)
	if got.Firing || !got.Since.IsZero() || !got.LastSent.IsZero() || got.Summary != "" || got.Version != 2 || !got.Checked.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("AlertState after clearing = %+v", got)
	}
	// Another alert is another record.
	other, err := s.AlertState(ctx0, "clock-skew")
	must(t, err)
	wantEqual(t, "another alert's state", other.Version, uint64(0))
}

func testAlertValidate(t *testing.T, s alert.StateStore) {
	for _, st := range []alert.State{
		{Name: ""},
		{Name: strings.Repeat("n", alert.MaxNameLen+1)},
		{Name: "capacity", Summary: strings.Repeat("s", alert.MaxSummaryLen+1)},
	} {
		err := s.PutAlertState(ctx0, st)
		if protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
			t.Errorf("PutAlertState(name %d bytes, summary %d bytes) = %v, want INVALID_REQUEST", len(st.Name), len(st.Summary), err)
		}
	}
	st, err := s.AlertState(ctx0, "capacity")
	must(t, err)
	wantEqual(t, "version after refused puts", st.Version, uint64(0))
}

// Of writers that read the same version, exactly one wins.
func testAlertConcurrent(t *testing.T, s alert.StateStore) {
	const writers = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, lost := 0, 0
	for i := range writers {
		wg.Go(func() {
			err := s.PutAlertState(ctx0, alert.State{Name: "capacity", Firing: true, Summary: strings.Repeat("x", i)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, idkeeper.ErrConflict):
				lost++
			default:
				t.Errorf("PutAlertState: %v", err)
			}
		})
	}
	wg.Wait()
	if won != 1 || lost != writers-1 {
		t.Fatalf("%d writers of version 0: %d won, %d lost; want 1 and %d", writers, won, lost, writers-1)
	}
	st, err := s.AlertState(ctx0, "capacity")
	must(t, err)
	wantEqual(t, "version", st.Version, uint64(1))
}
