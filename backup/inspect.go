package backup

import (
	"context"
	"errors"
	"io"

	"github.com/idkeeper/idkeeper/snapshot"
)

// Contents is what one snapshot holds, as a restore preview shows it (issue
// #29): the records by kind, the users with a webhook URL set (the alert
// settings), and the node IDs free and leased in it. A restore of a backup
// quarantines its Free node IDs and keeps its Leased ones for their holders.
type Contents struct {
	Counts
	Webhooks     int // users with a Discord webhook URL
	Free, Leased NodeRanges
}

func (c *Contents) add(rec snapshot.Record) {
	switch {
	case rec.Node != nil && rec.Node.Lease == nil:
		c.Free.add(rec.Node.NodeID)
	case rec.Node != nil:
		c.Leased.add(rec.Node.NodeID)
	case rec.User != nil && rec.User.Webhook != "":
		c.Webhooks++
	}
}

// Inspect reads the whole backup r, checking it as Verify does, and returns its
// summary and contents. Errors are Verify's.
func Inspect(r io.Reader, opts ...Option) (Summary, Contents, error) {
	o := collect(opts)
	rd, err := NewReader(r)
	if err != nil {
		return Summary{}, Contents{}, err
	}
	var c Contents
	for n := 1; ; n++ {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			sum := rd.Summary()
			c.Counts = sum.Counts
			return sum, c, nil
		}
		if err != nil {
			return rd.Summary(), c, err
		}
		c.add(rec)
		o.progress(n)
	}
}

// Tally reads the snapshot of s and returns its contents: what a restore into s
// would replace. It reads as Export does, one consistent view, and holds no
// record; unlike Export it checks none (a preview must not fail on what the
// restore replaces anyway). Errors: STORE_NOT_INITIALISED, or the store's.
func Tally(ctx context.Context, s snapshot.Store) (Contents, error) {
	var c Contents
	err := s.ReadSnapshot(ctx, func(snapshot.Meta) error { return nil }, func(rec snapshot.Record) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case rec.Node != nil:
			c.Nodes++
			if rec.Node.Lease != nil {
				c.Leases++
			}
		case rec.Key != nil:
			c.Keys++
		case rec.User != nil:
			c.Users++
		case rec.Allow != nil:
			c.Allow++
		case rec.Audit != nil:
			c.Audit++
		case rec.History != nil:
			c.History++
		}
		c.add(rec)
		return nil
	})
	return c, err
}
