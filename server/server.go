// Package server assembles a registry server, once, for every program that runs
// one: `idkeeper server` and `idkeeper dev` fill a Config from their flags, the
// test harnesses (internal/harness/registrytest, the chaos suite's chaosserver)
// from code. Open binds the listeners first, so that a busy port fails before the
// store is touched; then it opens the store (OpenStore: one case per store
// adapter, each of which says what its own durability is), the replica state
// file and the receipt secret, builds the Registry engine with its admin web,
// audit log, alerts, backups, clock check, tracing and metrics, and serves the
// REST API. Serve runs until its context ends, serving fails or the clock check
// latches (a *ClockLatchedError: the process exits with ExitClockUnverified);
// Close drains the requests in flight and releases everything in order, the
// store last.
//
// The flag parsing stays with the programs: the server's errors that are
// mistakes in the configuration are *ConfigError, for which the binary exits
// with status 2.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/allowlist"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/internal/httpserve"
	"github.com/idkeeper/idkeeper/localstate"
	"github.com/idkeeper/idkeeper/protocol"
)

// DefaultShutdownTimeout is how long Close waits for requests in flight when
// Config.ShutdownTimeout is 0.
const DefaultShutdownTimeout = 20 * time.Second

// Server is an open registry server: store, replica state, registry engine and
// its jobs, and the HTTP listeners. Its methods are safe for concurrent use.
type Server struct {
	cfg        Config
	log        *slog.Logger
	lns        httpserve.Listeners
	adminLn    *httpserve.Service // the --admin-listen listener until the admin web serves it
	store      idkeeper.Store
	state      *localstate.File // nil with NoStateFile
	reg        *idkeeper.Registry
	promReg    *prometheus.Registry
	metrics    *idkhttp.Metrics
	durability *durabilityWatch   // decided at start, asked again while serving
	handler    http.Handler       // the API's, traced and wrapped
	api        *httpserve.Service // nil without a listener (Handler: the caller serves)
	metricsLn  *httpserve.Service // nil without MetricsListen
	web        *adminWeb          // nil with NoAdmin
	backups    *backupRunner      // nil without Backup.Dir
	alerts     *alerts            // nil with NoAdmin or a store without alert state
	clock      *clockCheck        // nil without ClockCheck.Agent
	traces     *httpserve.Traces

	// undo releases, in reverse order, what Open made so far; Open runs it when it
	// fails, Close replaces it by the ordered shutdown.
	undo      []httpserve.Step
	closeOnce sync.Once
	closeErr  error
}

