package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/localstate"
	"github.com/idkeeper/idkeeper/protocol"
)

// BootstrapKeyEnv names the environment variable whose value the server stores as
// an API key at start-up (and again after a store reset) when it is not there yet.
// It is an environment variable only: a flag would show the secret in ps.
const BootstrapKeyEnv = "IDKEEPER_BOOTSTRAP_API_KEY"

// AdminKeyEnv names the environment variable whose value the server stores as an
// admin API key (for the admin API, /admin/api/) as it stores the bootstrap key;
// `idkeeper apikey … --server` reads the same variable.
const AdminKeyEnv = "IDKEEPER_ADMIN_API_KEY"

// serverConfig is everything a registry server is built from. runServer fills it
// from flags and the environment; other commands (idkeeper dev) can fill it
// themselves and call startRegistryServer.
type serverConfig struct {
	Listen          string // host:port; ":0" picks a free port
	Store           string // see openStore
	RedisPrefix     string
	RedisWait       int             // replicas every Alloc and Renew waits for; 0: none
	Registry        idkeeper.Config // lease policy; Logger, Observer and OnAdopt are set by startRegistryServer
	AllowedIPs      []netip.Prefix
	TrustedProxies  []netip.Prefix
	BootstrapAPIKey string // stored as an API key when absent; empty: none
	AdminAPIKey     string // stored as an admin API key when absent; empty: none
	// AdminUser and AdminPassword are the first admin, created when the store holds
	// no account (AdminPasswordEnv); an empty password creates none.
	AdminUser, AdminPassword string
	// AdminListen, when set, serves the admin web (/admin/) on this host:port
	// instead of the API listener.
	AdminListen string
	// Accounts are the admin web's session timeouts; the Logger is set by
	// startRegistryServer.
	Accounts        account.Config
	ShutdownTimeout time.Duration
	Version, Commit string
	Logger          *slog.Logger
	Clock           idkeeper.Clock // the bolt store's clock; time.Now when nil
	// StateFile keeps what this replica must remember across restarts (DESIGN §7);
	// empty: defaultStateFile. It belongs to one store (openReplicaState).
	StateFile string
	// AdoptStateFile takes StateFile for this store's whatever store it records.
	AdoptStateFile bool
	// ReceiptSecretFile holds the receipt secret when IDKEEPER_RECEIPT_SECRET is not
	// set; empty: a secret generated beside the state file.
	ReceiptSecretFile string
	// AcceptLostWrites starts the server on a Redis whose settings lose
	// acknowledged writes on a restart, which it refuses otherwise.
	AcceptLostWrites bool
	// InitStore initialises an empty store at start, as `idkeeper init` does: for
	// dev's own embedded store only.
	InitStore bool
	// KeepStoredSize serves an initialised store's pool at the size it has instead
	// of Registry.Nodes, never growing it: no --nodes or --node-range was given. A
	// pool grows only when asked to (issue #22): a default must not extend a
	// region's range into another's.
	KeepStoredSize bool
	// Env reads secrets from the environment; os.LookupEnv when nil.
	Env lookupEnv
	// Net is the listeners' TLS and the metrics listener.
	Net listen
	// Backup is the backup folder, schedule and retention (backupjob.go); no
	// Dir: no backups.
	Backup backupConfig
	// Alerts are the Discord alerts' settings (alerts.go).
	Alerts alertConfig
	// ClockCheck is the cluster clock check (clock.go); no Agent: none.
	ClockCheck clockConfig
}

// serverFlags binds the server command's flags to a serverConfig.
type serverFlags struct {
	cfg                                                      serverConfig
	log                                                      logFlags
	listen                                                   listenFlags
	store                                                    *secretFlag
	firstLease, leaseDuration, grace, cleanupInterval, drain time.Duration
	auditRetention, sessionIdle, sessionAbsolute             time.Duration
	historyRetention                                         time.Duration
	pool                                                     poolFlags
	unsafe                                                   unsafeFlags
	backup                                                   backupFlags
	alerts                                                   alertFlags
	clock                                                    clockFlags
	keyQuota                                                 keyQuotaFlag
}

