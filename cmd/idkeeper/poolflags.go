package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/snowflake"
)

// The flags that choose a registry's pool (issue #22): --nodes, --node-range,
// --layout and --epoch, on init, server and dev. A store records the node range and
// the layout when it is initialised and never changes them: a server or dev given
// another First or layout refuses to serve it (POOL_MISMATCH). Only the size may
// grow, upward from the same First.

// defaultEpochFlag is --epoch's default: DefaultLayout's epoch, as a date.
var defaultEpochFlag = idkeeper.DefaultLayout.Epoch.Format("2006-01-02")

// poolFlags binds --nodes, --node-range, --layout and --epoch.
type poolFlags struct {
	fs            *flag.FlagSet
	nodes         int
	nodeRange     string
	widths, epoch string
}

// register adds the four flags to fs; spec reads them after parseFlags.
func (p *poolFlags) register(fs *flag.FlagSet) {
	p.fs = fs
	fs.IntVar(&p.nodes, "nodes", idkeeper.DefaultLayout.Nodes(),
		"pool size: node IDs 0..nodes-1; 1..2^node bits (4096 on the default layout; not given: all of the layout's node IDs). With --node-range it must be the range's size")
	fs.StringVar(&p.nodeRange, "node-range", "",
		"the node IDs to grant, FIRST-LAST inclusive, e.g. 1024-2047: registries with disjoint ranges on separate stores never hand out the same node ID (default: 0..nodes-1)")
	fs.StringVar(&p.widths, "layout", idkeeper.DefaultLayout.Widths(),
		"the ID layout: timestamp/node/sequence bits, each positive, adding up to 63; fixed when the store is initialised")
	fs.StringVar(&p.epoch, "epoch", defaultEpochFlag,
		"the layout's epoch (millisecond 0 of the timestamp): a date (midnight UTC) or an RFC 3339 time to the millisecond; fixed when the store is initialised")
}

// given reports whether the flag name was set on the command line or from the
// environment (parseFlags sets both through the FlagSet).
func (p *poolFlags) given(name string) bool {
	found := false
	p.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// spec returns the pool the flags ask for, checked as PoolSpec.Validate checks it,
// or a usageError naming the flag. The layout is checked with Layout.Validate only;
// a new ID space (init, dev on a fresh store) is checked with checkNewLayout too.
// Without --node-range the pool is 0..nodes-1, and without --nodes it holds all
// of the layout's node IDs (at most MaxPoolNodes); with both, --nodes must be the
// range's size.
func (p *poolFlags) spec() (idkeeper.PoolSpec, error) {
	if _, err := snowflake.ParseEpoch(p.epoch); err != nil {
		return idkeeper.PoolSpec{}, usagef("--epoch: %v", err)
	}
	l, err := snowflake.ParseLayout(p.widths, p.epoch)
	if err != nil {
		return idkeeper.PoolSpec{}, usagef("--layout: %v", err)
	}
	spec := idkeeper.PoolSpec{Layout: l}
	switch {
	case p.nodeRange != "":
		first, last, err := parseNodeRange(p.nodeRange)
		if err != nil {
			return spec, usageError{err}
		}
		if last > l.MaxNode() {
			return spec, usagef("--node-range %s does not fit the layout %s: its %d node bits hold node IDs 0-%d (--layout)",
				p.nodeRange, l.Widths(), l.NodeBits, l.MaxNode())
		}
		if size := last - first + 1; size > idkeeper.MaxPoolNodes {
			return spec, usagef("--node-range %s holds %d node IDs; a pool holds at most %d", p.nodeRange, size, uint64(idkeeper.MaxPoolNodes))
		}
		spec.First, spec.Nodes = idkeeper.NodeID(first), int(last-first+1)
		if p.given("nodes") && p.nodes != spec.Nodes {
			return spec, usagef("--nodes %d and --node-range %s disagree: the range holds %d node IDs; give the range alone, or both alike",
				p.nodes, p.nodeRange, spec.Nodes)
		}
	case p.given("nodes"):
		most := min(l.Nodes(), idkeeper.MaxPoolNodes)
		if p.nodes < 1 || p.nodes > most {
			return spec, usageError{&idkeeper.RangeError{Setting: "nodes", Value: strconv.Itoa(p.nodes), Min: "1", Max: strconv.Itoa(most)}}
		}
		spec.Nodes = p.nodes
	default:
		spec.Nodes = min(l.Nodes(), idkeeper.MaxPoolNodes)
	}
	if err := spec.Validate(); err != nil {
		return spec, usagef("--node-range, --nodes, --layout: %v", err)
	}
	return spec, nil
}

// parseNodeRange reads --node-range: "FIRST-LAST", two decimal node IDs, FIRST ≤
// LAST, both included; ASCII spaces around either are ignored.
func parseNodeRange(s string) (first, last int64, err error) {
	a, b, ok := strings.Cut(s, "-")
	bad := func(why string) error {
		return fmt.Errorf("--node-range %q: %s; want FIRST-LAST, two node IDs with FIRST ≤ LAST, both included, as 1024-2047", s, why)
	}
	if !ok {
		return 0, 0, bad("no '-'")
	}
	first, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	last, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	switch {
	case errors.Join(err1, err2) != nil || first < 0 || last < 0:
		return 0, 0, bad("not two decimal node IDs of 0 or more")
	case first > last:
		return 0, 0, bad("FIRST is above LAST")
	}
	return first, last, nil
}