// Open checks cfg, binds the listeners, opens the store (refusing a Redis that
// would lose acknowledged writes on a restart unless AcceptLostWrites), the
// replica state and the registry (which adopts the store's generation, recovers
// a reset store, or waits for `idkeeper init`), stores the bootstrap and admin
// API keys and the first admin before serving, and serves on the API listener.
// The settings are checked, and the listeners bound, before the store is
// touched: a setting out of range is a *ConfigError wrapping an
// *idkeeper.RangeError, a busy port an error naming it. A bolt file that does
// not exist is a *ConfigError naming `idkeeper init`, unless InitStore. On any
// error, everything Open made is released (OpenedStore closed too).
func Open(ctx context.Context, cfg Config) (_ *Server, err error) {
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.cfg.AdminUser == "" {
		s.cfg.AdminUser = DefaultAdminUser
	}
	if s.cfg.ShutdownTimeout == 0 {
		s.cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if s.cfg.Env == nil {
		s.cfg.Env = os.LookupEnv
	}
	if cfg.OpenedStore != nil {
		s.store = cfg.OpenedStore
		s.push("close the store", cfg.OpenedStore.Close)
	}
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	rc := s.cfg.Registry
	rc.Logger = s.log
	if err := s.cfg.Validate(); err != nil {
		return nil, err
	}
	if err := s.bind(); err != nil {
		return nil, err
	}
	if err := s.openStore(ctx); err != nil {
		return nil, err
	}
	if rc.Owner == "" {
		rc.Owner = idkeeper.DefaultOwner()
	}
	if err := s.startChecks(&rc); err != nil {
		return nil, err
	}
	if err := s.prepareStore(ctx, &rc); err != nil {
		return nil, err
	}
	if err := s.openRegistry(ctx, rc); err != nil {
		return nil, err
	}
	if err := s.startJobs(ctx); err != nil {
		return nil, err
	}
	if err := s.serve(); err != nil {
		return nil, err
	}
	s.clock.attach(s.reg, s.alerts)
	s.alerts.run(s.reg)
	s.logStart()
	return s, nil
}

// push adds a release step for what Open just made.
func (s *Server) push(what string, close func() error) {
	s.undo = append(s.undo, httpserve.Step{What: what, Close: close})
}

// pushStep adds a release step made elsewhere.
func (s *Server) pushStep(st httpserve.Step) { s.undo = append(s.undo, st) }

// release undoes a failed Open, newest first.
func (s *Server) release() {
	for i := len(s.undo) - 1; i >= 0; i-- {
		_ = s.undo[i].Close()
	}
	s.undo = nil
}

// bind binds the API listener (and the metrics one) and the admin web's: a
// busy port fails the start before a store file is made, a key written or the
// state file opened.
func (s *Server) bind() error {
	n := httpserve.Net{TLS: s.cfg.TLS, Metrics: s.cfg.MetricsListen}
	if s.cfg.Listen != "" {
		lns, err := n.BindAPI(s.cfg.Listen, s.log)
		if err != nil {
			return err
		}
		s.lns = lns
	}
	s.push("release the listeners", func() error { s.lns.Release(); return nil })
	if s.cfg.AdminListen != "" && !s.cfg.NoAdmin {
		ln, err := httpserve.Bind(s.cfg.AdminListen, s.cfg.TLS, s.log)
		if err != nil {
			return err
		}
		s.adminLn = ln
		s.push("release the admin listener", func() error { ln.Release(); return nil })
	}
	return nil
}

// openStore opens the store, unless one was given, and decides its durability.
func (s *Server) openStore(ctx context.Context) error {
	if s.store == nil {
		st, err := OpenStore(ctx, s.cfg.Store, StoreOptions{Logger: s.log, Clock: s.cfg.Clock, RedisPrefix: s.cfg.RedisPrefix,
			RedisWaitReplicas: s.cfg.RedisWait, Create: s.cfg.InitStore})
		if err != nil {
			return err
		}
		s.store = st
		s.push("close the store", st.Close)
	}
	d, err := checkDurability(ctx, s.store, s.cfg.AcceptLostWrites, s.log)
	if err != nil {
		return err
	}
	s.durability = newDurabilityWatch(d)
	s.durability.watch(s.store, s.cfg.AcceptLostWrites, s.log)
	s.push("stop the durability recheck", s.durability.Close)
	return nil
}

// startChecks starts the tracing and the clock check, whose first sample must
// pass before anything listens (DESIGN §8).
func (s *Server) startChecks(rc *idkeeper.Config) error {
	traces, err := httpserve.StartTracing(s.cfg.Env, "idkeeper-server", s.cfg.Version, s.log)
	if err != nil {
		return &ConfigError{err}
	}
	s.traces = traces
	s.pushStep(traces.Close())
	if t := traces.Store(); t != nil {
		rc.Tracer = t
	}
	s.promReg = httpserve.NewPromRegistry()
	clock, err := startClockCheck(s.cfg.ClockCheck, s.store, rc.Owner, s.promReg, s.log)
	if err != nil {
		return err
	}
	s.clock = clock
	s.pushStep(clock.close())
	if clock != nil {
		rc.ClockVerifier, rc.ClockDelta = clock.verifier(), s.cfg.ClockCheck.Delta
	}
	return nil
}

// prepareStore initialises the store when asked, fixes the pool's size to the
// stored one when asked, and opens the replica state and the receipt secret.
func (s *Server) prepareStore(ctx context.Context, rc *idkeeper.Config) error {
	if s.cfg.InitStore {
		spec := rc.Pool()
		if spec.Nodes == 0 {
			spec.Nodes = spec.LayoutOrDefault().Nodes() - int(spec.First)
		}
		if _, err := InitPool(ctx, s.store, spec, s.log); err != nil {
			return err
		}
	}
	if s.cfg.KeepStoredSize {
		// FixedPool keeps the size whenever the store is read, later ones and a
		// recovery included; Nodes is the size now, for the limits and the log.
		rc.FixedPool = true
		if st, err := s.store.Status(ctx); err == nil && st.Initialised && st.Pool.SameSpace(rc.Pool()) {
			rc.Nodes = st.Pool.Nodes
		}
	}
	if s.cfg.NoStateFile {
		return nil
	}
	state, err := openReplicaState(ctx, s.store, stateFileOptions{Spec: s.cfg.Store, Path: s.cfg.StateFile,
		Adopt: s.cfg.AdoptStateFile, Log: s.log})
	if err != nil {
		return err
	}
	s.state = state
	s.push("close the replica state", state.Close)
	rc.State = state
	if rc.ReceiptSecret != nil {
		return nil
	}
	secret, source, generated, err := receiptSecret(s.cfg.Env, s.cfg.ReceiptSecretFile,
		filepath.Join(filepath.Dir(state.Path()), ReceiptSecretName))
	if err != nil {
		return err
	}
	logReceiptSecret(s.log, s.cfg.Store, source, generated)
	rc.ReceiptSecret = secret
	return nil
}

// openRegistry builds the admin web and the alerts around the registry engine,
// and opens it: before it serves any generation it adopts, the keys and the
// first admin are stored (a store that lost its data lost them too).
func (s *Server) openRegistry(ctx context.Context, rc idkeeper.Config) error {
	if !s.cfg.NoAdmin {
		web, err := newAdminWeb(s.store, &s.cfg, s.log)
		if err != nil {
			return err
		}
		s.web = web
		web.wire(&rc)
		s.promReg.MustRegister(web.loginMetrics())
		if web.idem != nil {
			s.promReg.MustRegister(web.idem.Collector())
		}
	}
	s.metrics = idkhttp.NewMetrics(s.promReg)
	if !s.cfg.NoAdmin {
		al, err := newAlerts(s.cfg.Alerts, s.store, s.web.discord, rc.Owner, s.web.acc, s.promReg, s.log)
		if err != nil {
			return err
		}
		s.alerts = al
		s.pushStep(al.close())
	}
	if rc.Observer == nil {
		rc.Observer = s.metrics
	}
	rc.Observer = s.alerts.observer(rc.Observer, &s.reg)
	rc.OnAdopt = s.onAdopt
	reg, err := idkeeper.NewRegistry(s.store, rc)
	if err != nil {
		return err
	}
	s.reg = reg
	if err := reg.Open(ctx); err != nil {
		if e := (*idkeeper.Error)(nil); errors.As(err, &e) && e.Code == protocol.CodePoolMismatch {
			if st, serr := s.store.Status(ctx); serr == nil && st.Pool.Nodes > 0 {
				return PoolMismatch(st.Pool, reg.Config().Pool())
			}
		}
		return err
	}
	s.push("stop the registry", reg.Close)
	s.metrics.CollectPool(reg)
	return nil
}

// onAdopt is the registry's OnAdopt: the keys, the first admin, then the
// caller's own.
func (s *Server) onAdopt(ctx context.Context) error {
	c := s.cfg
	err := errors.Join(ensureBootstrapKey(ctx, s.reg, c.BootstrapAPIKey, s.log), ensureAdminKey(ctx, s.reg, c.AdminAPIKey, s.log))
	if s.web != nil {
		err = errors.Join(err, s.web.ensureFirstAdmin(ctx, c.AdminUser, c.AdminPassword, s.log))
	}
	if err == nil && c.OnAdopt != nil {
		err = c.OnAdopt(ctx, s.reg)
	}
	return err
}

// startJobs starts the backups and the admin web (its allow-list refresh).
func (s *Server) startJobs(ctx context.Context) error {
	if s.web == nil {
		return nil
	}
	owner := s.reg.Config().Owner
	backups, err := startBackups(s.cfg.Backup, s.store, StoreKind(s.cfg.Store), owner, s.web.acc, s.promReg, s.log,
		s.alerts.backupFailed(owner))
	if err != nil {
		return err
	}
	s.backups = backups
	s.pushStep(backups.close())
	s.web.backups = backups.Job()
	if err := s.web.start(ctx, s.reg, &s.cfg, s.durability.String, s.log); err != nil {
		return err
	}
	s.pushStep(s.web.close(time.Second))
	return nil
}

// serve builds the REST API and serves it, and the admin web on its own
// listener when there is one.
func (s *Server) serve() error {
	var onAPI http.Handler
	allow := (*allowlist.List)(nil)
	if s.web != nil {
		onAPI, allow = s.web.handler, s.web.allow
		if s.adminLn != nil {
			s.web.listen(s.adminLn, &s.cfg, s.log)
			s.adminLn, onAPI = nil, nil
		}
	}
	opts := idkhttp.Options{
		Logger:         s.log,
		AllowList:      allow,
		AllowedIPs:     s.cfg.AllowedIPs,
		Admin:          onAPI,
		TrustedProxies: s.cfg.TrustedProxies,
		Version:        s.cfg.Version,
		Commit:         s.cfg.Commit,
		Gatherer:       s.promReg,
		Metrics:        s.metrics,
		Durability:     s.durability.String,
		Clock:          s.cfg.ClockCheck.Describe(),
	}
	if allow != nil {
		opts.AllowedIPs = nil // the allow-list holds them as its floor
	}
	if s.cfg.API != nil {
		s.cfg.API(&opts)
	}
	api, err := idkhttp.NewServer(s.reg, opts)
	if err != nil {
		return err
	}
	h := s.traces.Handler(api.Handler(), "idkeeper-server")
	if s.cfg.Wrap != nil {
		h = s.cfg.Wrap(h)
	}
	s.handler = h
	if s.lns.API != nil {
		s.api, s.metricsLn = s.lns.Serve("the registry API", h, s.promReg, s.log)
		s.undo = nil // the listeners close with their services from now on
	}
	return nil
}

// logStart logs what the server serves, in one line.
func (s *Server) logStart() {
	reg, cfg := s.reg, s.cfg
	rcfg := reg.Config()
	adminAt := "/admin/ on this listener"
	switch {
	case s.web == nil:
		adminAt = "none"
	case s.web.web != nil:
		adminAt = s.web.web.Addr().String()
	}
	addr := "none: the caller serves Handler"
	if s.api != nil {
		addr = s.api.Addr().String()
	}
	warnNoKeyQuota(s.log, reg)
	s.log.Info("listening", "addr", addr, "admin", adminAt, "tls", cfg.TLS != nil, "store", RedactURL(cfg.Store),
		"version", cfg.Version, "commit", cfg.Commit, "phase", reg.Phase(), "stateFile", s.StatePath(),
		"nodes", rcfg.Nodes, "nodeRange", fmt.Sprintf("%d-%d", rcfg.First, int(rcfg.First)+rcfg.Nodes-1),
		"layout", rcfg.Layout.String(), "firstLease", rcfg.FirstLease, "leaseDuration", rcfg.LeaseDuration,
		"cleanupGrace", rcfg.Grace, "cleanupInterval", rcfg.CleanupInterval, "keyMaxNodesDefault", reg.DefaultKeyQuota(),
		"allowedIps", prefixList(cfg.AllowedIPs), "clock", cfg.ClockCheck.Describe())
}

// Addr is the address the API listens on; nil without a listener.
func (s *Server) Addr() net.Addr {
	if s.api == nil {
		return nil
	}
	return s.api.Addr()
}

// AdminAddr is the admin web's own listener's address; nil when /admin/ is on
// the API listener or there is no admin web.
func (s *Server) AdminAddr() net.Addr {
	if s.web == nil || s.web.web == nil {
		return nil
	}
	return s.web.web.Addr()
}

// Handler is the REST API's handler (the admin web included when it is on the
// API listener), for a caller that serves it itself (Config.Listen "").
func (s *Server) Handler() http.Handler { return s.handler }

// Registry is the registry engine the server serves.
func (s *Server) Registry() *idkeeper.Registry { return s.reg }

// Store is the store the server serves.
func (s *Server) Store() idkeeper.Store { return s.store }

// StatePath is the replica state file's path; "" with NoStateFile.
func (s *Server) StatePath() string {
	if s.state == nil {
		return ""
	}
	return s.state.Path()
}

// CreatedFirstAdmin reports whether this Open created the first admin account.
func (s *Server) CreatedFirstAdmin() bool { return s.web != nil && s.web.created.Load() }

// Serve serves until ctx ends, serving fails or the clock check fails, then
// shuts down (Close). After a failed clock check it returns a
// *ClockLatchedError (latch.go), whichever came first: the process exits with
// ExitClockUnverified.
func (s *Server) Serve(ctx context.Context) error {
	var serveErr error
	select {
	case <-ctx.Done():
		s.log.Info("stopping: draining requests in flight", "timeout", s.cfg.ShutdownTimeout)
	case serveErr = <-s.api.Served():
		s.log.Error("HTTP server failed", "err", serveErr)
	case serveErr = <-s.web.served():
		s.log.Error("admin web server failed", "err", serveErr)
	case <-s.clock.latched():
		return s.exitLatched()
	}
	err := s.Close()
	if f := s.clock.latchedFailure(); f != nil {
		// Latched while stopping: the status still says so, for the supervisor.
		if err != nil {
			s.log.Error("shut down after the clock check failed", "err", err)
		}
		return &ClockLatchedError{f}
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return errors.Join(serveErr, err)
	}
	return err
}

// Close stops accepting connections, waits for requests in flight (at most
// ShutdownTimeout), then stops the registry's jobs and closes the replica state
// and the store. Only the first call does it; later ones return its result.
func (s *Server) Close() error { return s.stop(s.cfg.ShutdownTimeout, nil) }

// stop is Close with a drain of its own (requests still in flight after it are
// cut) and, when more is not nil, one more step once the jobs have stopped,
// before the replica state (flushed, its lock released) and the store close.
func (s *Server) stop(drain time.Duration, more *httpserve.Step) error {
	s.closeOnce.Do(func() {
		steps := []httpserve.Step{
			httpserve.CloseMetrics(s.metricsLn),
			s.web.close(drain),
			s.backups.close(),
			s.alerts.close(),
			{What: "stop the registry", Close: s.reg.Close},
			s.clock.close(),
			s.traces.Close(),
			{What: "stop the durability recheck", Close: s.durability.Close},
		}
		if more != nil {
			steps = append(steps, *more)
		}
		if s.state != nil {
			steps = append(steps, httpserve.Step{What: "close the replica state", Close: s.state.Close})
		}
		steps = append(steps, httpserve.Step{What: "close the store", Close: s.store.Close})
		if s.api != nil {
			s.closeErr = s.api.Shutdown(drain, steps...)
		} else {
			s.closeErr = httpserve.RunSteps(steps...)
		}
		if s.closeErr == nil {
			s.log.Info("stopped")
		}
	})
	return s.closeErr
}