func (f *serverFlags) register(fs *flag.FlagSet) {
	c := &f.cfg
	fs.StringVar(&c.Listen, "listen", ":8080", "address to serve the REST API on, host:port")
	f.store = secretVar(fs, &c.Store, "store", DefaultStore, "the store: bolt:PATH (a file idkeeper init made), redis://[:PASSWORD@]HOST:PORT/DB, redis+sentinel://SENTINEL:PORT/DB?master_name=NAME&addr=…, redis+cluster://NODE:PORT?addr=… (rediss… with TLS), etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]/PREFIX (etcds… with TLS)", urlHasPassword)
	fs.StringVar(&c.RedisPrefix, "redis-prefix", "", "prefix of every Redis key, to share one Redis between registries (default: the redis package's)")
	fs.IntVar(&c.RedisWait, "redis-wait-replicas", 0, "Redis replicas that must acknowledge every Alloc and Renew (WAIT) before it is answered; 0: none")
	fs.DurationVar(&f.leaseDuration, "lease-duration", idkeeper.DefaultLeaseDuration, "length a Renew extends a lease to; first-lease..8760h")
	fs.DurationVar(&f.firstLease, "first-lease", idkeeper.DefaultFirstLease, "length of a new lease before its first Renew; 1m..20m")
	fs.DurationVar(&f.grace, "cleanup-grace", idkeeper.DefaultGrace, "how long past expiry a lease keeps its node ID before cleanup reclaims it; 0..1h (0: no grace, clock skew only logged)")
	fs.DurationVar(&f.cleanupInterval, "cleanup-interval", idkeeper.DefaultCleanupInterval, "period of the cleanup job; 1s..1h")
	f.pool.register(fs)
	f.keyQuota.register(fs)
	fs.Var(prefixesFlag{&c.AllowedIPs}, "allowed-ips", "comma-separated CIDR prefixes or addresses always allowed to use API keys (/v1, the admin API): the floor of the IP allow-list, to which the admin web adds entries; no floor and no entries: all")
	fs.Var(prefixesFlag{&c.TrustedProxies}, "trusted-proxies", "comma-separated CIDR prefixes of reverse proxies whose X-Forwarded-For is believed")
	fs.StringVar(&c.StateFile, "state-file", "", "file where this replica keeps what it must remember across restarts to detect a store that lost writes (default: beside the bolt file, named after it, or ./data/"+stateFileName+"-<digest of the store>); it belongs to one store")
	fs.BoolVar(&c.AdoptStateFile, "adopt-state-file", false, "take --state-file for this store's even though it records another store, or was written before state files recorded their store and saw another generation; a generation it saw that the store lost is then a reset")
	fs.StringVar(&c.ReceiptSecretFile, "receipt-secret-file", "", "file holding the secret (at least 32 bytes, the same on every replica) that signs lease receipts; "+ReceiptSecretEnv+" may hold it instead (default: one generated beside the state file)")
	fs.BoolVar(&c.AcceptLostWrites, "accept-lost-writes-on-redis-restart", false, "start even though Redis persists too little to keep acknowledged grants over a restart (no AOF, or appendfsync not always without --redis-wait-replicas); every such restart then quarantines the whole pool for lease + grace")
	fs.DurationVar(&f.drain, "shutdown-timeout", 20*time.Second, "how long a stopping server waits for requests in flight")
	fs.StringVar(&c.AdminListen, "admin-listen", "", "serve the admin web (/admin/) on this host:port, with the API's TLS settings, instead of the API listener")
	fs.StringVar(&c.AdminUser, "admin-user", DefaultAdminUser, "name of the first admin, created with the password in "+AdminPasswordEnv+" (or "+AdminPasswordEnv+"_FILE) when the store holds no account")
	fs.DurationVar(&f.auditRetention, "audit-retention", idkeeper.DefaultAuditRetention, "how long audit log entries are kept; at least 1h")
	fs.DurationVar(&f.historyRetention, "history-retention", idkeeper.DefaultHistoryRetention,
		"how long the lease history keeps a lease after it ended (which process minted an ID); at least 1h")
	fs.DurationVar(&f.sessionIdle, "session-idle-timeout", account.DefaultIdleTimeout, "an admin web session unused this long ends; 1m..24h")
	fs.DurationVar(&f.sessionAbsolute, "session-absolute-timeout", account.DefaultAbsoluteTimeout, "an admin web session ends this long after its login, however busy; session-idle-timeout..720h")
	f.log.register(fs)
	f.listen.register(fs)
	f.unsafe.register(fs)
	f.backup.register(fs)
	f.alerts.register(fs)
	f.clock.register(fs)
}

