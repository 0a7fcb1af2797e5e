// Command chaosserver is the registry server of the fault-injection suite's
// negative controls (internal/harness/chaos): the production registry engine and REST API
// on a Redis store wrapped by one of the store controls of package
// internal/harness/chaos/controls (--control), which switches one safety mechanism off
// from outside. It always allows leases of seconds. It takes the flags of
// `idkeeper server` that the suite uses, and IDKEEPER_BOOTSTRAP_API_KEY and
// IDKEEPER_RECEIPT_SECRET from the environment. SIGTERM or SIGINT stops it. Never
// deploy it: `idkeeper server` is the registry server.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/chaos/controls"
	"github.com/idkeeper/idkeeper/internal/shortlease"
	"github.com/idkeeper/idkeeper/redis"
	"github.com/idkeeper/idkeeper/server"
)

func main() {
	var (
		listen, store, stateFile, control string
		cfg                               idkeeper.Config
	)
	flag.StringVar(&listen, "listen", "127.0.0.1:0", "address of the REST API, host:port")
	flag.StringVar(&store, "store", "", "the Redis store, redis://HOST:PORT/DB")
	flag.StringVar(&stateFile, "state-file", "", "the replica's state file, kept across its restarts")
	flag.StringVar(&control, "control", "", "the store control: "+controls.NoResetQuarantine+" or "+controls.StaleReclaim)
	flag.DurationVar(&cfg.FirstLease, "first-lease", 2*time.Second, "length of a new lease")
	flag.DurationVar(&cfg.LeaseDuration, "lease-duration", 3*time.Second, "length a Renew extends a lease to")
	flag.DurationVar(&cfg.Grace, "cleanup-grace", time.Second, "cleanup grace period")
	flag.DurationVar(&cfg.CleanupInterval, "cleanup-interval", time.Second, "period of the cleanup job")
	flag.IntVar(&cfg.Nodes, "nodes", 64, "pool size")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, log, listen, store, stateFile, control, cfg); err != nil {
		log.Error("chaosserver: " + err.Error())
		os.Exit(1)
	}
}

// run serves the registry on the store control until ctx ends, assembled by
// package server as `idkeeper server` is, without the admin web, the alerts and
// the backups; the control's store is no admin store.
func run(ctx context.Context, log *slog.Logger, listen, storeURL, stateFile, control string, cfg idkeeper.Config) error {
	if storeURL == "" || stateFile == "" || control == "" {
		return errors.New("--store, --state-file and --control are required")
	}
	rs, err := redis.Open(storeURL, redis.Options{Logger: log})
	if err != nil {
		return err
	}
	store, err := controls.Wrap(rs, control)
	if err != nil {
		_ = rs.Close()
		return err
	}
	shortlease.Allow(&cfg)
	srv, err := server.Open(ctx, server.Config{
		Listen:          listen,
		Store:           storeURL,
		OpenedStore:     store,
		Registry:        cfg,
		StateFile:       stateFile,
		BootstrapAPIKey: os.Getenv(server.BootstrapKeyEnv),
		NoAdmin:         true,
		// The suite chooses the Redis persistence it tests; a control is no
		// judge of it.
		AcceptLostWrites: true,
		ShutdownTimeout:  2 * time.Second,
		Logger:           log,
	})
	if err != nil {
		return err
	}
	log.Warn("chaosserver listening: a negative control of the fault-injection suite, never a registry to use",
		"addr", srv.Addr().String(), "control", control)
	return srv.Serve(ctx)
}
