package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/etcd"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/httpserve"
	"github.com/idkeeper/idkeeper/password"
	"github.com/idkeeper/idkeeper/redis"
	"github.com/idkeeper/idkeeper/snapshot"
)

// adminWeb is the admin web of a registry server (issue #10): its accounts over
// the store, the IP allow-list (the --allowed-ips floor and the store's entries),
// and the handler of /admin/, on the API listener or its own.
type adminWeb struct {
	store   account.Store
	acc     *account.Service
	allow   *allowlist.List
	idem    *idempotency.Service // the Idempotency-Key records of the admin creates; nil: none
	handler http.Handler
	web     *httpserve.Service // the --admin-listen listener; nil: /admin/ is on the API listener
	stop    context.CancelFunc
	created atomic.Bool // the first admin was created by this process
	// snaps is the store as the admin API's backup and restore routes use it; nil
	// for a store without snapshots. snapKind names it in a backup's header.
	snaps    snapshot.Store
	snapKind string
	// backups is the server's backup job (--backup-dir; backupjob.go); nil: none.
	backups *backup.Job
	// discord posts to Discord webhooks: the profile page's test messages and the
	// alerts (alerts.go), so that both keep to Discord's global rate limit.
	// The alert jobs are to share it.
	discord *discord.Client
}

// checkAdminSettings refuses, before the store is touched, a first admin's name
// or password that could not be used and session timeouts out of range.
func checkAdminSettings(cfg *Config) error {
	if cfg.AdminPassword != "" {
		if name := cmp.Or(cfg.AdminUser, DefaultAdminUser); !account.ValidUserName(name) {
			return configErrorf("--admin-user %q: a user name is 1 to %d of a-z 0-9 . _ @ -", name, account.MaxUserNameLen)
		}
		if err := account.CheckPassword("password", cfg.AdminPassword); err != nil {
			return configErrorf("%s: a password has %d to %d bytes", AdminPasswordEnv, account.MinPasswordLen, account.MaxPasswordLen)
		}
		if password.IsCommon(cfg.AdminPassword) {
			return configErrorf("%s: the password is one of the most common ones (perhaps with digits or symbols added); "+
				"choose another, or unset it once the first admin exists", AdminPasswordEnv)
		}

	}
	// account.New checks its settings without touching the store: a nil store of
	// the right type suffices for that.
	if _, err := account.New((*bolt.Store)(nil), password.Hasher{}, cfg.Accounts); err != nil {
		return &ConfigError{err}
	}
	return nil
}

// newAdminWeb returns the admin web over store, which keeps the accounts and the
// allow-list too (bolt and redis do). It does no I/O.
func newAdminWeb(store idkeeper.Store, cfg *Config, log *slog.Logger) (*adminWeb, error) {
	as, ok := store.(account.Store)
	if !ok {
		return nil, errors.New("the store keeps no admin records (accounts, allow-list, audit log)")
	}
	ac := cfg.Accounts
	ac.Logger = log
	ac.ValidWebhook = discord.ValidWebhookURL // users set their alerts' webhook on the profile page
	acc, err := account.New(as, password.Hasher{}, ac)
	if err != nil {
		return nil, &ConfigError{err}
	}
	idem, err := adminIdempotency(store, log)
	if err != nil {
		return nil, err
	}
	a := &adminWeb{store: as, acc: acc, allow: allowlist.New(cfg.AllowedIPs, as), idem: idem,
		discord: &discord.Client{HTTP: cfg.Alerts.HTTP}}
	if ss, ok := store.(snapshot.Store); ok {
		a.snaps, a.snapKind = ss, StoreKind(cfg.Store)
	}
	return a, nil
}

// loginMetrics is idkeeper_admin_logins_refused_full_total: the logins the login
// throttle refused because its table was full of live entries
// (LOGIN_THROTTLE_FULL). Above zero, someone floods the admin login from many
// addresses; logins from new addresses fail until the flood's entries end.
func (a *adminWeb) loginMetrics() prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "idkeeper_admin_logins_refused_full_total",
		Help: "Admin logins refused with LOGIN_THROTTLE_FULL: the login throttle's table was full of live entries.",
	}, func() float64 { return float64(a.acc.LoginThrottleFullRefusals()) })
}

// AdminIdempotencyMaxRecords is the most live Idempotency-Key records one caller
// (a user or an admin key) holds for one admin create: people and scripts create
// a few users, keys and allow-list entries a day, so the cap only stops a runaway
// script from filling the store. A record is well under 2 KB with its indexes.
const AdminIdempotencyMaxRecords = 10_000