// config checks the lease settings and returns the serverConfig. A zero or negative
// duration or pool size is out of range here: in idkeeper.Config a zero means "the
// default", which is not what an operator who typed 0 asked for.
func (f *serverFlags) config(env lookupEnv, stderr io.Writer) (serverConfig, error) {
	c := f.cfg
	for _, chk := range []struct {
		bad      bool
		name     string
		val      string
		min, max string
	}{
		{f.firstLease <= 0, "first-lease", f.firstLease.String(), idkeeper.MinFirstLease.String(), idkeeper.MaxFirstLease.String()},
		{f.leaseDuration <= 0, "lease-duration", f.leaseDuration.String(), "first-lease (" + f.firstLease.String() + ")", idkeeper.MaxLeaseDuration.String()},
		{f.grace < 0, "cleanup-grace", f.grace.String(), "0s", idkeeper.MaxGrace.String()},
		{f.cleanupInterval <= 0, "cleanup-interval", f.cleanupInterval.String(), time.Second.String(), idkeeper.MaxCleanupPeriod.String()},
	} {
		if chk.bad {
			return c, usageError{&idkeeper.RangeError{Setting: chk.name, Value: chk.val, Min: chk.min, Max: chk.max}}
		}
	}
	if c.RedisWait < 0 {
		return c, usagef("--redis-wait-replicas %d: want 0 or more", c.RedisWait)
	}
	if f.drain <= 0 {
		return c, usagef("--shutdown-timeout %s: want a positive duration", f.drain)
	}
	// The layout is checked as one in service (Validate): the store's own is
	// compared with it at start, and a mismatch is refused there.
	pool, err := f.pool.spec()
	if err != nil {
		return c, err
	}
	c.KeepStoredSize = !f.pool.given("nodes") && !f.pool.given("node-range")
	c.Registry = idkeeper.Config{
		Layout:          pool.Layout,
		First:           pool.First,
		Nodes:           pool.Nodes,
		FirstLease:      f.firstLease,
		LeaseDuration:   f.leaseDuration,
		Grace:           f.grace,
		CleanupInterval: f.cleanupInterval,
	}
	if f.grace == 0 {
		c.Registry.Grace = idkeeper.NoGrace
	}
	f.keyQuota.apply(&c.Registry)
	if f.auditRetention <= 0 {
		return c, usageError{&idkeeper.RangeError{Setting: "audit-retention", Value: f.auditRetention.String(),
			Min: idkeeper.MinAuditRetention.String(), Max: "∞"}}
	}
	c.Registry.AuditRetention = f.auditRetention
	if f.historyRetention <= 0 {
		return c, usageError{&idkeeper.RangeError{Setting: "history-retention", Value: f.historyRetention.String(),
			Min: idkeeper.MinHistoryRetention.String(), Max: "∞"}}
	}
	c.Registry.HistoryRetention = f.historyRetention
	if f.sessionIdle <= 0 || f.sessionAbsolute <= 0 {
		return c, usagef("--session-idle-timeout and --session-absolute-timeout must be positive")
	}
	c.Accounts = account.Config{IdleTimeout: f.sessionIdle, AbsoluteTimeout: f.sessionAbsolute}
	c.ShutdownTimeout = f.drain
	c.Env = env
	c.Logger = f.log.logger(stderr)
	if c.Backup, err = f.backup.config(time.Now()); err != nil {
		return c, err
	}
	if c.Alerts, err = f.alerts.config(); err != nil {
		return c, err
	}
	if c.ClockCheck, err = f.clock.config(env, c.Store); err != nil {
		return c, err
	}
	if c.BootstrapAPIKey, err = envSecret(env, BootstrapKeyEnv); err != nil {
		return c, err
	}
	if c.AdminAPIKey, err = envSecret(env, AdminKeyEnv); err != nil {
		return c, err
	}
	if c.AdminPassword, err = envSecret(env, AdminPasswordEnv); err != nil {
		return c, err
	}
	if err := resolveSecrets(c.Logger, f.store); err != nil {
		return c, err
	}
	c.Store = f.cfg.Store
	if c.Net, err = f.listen.load(c.Logger); err != nil {
		return c, err
	}
	f.unsafe.apply(&c)
	c.Version, c.Commit = buildVersion()
	return c, nil
}

