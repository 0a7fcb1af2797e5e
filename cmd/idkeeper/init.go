package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/idkeeper/idkeeper"
)

const initUsage = `Usage: idkeeper init --store … [--nodes N]

Initialises an empty store once, for a new deployment (DESIGN §7): it creates the
pool of node IDs and the store's first generation. On a store that is initialised
already it changes nothing and says so (the server's --nodes grows a pool).

A registry never initialises a store by itself: an empty store may be one that
lost everything, whose leases running processes still mint with. Run init only for
a store that never held leases; a registry that saw a store before recovers it on
its own when it finds it empty.
`

// runInit is the init command.
func runInit(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	fs := newFlagSet("init", stderr)
	var kf keyStoreFlags
	kf.register(fs)
	nodes := fs.Int("nodes", idkeeper.DefaultLayout.Nodes(), "pool size: node IDs 0..nodes-1; 1.."+strconv.Itoa(idkeeper.DefaultLayout.Nodes()))
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, initUsage)
		return nil
	}
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if *nodes < 1 || *nodes > idkeeper.DefaultLayout.Nodes() {
		return usageError{&idkeeper.RangeError{Setting: "nodes", Value: strconv.Itoa(*nodes), Min: "1", Max: strconv.Itoa(idkeeper.DefaultLayout.Nodes())}}
	}
	s, err := kf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := initStore(ctx, s, *nodes, kf.log.logger(stderr))
	if err != nil {
		return err
	}
	g := res.Generation
	if res.Fresh {
		fmt.Fprintf(stdout, "initialised %s: generation %d (%s), %d node IDs\n", redactURL(kf.store), g.Number, g.ID, *nodes)
	} else {
		fmt.Fprintf(stdout, "%s is initialised already: generation %d (%s, origin %s, since %s); nothing changed\n",
			redactURL(kf.store), g.Number, g.ID, g.Origin, g.At.Format("2006-01-02T15:04:05Z"))
	}
	return nil
}

// initStore initialises an empty store, as LeaseStore.Init says, and logs what it
// did; an initialised store it leaves as it is.
func initStore(ctx context.Context, s idkeeper.Store, nodes int, log *slog.Logger) (idkeeper.InitResult, error) {
	st, err := s.Status(ctx)
	if err != nil {
		return idkeeper.InitResult{}, fmt.Errorf("read the store: %w", err)
	}
	if st.Initialised {
		return idkeeper.InitResult{Generation: st.Generation}, nil
	}
	res, err := s.Init(ctx, nodes)
	if err != nil {
		return res, fmt.Errorf("initialise the store: %w", err)
	}
	if res.Fresh {
		log.Info("initialised a new store", "generation", res.Generation.Number, "id", res.Generation.ID, "nodes", nodes)
	}
	return res, nil
}