// adminIdempotency returns the Idempotency-Key service of the admin API's creates
// (users, API keys, allow-list entries; docs/idempotency.md), over the records
// the registry's store keeps beside its own: bolt in the registry's file, redis
// under the same prefix, shared by every replica. Records live idempotency's
// DefaultTTL (24 h); a create's in-flight marker its DefaultLockFor (1 min), far
// above the admin API's request timeout. Nil for a store that keeps none. It does
// no I/O.
func adminIdempotency(store idkeeper.Store, log *slog.Logger) (*idempotency.Service, error) {
	var records idempotency.Store
	switch s := store.(type) {
	case *bolt.Store:
		records = s.Idempotency()
	case *redis.Store:
		records = s.Idempotency()
	case *etcd.Store:
		records = s
	default:
		return nil, nil
	}
	return idempotency.New(records, idempotency.Config{TTL: idempotency.DefaultTTL, MaxRecords: AdminIdempotencyMaxRecords,
		Logger: log})
}

// wire makes the registry audit its lease events into the admin web's log and
// prune it and the ended sessions.
func (a *adminWeb) wire(rc *idkeeper.Config) {
	rc.Audit, rc.AdminStore, rc.Sessions = a.acc, a.store, a.acc
}

// ensureFirstAdmin creates the first admin from AdminPasswordEnv when the store
// holds no account, and logs what it did (never the password). Without a
// password and without accounts it says how to make one.
func (a *adminWeb) ensureFirstAdmin(ctx context.Context, name, pw string, log *slog.Logger) error {
	if pw == "" {
		n, err := a.store.CountUsers(ctx)
		if err != nil {
			return fmt.Errorf("count the admin accounts: %w", err)
		}
		if n == 0 {
			log.Warn("no admin account: set " + AdminPasswordEnv + " (or " + AdminPasswordEnv + "_FILE) for the first admin, " +
				"or run `idkeeper users add NAME --role admin --store …`")
		}
		return nil
	}
	created, err := a.acc.EnsureFirstAdmin(ctx, name, pw)
	if err != nil {
		return fmt.Errorf("create the first admin: %w", err)
	}
	if created {
		a.created.Store(true) // Accounts logged it
	} else {
		log.Info("admin accounts exist: " + AdminPasswordEnv + " is not used")
	}
	return nil
}

// start reads the allow-list (failing closed until it is read: only the floor
// allows), keeps it fresh every allowlist.DefaultRefresh, and makes the
// handler of /admin/.
func (a *adminWeb) start(ctx context.Context, reg *idkeeper.Registry, cfg *Config, durability func() string, log *slog.Logger) error {
	if err := a.allow.Refresh(ctx); err != nil {
		log.Warn("cannot read the IP allow-list from the store: until it is read, only --allowed-ips allow API keys", "err", err)
	}
	h, err := admin.New(admin.Config{
		Registry:       reg,
		Accounts:       a.acc,
		Store:          a.store,
		AllowList:      a.allow,
		TrustedProxies: cfg.TrustedProxies,
		TLS:            cfg.TLS != nil,
		Logger:         log,
		Durability:     durability,
		Idempotency:    a.idem,
		Snapshots:      a.snaps,
		SnapshotKind:   a.snapKind,
		Backups:        a.backups,
		Discord:        a.discord,
		ClockCheck:     cfg.ClockCheck.Describe(),
	})
	if err != nil {
		return err
	}
	a.handler = h
	run, stop := context.WithCancel(context.Background())
	a.stop = stop
	go a.allow.Run(run, allowlist.DefaultRefresh, log)
	return nil
}

// listen serves /admin/ on web (bound to --admin-listen with the API listener's
// TLS); "/" redirects to /admin/, anything else is 404.
func (a *adminWeb) listen(web *httpserve.Service, cfg *Config, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("/admin/", a.handler)
	mux.Handle("GET /{$}", http.RedirectHandler("/admin/", http.StatusFound))
	web.Serve(mux)
	if cfg.TLS == nil {
		httpserve.WarnPlain(web.Listener(), "the admin web", log)
	}
	a.web = web
	log.Info("serving the admin web on its own listener", "addr", web.Addr().String(), "tls", cfg.TLS != nil)
}

// served receives the result of the admin listener's Serve; nil (never ready)
// without one.
func (a *adminWeb) served() <-chan error {
	if a == nil || a.web == nil {
		return nil
	}
	return a.web.Served()
}

// close is the shutdown step of the admin web: its listener drains for at most
// timeout, and the allow-list refresh stops.
func (a *adminWeb) close(timeout time.Duration) httpserve.Step {
	return httpserve.Step{What: "close the admin web", Close: func() error {
		if a == nil {
			return nil
		}
		if a.stop != nil {
			a.stop()
		}
		if a.web == nil {
			return nil
		}
		return a.web.Drain(timeout)
	}}
}
