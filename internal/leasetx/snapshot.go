package leasetx

import (
	"context"
	"errors"
	"io"

	"github.com/idkeeper/idkeeper/snapshot"
)

// CtxEvery is how many records a snapshot load reads between two checks of its
// context.
const CtxEvery = 1024

// Feed reads src to its end (io.EOF) for a snapshot load
// (snapshot.Store.LoadSnapshot): each record is checked by chk, then
// handed to add; at the end chk.Done checks what the snapshot promised. It
// returns the number of records read. An error of src or add is returned as it
// is, as is ctx's, checked every CtxEvery records; nothing is swapped in by Feed,
// so the caller drops its staging on any error.
func Feed(ctx context.Context, chk *snapshot.Checker, src snapshot.Source, add func(snapshot.Record) error) (int, error) {
	records := 0
	for {
		rec, err := src.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return records, err
		}
		if err := chk.Check(rec); err != nil {
			return records, err
		}
		if records++; records%CtxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return records, err
			}
		}
		if err := add(rec); err != nil {
			return records, err
		}
	}
	return records, chk.Done()
}

// Staging is where a snapshot load stages the records before they replace the
// live state, as the store keeps it.
type Staging struct {
	Start  func() error                // makes the staging area
	Add    func(snapshot.Record) error // stages one record
	Finish func() error                // stages what is left, once every record was added
	Swap   func() error                // swaps the staging in, in one transaction
	Drop   func()                      // drops the staging, after an error
}

// Load stages the snapshot of src for a snapshot load
// (snapshot.Store.LoadSnapshot): Start, every record (Feed), Finish,
// then Swap. An error after Start drops the staging, so the live state stays as
// it was. It returns the number of records read.
func Load(ctx context.Context, chk *snapshot.Checker, src snapshot.Source, st Staging) (int, error) {
	if err := st.Start(); err != nil {
		return 0, err
	}
	swapped := false
	defer func() {
		if !swapped {
			st.Drop()
		}
	}()
	records, err := Feed(ctx, chk, src, st.Add)
	if err != nil {
		return records, err
	}
	if err := st.Finish(); err != nil {
		return records, err
	}
	if err := st.Swap(); err != nil {
		return records, err
	}
	swapped = true
	return records, nil
}
