package main

import (
	"context"
	"flag"
	"io"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/server"
)

// The environment variables of the server's secrets (package server): an
// environment variable only, as a flag would show the secret in ps.
const (
	// BootstrapKeyEnv holds a key the server stores as an API key at start-up
	// (and again after a store reset) when it is not there yet.
	BootstrapKeyEnv = server.BootstrapKeyEnv
	// AdminKeyEnv holds a key the server stores as an admin API key (for the
	// admin API, /admin/api/); `idkeeper apikey … --server` reads it too.
	AdminKeyEnv = server.AdminKeyEnv
	// AdminPasswordEnv holds the first admin's password (AdminPasswordEnv_FILE: a
	// file holding it).
	AdminPasswordEnv = server.AdminPasswordEnv
	// ReceiptSecretEnv may hold the receipt secret itself; --receipt-secret-file
	// names a file instead.
	ReceiptSecretEnv = server.ReceiptSecretEnv
)

// DefaultAdminUser is the --admin-user default: the first admin's name.
const DefaultAdminUser = server.DefaultAdminUser

// serverFlags binds the server command's flags to a server.Config.
type serverFlags struct {
	cfg                                                      server.Config
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
	f.store = secretVar(fs, &c.Store, "store", DefaultStore, "the store: bolt:PATH (a file idkeeper init made), redis://[:PASSWORD@]HOST:PORT/DB, redis+sentinel://SENTINEL:PORT/DB?master_name=NAME&addr=…, redis+cluster://NODE:PORT?addr=… (rediss… with TLS), etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]/PREFIX (etcds… with TLS), postgres://USER[:PASSWORD]@HOST[:PORT][,HOST:PORT…]/DB[?sslmode=…&schema=…] (postgresql… too)", urlHasPassword)
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
	fs.StringVar(&c.StateFile, "state-file", "", "file where this replica keeps what it must remember across restarts to detect a store that lost writes (default: beside the bolt file, named after it, or ./data/"+server.StateFileName+"-<digest of the store>); it belongs to one store")
	fs.BoolVar(&c.AdoptStateFile, "adopt-state-file", false, "take --state-file for this store's even though it records another store, or was written before state files recorded their store and saw another generation; a generation it saw that the store lost is then a reset")
	fs.StringVar(&c.ReceiptSecretFile, "receipt-secret-file", "", "file holding the secret (at least 32 bytes, the same on every replica) that signs lease receipts; "+ReceiptSecretEnv+" may hold it instead (default: one generated beside the state file)")
	fs.BoolVar(&c.AcceptLostWrites, "accept-lost-writes", false, "start even though the store may lose acknowledged grants (Redis: no AOF, or appendfsync not always without --redis-wait-replicas; PostgreSQL: fsync or synchronous_commit off); every such loss then quarantines the whole pool for lease + grace")
	fs.BoolVar(&c.AcceptLostWrites, "accept-lost-writes-on-redis-restart", false, "the older name of --accept-lost-writes")
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

// config checks the lease settings and returns the server's Config. A zero or negative
// duration or pool size is out of range here: in idkeeper.Config a zero means "the
// default", which is not what an operator who typed 0 asked for.
func (f *serverFlags) config(env lookupEnv, stderr io.Writer) (server.Config, error) {
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
	// After the store's secret is resolved: a URL from --store-file is the store
	// the clock rule judges, not the default it replaced.
	if c.ClockCheck, err = f.clock.config(env, c.Store); err != nil {
		return c, err
	}
	n, err := f.listen.load(c.Logger)
	if err != nil {
		return c, err
	}
	c.TLS, c.MetricsListen = n.TLS, n.Metrics
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
	srv, err := server.Open(ctx, cfg)
	if err != nil {
		return err
	}
	return srv.Serve(ctx)
}
