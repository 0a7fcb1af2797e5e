package idkeeper_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

func TestPoolSpecValidate(t *testing.T) {
	l10 := idkeeper.Layout{Epoch: idkeeper.DefaultLayout.Epoch, TimestampBits: 41, NodeBits: 10, SequenceBits: 12}
	for _, p := range []idkeeper.PoolSpec{
		{Nodes: 1}, {Nodes: 4096}, {First: 4095, Nodes: 1}, {First: 100, Nodes: 4},
		{First: 1000, Nodes: 24, Layout: l10}, {Nodes: 1024, Layout: l10},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%s) = %v", p, err)
		}
	}
	for _, c := range []struct {
		p     idkeeper.PoolSpec
		field string
	}{
		{idkeeper.PoolSpec{Nodes: 0}, "nodes"},
		{idkeeper.PoolSpec{Nodes: 4097}, "nodes"},
		{idkeeper.PoolSpec{First: 4095, Nodes: 2}, "nodes"},
		{idkeeper.PoolSpec{First: -1, Nodes: 2}, "nodes"},
		{idkeeper.PoolSpec{First: 1000, Nodes: 25, Layout: l10}, "nodes"},
		{idkeeper.PoolSpec{Nodes: 4, Layout: idkeeper.Layout{Epoch: idkeeper.DefaultLayout.Epoch, TimestampBits: 41, NodeBits: 12, SequenceBits: 9}}, "layout"},
	} {
		var e *idkeeper.Error
		if err := c.p.Validate(); !errors.As(err, &e) || e.Code != protocol.CodeInvalidRequest || e.Field != c.field {
			t.Errorf("Validate(%+v) = %v, want INVALID_REQUEST on %q", c.p, err, c.field)
		}
	}
}

func TestLayoutText(t *testing.T) {
	l10 := idkeeper.Layout{Epoch: time.Date(2030, 6, 1, 12, 0, 0, 250e6, time.UTC), TimestampBits: 41, NodeBits: 10, SequenceBits: 12}
	for _, l := range []idkeeper.Layout{idkeeper.DefaultLayout, l10} {
		s := idkeeper.FormatLayout(l)
		got, err := idkeeper.ParseLayout(s)
		if err != nil || !idkeeper.SameLayout(got, l) || got != l {
			t.Errorf("ParseLayout(%q) = %+v, %v; want %+v", s, got, err, l)
		}
	}
	if s := idkeeper.FormatLayout(idkeeper.DefaultLayout); s != "41/12/10@2026-01-01T00:00:00.000Z" {
		t.Errorf("FormatLayout(DefaultLayout) = %q", s)
	}
	for _, s := range []string{
		"", "41/12/10", "41/12/10@", "41/12@2026-01-01T00:00:00.000Z", "41/12/10/0@2026-01-01T00:00:00.000Z",
		"041/12/10@2026-01-01T00:00:00.000Z", "+41/12/10@2026-01-01T00:00:00.000Z", "41/12/11@2026-01-01T00:00:00.000Z",
		"41/12/10@2026-01-01", "41/12/10@2026-01-01T00:00:00Z", "41/12/10@2026-01-01T01:00:00.000+01:00",
		"41/12/10@2026-01-01T00:00:00.0005Z", " 41/12/10@2026-01-01T00:00:00.000Z",
	} {
		if l, err := idkeeper.ParseLayout(s); err == nil {
			t.Errorf("ParseLayout(%q) = %+v, want an error", s, l)
		}
	}
}

func TestPoolChange(t *testing.T) {
	stored := idkeeper.PoolSpec{First: 100, Nodes: 4, Layout: idkeeper.DefaultLayout}
	if err := idkeeper.CheckPoolChange(idkeeper.PoolSpec{}, idkeeper.PoolSpec{First: 7, Nodes: 1}); err != nil {
		t.Errorf("a store without a pool refused: %v", err)
	}
	if err := idkeeper.CheckPoolChange(stored, idkeeper.PoolSpec{First: 100, Nodes: 9}); err != nil {
		t.Errorf("growing with the default layout left zero: %v", err)
	}
	var e *idkeeper.Error
	if err := idkeeper.CheckPoolChange(stored, idkeeper.PoolSpec{First: 100, Nodes: 3}); !errors.As(err, &e) ||
		e.Message != idkeeper.ShrinkRefused(4, 3).(*idkeeper.Error).Message {
		t.Errorf("a smaller pool: %v", err)
	}
	asked := idkeeper.PoolSpec{First: 0, Nodes: 3}
	err := idkeeper.CheckPoolChange(stored, asked)
	if !errors.As(err, &e) || e.Code != protocol.CodeInvalidRequest || e.Field != "nodes" ||
		!strings.Contains(e.Message, "node IDs 100-103 (4)") || !strings.Contains(e.Message, "node IDs 0-2 (3)") ||
		!strings.Contains(e.Message, "re-initialise deliberately") || e.Details["stored"] != stored.String() {
		t.Errorf("another First: %v (%+v)", err, e)
	}
	moved := idkeeper.DefaultLayout
	moved.Epoch = moved.Epoch.In(time.FixedZone("x", 3600)) // the same instant: the same layout
	if !stored.SameSpace(idkeeper.PoolSpec{First: 100, Layout: moved}) {
		t.Error("an epoch in another zone is another layout")
	}
	moved.Epoch = moved.Epoch.Add(time.Millisecond)
	if err := idkeeper.CheckPoolChange(stored, idkeeper.PoolSpec{First: 100, Nodes: 4, Layout: moved}); !errors.As(err, &e) || e.Field != "layout" {
		t.Errorf("another epoch: %v", err)
	}
}
