package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/server"
)

const initUsage = `Usage: idkeeper init --store … [--nodes N | --node-range FIRST-LAST] [--layout T/N/S] [--epoch DATE]

Initialises an empty store once, for a new deployment (DESIGN §7): it creates the
pool of node IDs and the store's first generation. The pool is the node IDs
FIRST..LAST (--node-range; default 0..nodes-1) on the ID layout --layout and
--epoch (default 41/12/10 from 2026-01-01); the store keeps both for good: a server
given another range or layout refuses to serve it. A new layout must have its
epoch not after now and its range end at least 10 years from now.

On a store that is initialised already it changes nothing and says so (the
server's --nodes or --node-range grows a pool upward); asked for another node
range or layout than the store's, it says so and fails.

A registry never initialises a store by itself: an empty store may be one that
lost everything, whose leases running processes still mint with. Run init only for
a store that never held leases; a registry that saw a store before recovers it on
its own when it finds it empty.

--unless-seen DIR|FILE (repeatable) makes init safe to run on every start: it
initialises an empty store only when none of the replica state files there (a
registry's state volume or state file; each must exist) saw a generation of this
store. When one saw it, the store was lost, not new: init leaves it alone, warns
and exits 0, and the registries that saw it recover it when they start. A path
that is missing or a state file that cannot be read fails (exit 1, nothing
changed). Compose runs it so (docs/deploy.md).
`

// runInit is the init command.
func runInit(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	fs := newFlagSet("init", stderr)
	var kf keyStoreFlags
	kf.register(fs)
	var pf poolFlags
	pf.register(fs)
	unlessSeen := registerUnlessSeen(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, initUsage+"\n")
		printFlags(stderr, fs)
	}
	if len(args) > 0 && args[0] == "help" {
		args = []string{"-h"}
	}
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	spec, err := pf.spec()
	if err != nil {
		return err
	}
	// init creates an ID space: its layout must serve for years from now.
	if err := server.CheckNewLayout(spec, time.Now()); err != nil {
		return err
	}
	kf.create = true // init is what makes a new bolt store
	s, err := kf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	if seen, err := guardEmptyStore(ctx, s, kf.store, *unlessSeen, kf.log.logger(stderr)); err != nil {
		return err
	} else if seen != "" {
		fmt.Fprintln(stdout, seen)
		return nil
	}
	res, err := server.InitPool(ctx, s, spec, kf.log.logger(stderr))
	if err != nil {
		return err
	}
	g := res.Generation
	if res.Fresh {
		fmt.Fprintf(stdout, "initialised %s: generation %d (%s), %s\n", server.RedactURL(kf.store), g.Number, g.ID, spec)
	} else {
		fmt.Fprintf(stdout, "%s is initialised already: generation %d (%s, origin %s, since %s); nothing changed\n",
			server.RedactURL(kf.store), g.Number, g.ID, g.Origin, wire.FormatTime(g.At))
	}
	return nil
}
