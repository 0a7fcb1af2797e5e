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
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idkeeper/idkeeper"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/internal/harness/chaos/controls"
	"github.com/idkeeper/idkeeper/internal/shortlease"
	"github.com/idkeeper/idkeeper/localstate"
	"github.com/idkeeper/idkeeper/redis"
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

func run(ctx context.Context, log *slog.Logger, listen, storeURL, stateFile, control string, cfg idkeeper.Config) error {
	if storeURL == "" || stateFile == "" || control == "" {
		return errors.New("--store, --state-file and --control are required")
	}
	rs, err := redis.Open(storeURL, redis.Options{Logger: log})
	if err != nil {
		return err
	}
	defer rs.Close()
	store, err := controls.Wrap(rs, control)
	if err != nil {
		return err
	}
	state, err := localstate.Open(stateFile)
	if err != nil {
		return err
	}
	defer state.Close()
	key := os.Getenv("IDKEEPER_BOOTSTRAP_API_KEY")
	cfg.State, cfg.Logger = state, log
	cfg.ReceiptSecret = []byte(os.Getenv("IDKEEPER_RECEIPT_SECRET"))
	shortlease.Allow(&cfg)
	var reg *idkeeper.Registry
	cfg.OnAdopt = func(ctx context.Context) error {
		_, _, err := reg.EnsureBootstrapKey(ctx, key)
		return err
	}
	if reg, err = idkeeper.NewRegistry(store, cfg); err != nil {
		return err
	}
	if err := reg.Open(ctx); err != nil {
		return err
	}
	defer reg.Close()
	api, err := idkhttp.NewServer(reg, idkhttp.Options{Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: api.Handler()}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Warn("chaosserver listening: a negative control of the fault-injection suite, never a registry to use",
		"addr", ln.Addr().String(), "control", control)
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