// runServer is the server command: it serves until ctx ends, then shuts down.
func runServer(ctx context.Context, args []string, env lookupEnv, stderr io.Writer) error {
	fs := newFlagSet("server", stderr)
	var f serverFlags
	f.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	cfg, err := f.config(env, stderr)
	if err != nil {
		return err
	}
	srv, err := startRegistryServer(ctx, cfg)
	if err != nil {
		return err
	}
	return srv.wait(ctx)
}

// registryServer is a running registry: store, replica state, registry engine and
// HTTP listener.
type registryServer struct {
	cfg     serverConfig
	log     *slog.Logger
	store   idkeeper.Store
	state   *localstate.File
	reg     *idkeeper.Registry
	api     *httpService
	metrics *httpService // nil without --metrics-listen
	web     *adminWeb    // the admin web: /admin/ on api, or on its own listener (--admin-listen)
	// backups are the scheduled and manual backups; nil without --backup-dir.
	backups *backupRunner
	alerts  *alerts     // nil for a store without alert state
	clock   *clockCheck // nil without --clock-agent
	traces  *traces
}

// startRegistryServer validates cfg, opens the store (refusing a Redis that would
// lose acknowledged writes on a restart unless accepted), the replica state and
// the registry (which adopts the store's generation, recovers a reset store, or
// waits for `idkeeper init`; cleanup job), stores the bootstrap API key before
// serving, and starts serving on cfg.Listen. The settings are checked, and the
// listeners bound, before the store is touched; a setting out of range is a
// usageError wrapping an *idkeeper.RangeError. A bolt file that does not exist is
// an error naming `idkeeper init`, unless InitStore.
func startRegistryServer(ctx context.Context, cfg serverConfig) (_ *registryServer, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	rc := cfg.Registry
	rc.Logger = log
	// Settings are checked before the store file is created or Redis is dialled.
	if err := rc.Validate(); err != nil {
		var re *idkeeper.RangeError
		if errors.As(err, &re) {
			return nil, usageError{err}
		}
		return nil, err
	}
	if cfg.BootstrapAPIKey != "" && len(cfg.BootstrapAPIKey) < idkeeper.MinAPIKeyLen {
		return nil, usagef("%s must be at least %d characters long", BootstrapKeyEnv, idkeeper.MinAPIKeyLen)
	}
	if cfg.AdminAPIKey != "" && len(cfg.AdminAPIKey) < idkeeper.MinAPIKeyLen {
		return nil, usagef("%s must be at least %d characters long", AdminKeyEnv, idkeeper.MinAPIKeyLen)
	}
	if cfg.AdminAPIKey != "" && cfg.AdminAPIKey == cfg.BootstrapAPIKey {
		return nil, usagef("%s and %s hold the same key; give the admin key a value of its own", AdminKeyEnv, BootstrapKeyEnv)
	}
	if cfg.AdminUser == "" {
		cfg.AdminUser = DefaultAdminUser
	}
	if err := checkAdminSettings(cfg); err != nil {
		return nil, err
	}
	// The listeners are bound before the store is touched: a busy port fails the
	// start before a store file is made, a key written or the state file opened.
	lns, err := cfg.Net.bindAPI(cfg.Listen, log)
	if err != nil {
		return nil, err
	}
	var adminLn *httpService
	served := false // once served, the listeners close with their services
	defer func() {
		if err != nil && !served {
			lns.release()
			adminLn.release()
		}
	}()
	if cfg.AdminListen != "" {
		if adminLn, err = bindHTTP(cfg.AdminListen, cfg.Net.tls, log); err != nil {
			return nil, err
		}
	}

	store, err := openStore(ctx, cfg.Store, storeOptions{Logger: log, Clock: cfg.Clock, RedisPrefix: cfg.RedisPrefix,
		RedisWaitReplicas: cfg.RedisWait, Create: cfg.InitStore})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = store.Close()
		}
	}()
	durability, err := checkDurability(ctx, store, cfg.AcceptLostWrites, log)
	if err != nil {
		return nil, err
	}
	if rc.Owner == "" {
		rc.Owner = idkeeper.DefaultOwner()
	}
	env := cfg.Env
	if env == nil {
		env = os.LookupEnv
	}
	traces, err := startTracing(env, "idkeeper-server", cfg.Version, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = traces.close().close()
		}
	}()
	rc.Tracer = traces.store()
	promReg := newPromRegistry()
	clock, err := startClockCheck(cfg.ClockCheck, store, rc.Owner, promReg, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = clock.close().close()
		}
	}()
	if clock != nil {
		rc.ClockVerifier, rc.ClockDelta = clock.verifier(), cfg.ClockCheck.Delta
	}
	if cfg.InitStore {
		spec := rc.Pool()
		if spec.Nodes == 0 {
			spec.Nodes = spec.LayoutOrDefault().Nodes() - int(spec.First)
		}
		if _, err := initStore(ctx, store, spec, log); err != nil {
			return nil, err
		}
	}
	if cfg.KeepStoredSize {
		// FixedPool keeps the size whenever the store is read, later ones and a
		// recovery included; Nodes is the size now, for the limits and the log.
		rc.FixedPool = true
		if st, err := store.Status(ctx); err == nil && st.Initialised && st.Pool.SameSpace(rc.Pool()) {
			rc.Nodes = st.Pool.Nodes
		}
	}
	state, err := openReplicaState(ctx, store, stateFileOptions{Spec: cfg.Store, Path: cfg.StateFile, Adopt: cfg.AdoptStateFile, Log: log})
	if err != nil {
		return nil, err
	}
	statePath := state.Path()
	defer func() {
		if err != nil {
			_ = state.Close()
		}
	}()
	secret, source, generated, err := receiptSecret(env, cfg.ReceiptSecretFile, filepath.Join(filepath.Dir(statePath), receiptSecretName))
	if err != nil {
		return nil, err
	}
	logReceiptSecret(log, cfg.Store, source, generated)
	rc.State, rc.ReceiptSecret = state, secret

	web, err := newAdminWeb(store, cfg, log)
	if err != nil {
		return nil, err
	}
	web.wire(&rc)
	promReg.MustRegister(web.loginMetrics())
	if web.idem != nil {
		promReg.MustRegister(web.idem.Collector())
	}
	metrics := idkhttp.NewMetrics(promReg)
	alerts, err := newAlerts(cfg.Alerts, store, web.discord, rc.Owner, web.acc, promReg, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = alerts.close().close()
		}
	}()
	var reg *idkeeper.Registry
	rc.Observer = alerts.observer(metrics, &reg)
	// Before serving any generation it adopts: a store that lost its data lost the
	// keys and the accounts too, and a new store has none yet.
	rc.OnAdopt = func(ctx context.Context) error {
		return errors.Join(ensureBootstrapKey(ctx, reg, cfg.BootstrapAPIKey, log), ensureAdminKey(ctx, reg, cfg.AdminAPIKey, log),
			web.ensureFirstAdmin(ctx, cfg.AdminUser, cfg.AdminPassword, log))
	}
	if reg, err = idkeeper.NewRegistry(store, rc); err != nil {
		return nil, err
	}
	if err := reg.Open(ctx); err != nil {
		if e := (*idkeeper.Error)(nil); errors.As(err, &e) && e.Code == protocol.CodePoolMismatch {
			if st, serr := store.Status(ctx); serr == nil && st.Pool.Nodes > 0 {
				return nil, poolMismatch(st.Pool, reg.Config().Pool())
			}
		}
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = reg.Close()
		}
	}()
	metrics.CollectPool(reg)
	backups, err := startBackups(cfg.Backup, store, storeKind(cfg.Store), reg.Config().Owner, web.acc, promReg, log,
		alerts.backupFailed(reg.Config().Owner))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = backups.close().close()
		}
	}()
	web.backups = backups.Job()

	if err := web.start(ctx, reg, cfg, durability, log); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = web.close(time.Second).close()
		}
	}()
	onAPI := web.handler
	if adminLn != nil {
		web.listen(adminLn, cfg, log)
		onAPI = nil
	}
	api, err := idkhttp.NewServer(reg, idkhttp.Options{
		Logger:         log,
		AllowList:      web.allow,
		Admin:          onAPI,
		TrustedProxies: cfg.TrustedProxies,
		Version:        cfg.Version,
		Commit:         cfg.Commit,
		Gatherer:       promReg,
		Metrics:        metrics,
		Durability:     durability,
		Clock:          cfg.ClockCheck.describe(),
	})
	if err != nil {
		return nil, err
	}
	apiWeb, metricsWeb := lns.serve("the registry API", traces.handler(api.Handler(), "idkeeper-server"), promReg, log)
	served = true
	s := &registryServer{cfg: cfg, log: log, store: store, state: state, reg: reg, api: apiWeb, metrics: metricsWeb, web: web}
	s.backups, s.alerts, s.clock, s.traces = backups, alerts, clock, traces
	clock.attach(reg, alerts)
	alerts.run(reg)
	rcfg := reg.Config()
	adminAt := "/admin/ on this listener"
	if web.web != nil {
		adminAt = web.web.Addr().String()
	}
	warnNoKeyQuota(log, reg)
	log.Info("listening", "addr", apiWeb.Addr().String(), "admin", adminAt, "tls", cfg.Net.tls != nil, "store", redactURL(cfg.Store),
		"version", cfg.Version, "commit", cfg.Commit, "phase", reg.Phase(), "stateFile", statePath,
		"nodes", rcfg.Nodes, "nodeRange", fmt.Sprintf("%d-%d", rcfg.First, int(rcfg.First)+rcfg.Nodes-1),
		"layout", rcfg.Layout.String(), "firstLease", rcfg.FirstLease, "leaseDuration", rcfg.LeaseDuration,
		"cleanupGrace", rcfg.Grace, "cleanupInterval", rcfg.CleanupInterval, "keyMaxNodesDefault", reg.DefaultKeyQuota(),
		"allowedIps", prefixesFlag{&cfg.AllowedIPs}.String(), "clock", cfg.ClockCheck.describe())
	return s, nil
}

