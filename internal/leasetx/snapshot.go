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