// Addr is the address the server listens on.
func (s *registryServer) Addr() net.Addr { return s.api.Addr() }

// wait serves until ctx ends, serving fails or the clock check fails, then
// shuts down. After a failed clock check it returns an *errClockLatched
// (latch.go), whichever came first: the process exits with exitClockUnverified.
func (s *registryServer) wait(ctx context.Context) error {
	var serveErr error
	select {
	case <-ctx.Done():
		s.log.Info("stopping: draining requests in flight", "timeout", s.cfg.ShutdownTimeout)
	case serveErr = <-s.api.served:
		s.log.Error("HTTP server failed", "err", serveErr)
	case serveErr = <-s.web.served():
		s.log.Error("admin web server failed", "err", serveErr)
	case <-s.clock.latched():
		return s.exitLatched()
	}
	err := s.shutdown()
	if f := s.clock.latchedFailure(); f != nil {
		// Latched while stopping: the status still says so, for the supervisor.
		if err != nil {
			s.log.Error("shut down after the clock check failed", "err", err)
		}
		return &errClockLatched{f}
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return errors.Join(serveErr, err)
	}
	return err
}

// shutdown stops accepting connections, waits for requests in flight (at most
// ShutdownTimeout), then stops the registry's jobs and closes the store.
func (s *registryServer) shutdown() error { return s.stop(s.cfg.ShutdownTimeout, nil) }

// stop is shutdown with a drain of its own (requests still in flight after it
// are cut) and, when more is not nil, one more step once the jobs have stopped,
// before the replica state (flushed, its lock released) and the store close.
func (s *registryServer) stop(drain time.Duration, more *closeStep) error {
	steps := []closeStep{
		closeMetrics(s.metrics),
		s.web.close(drain),
		s.backups.close(),
		s.alerts.close(),
		{"stop the registry", s.reg.Close},
		s.clock.close(),
		s.traces.close(),
	}
	if more != nil {
		steps = append(steps, *more)
	}
	steps = append(steps,
		closeStep{"close the replica state", s.state.Close},
		closeStep{"close the store", s.store.Close})
	if err := s.api.shutdown(drain, steps...); err != nil {
		return err
	}
	s.log.Info("stopped")
	return nil
}

// ensureBootstrapKey stores the bootstrap API key unless it is there, retiring the
// previous bootstrap key, and logs what it did; the key itself is never logged.
func ensureBootstrapKey(ctx context.Context, reg *idkeeper.Registry, secret string, log *slog.Logger) error {
	if secret == "" {
		return nil
	}
	created, retired, err := reg.EnsureBootstrapKey(ctx, secret)
	if err != nil {
		return fmt.Errorf("store the bootstrap API key: %w", err)
	}
	id, _ := idkeeper.HashAPIKey(secret)
	if created {
		log.Info("bootstrap API key created", "keyId", id)
	} else {
		log.Debug("bootstrap API key present", "keyId", id)
	}
	for _, old := range retired {
		log.Warn("retired the previous bootstrap API key: it authenticates nothing from now on", "keyId", old, "newKeyId", id)
	}
	return nil
}

// ensureAdminKey stores the admin API key of AdminKeyEnv unless it is there,
// retiring the previous one, and logs what it did; the key itself is never logged.
func ensureAdminKey(ctx context.Context, reg *idkeeper.Registry, secret string, log *slog.Logger) error {
	if secret == "" {
		return nil
	}
	created, retired, err := reg.EnsureAdminKey(ctx, secret)
	if err != nil {
		return fmt.Errorf("store the admin API key: %w", err)
	}
	id, _ := idkeeper.HashAPIKey(secret)
	if created {
		log.Info("admin API key created", "keyId", id)
	} else {
		log.Debug("admin API key present", "keyId", id)
	}
	for _, old := range retired {
		log.Warn("retired the previous admin API key: it authenticates nothing from now on", "keyId", old, "newKeyId", id)
	}
	return nil
}
