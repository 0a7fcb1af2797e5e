package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/backup"
	idkhttp "github.com/idkeeper/idkeeper/http"
)

// Environment variables a registry server reads its secrets from. They are
// environment variables only: a flag would show the secret in ps.
const (
	// BootstrapKeyEnv holds a value the server stores as an API key at start-up
	// (and again after a store reset) when it is not there yet.
	BootstrapKeyEnv = "IDKEEPER_BOOTSTRAP_API_KEY"
	// AdminKeyEnv holds a value the server stores as an admin API key (for the
	// admin API, /admin/api/) as it stores the bootstrap key.
	AdminKeyEnv = "IDKEEPER_ADMIN_API_KEY"
	// AdminPasswordEnv holds the first admin's password (AdminPasswordEnv_FILE: a
	// file holding it): the server creates the account Config.AdminUser with it
	// when the store holds no account.
	AdminPasswordEnv = "IDKEEPER_ADMIN_PASSWORD"
	// ReceiptSecretEnv may hold the receipt secret itself; Config.ReceiptSecretFile
	// names a file instead.
	ReceiptSecretEnv = "IDKEEPER_RECEIPT_SECRET"
)

// DefaultAdminUser is the first admin's name when Config.AdminUser is empty.
const DefaultAdminUser = "admin"

// Files a server keeps beside its state when not told otherwise.
const (
	StateFileName     = "registry-state"
	ReceiptSecretName = "receipt-secret"
)

// Config is everything a registry server is built from: `idkeeper server` fills
// it from its flags and the environment, `idkeeper dev` and the test harnesses
// from code. Open checks it (Validate) before it binds a port or touches the
// store. The messages name the idkeeper binary's flags (--store, --state-file…):
// they are the settings' names in the documentation too.
type Config struct {
	// Listen is the REST API's host:port; ":0" picks a free port. Empty: no
	// listener, the caller serves Server.Handler itself (a test's httptest).
	Listen string
	// Store is the store's URL (OpenStore): bolt:PATH, redis…://, etcd…://.
	Store string
	// OpenedStore, when set, is served instead of opening Store, which then only
	// names it (logs, the state file's default and identity, backups' headers).
	// The server closes it as it closes a store it opened, on a failed Open too.
	OpenedStore idkeeper.Store
	RedisPrefix string // prefix of every Redis key; the redis package's when empty
	RedisWait   int    // replicas every Alloc and Renew waits for; 0: none
	// Registry is the lease policy; Open sets its Logger, Observer, OnAdopt, State,
	// ReceiptSecret (unless set), Tracer, Audit and the clock check's verifier.
	Registry       idkeeper.Config
	AllowedIPs     []netip.Prefix // the IP allow-list's floor
	TrustedProxies []netip.Prefix // reverse proxies whose X-Forwarded-For is believed
	// BootstrapAPIKey and AdminAPIKey are stored as an API key and an admin API key
	// when absent; empty: none.
	BootstrapAPIKey, AdminAPIKey string
	// AdminUser and AdminPassword are the first admin, created when the store holds
	// no account; an empty password creates none. AdminUser "" is DefaultAdminUser.
	AdminUser, AdminPassword string
	// AdminListen, when set, serves the admin web (/admin/) on this host:port
	// instead of the API listener.
	AdminListen string
	// NoAdmin serves the REST API alone: no admin web, accounts, audit log,
	// alerts or backups, the store's admin records untouched (the test harnesses
	// and the chaos server; a store without admin records needs it).
	NoAdmin bool
	// NoStateFile runs without a replica state file (the test harness): this
	// replica then cannot tell a store that lost writes. It needs
	// Registry.ReceiptSecret, which would be kept beside the state file.
	NoStateFile bool
	// OnAdopt, when set, runs after the server stored its keys and first admin,
	// each time the registry adopts a generation (Registry.OnAdopt, which Open
	// sets).
	OnAdopt func(ctx context.Context, reg *idkeeper.Registry) error
	// API, when set, adjusts the REST API's options once Open has filled them,
	// before the API is built (the test harness: a gatherer, an allow-list of its
	// own).
	API func(*idkhttp.Options)
	// Accounts are the admin web's session timeouts; Open sets the Logger.
	Accounts        account.Config
	ShutdownTimeout time.Duration // how long Close waits for requests in flight; 0: 20 s
	Version, Commit string
	Logger          *slog.Logger   // slog.Default() when nil
	Clock           idkeeper.Clock // bolt's and etcd's time authority; time.Now when nil
	// StateFile keeps what this replica must remember across restarts (DESIGN §7);
	// empty: beside the bolt file, or ./data/registry-state-<digest of the store>.
	// It belongs to one store (docs/operations.md, "The replica's own state").
	StateFile string
	// AdoptStateFile takes StateFile for this store's whatever store it records.
	AdoptStateFile bool
	// ReceiptSecretFile holds the receipt secret when ReceiptSecretEnv is not set;
	// empty: a secret generated beside the state file. Registry.ReceiptSecret, when
	// set, wins over both.
	ReceiptSecretFile string
	// AcceptLostWrites starts the server on a Redis whose settings lose
	// acknowledged writes on a restart, which it refuses otherwise.
	AcceptLostWrites bool
	// InitStore initialises an empty store at start (InitPool), as `idkeeper init`
	// does, and creates a missing bolt file: for dev's own embedded store and tests.
	InitStore bool
	// KeepStoredSize serves an initialised store's pool at the size it has instead
	// of Registry.Nodes, never growing it (issue #22): a default must not extend a
	// region's range into another's.
	KeepStoredSize bool
	// Env reads secrets (ReceiptSecretEnv) and OTEL_* from the environment;
	// os.LookupEnv when nil.
	Env func(string) (string, bool)
	// TLS serves the API and admin listeners over HTTPS; nil: plain HTTP.
	TLS *tls.Config
	// MetricsListen, when set, serves /metrics on this host:port (plain HTTP)
	// instead of the API listener.
	MetricsListen string
	// Wrap, when set, wraps the API handler (a test's fault-injecting proxy).
	Wrap func(http.Handler) http.Handler
	// Backup is the backup folder, schedule and retention; no Dir: no backups.
	Backup BackupConfig
	// Alerts are the Discord alerts' settings.
	Alerts AlertConfig
	// ClockCheck is the cluster clock check; no Agent: none.
	ClockCheck ClockConfig
}

// BackupConfig is the server's scheduled and manual backups (docs/backup.md);
// Dir "" means no backups.
type BackupConfig struct {
	Dir      string
	Spec     string          // the store's first schedule, trimmed; "" to seed none
	Schedule backup.Schedule // nil without Spec or for "off"
	Keep     int             // the newest backups kept after each; 0: no limit
	MaxAge   time.Duration   // older backups are deleted after each, never the newest; 0: no limit
	Gzip     bool
	// PollEvery is how often the job reads the stored schedule; 0: a minute.
	PollEvery time.Duration
}

// AlertConfig is the Discord alerts' settings (docs/alerts.md).
type AlertConfig struct {
	Threshold float64 // share of the pool, 0.001..1; 0: alert's default
	Repeat    time.Duration
	Title     string
	Interval  time.Duration // how often capacity is checked; 0: alert.DefaultInterval
	HTTP      *http.Client  // Discord's client; nil: discord's default
}

// ClockConfig is the cluster clock check (docs/clock.md); Agent "" means none.
type ClockConfig struct {
	Agent    string
	Secret   []byte
	Delta    time.Duration
	Interval time.Duration
	// Unsafe is set for a shared store served without an agent, as asked.
	Unsafe bool
	// Warning is logged at start: a secret file others may read.
	Warning string
}

// Describe says how the clocks are checked, for the log, /readyz and the admin.
func (c ClockConfig) Describe() string {
	switch {
	case c.Agent != "":
		return fmt.Sprintf("verified by the clock agent %s every %s, Δ %s (every error bound within %s)", c.Agent, c.Interval, c.Delta, c.Delta/2)
	case c.Unsafe:
		return "UNSAFE: a shared store without a clock agent (--unsafe-no-clock-agent): nothing bounds the replicas' clock differences"
	}
	return "not checked by a clock agent: one replica on its own store"
}

// ConfigError is a mistake in the configuration, found before anything was
// written: a setting out of range (it wraps an *idkeeper.RangeError then), a
// missing bolt file, a state file of another store. The idkeeper binary exits
// with status 2 for it.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func configErrorf(format string, args ...any) error {
	return &ConfigError{fmt.Errorf(format, args...)}
}

// Validate checks the settings that need no I/O: the lease policy, the keys,
// the first admin and the session timeouts. Its errors are *ConfigError.
func (c *Config) Validate() error {
	if c.Store == "" && c.OpenedStore == nil {
		return configErrorf("no store: set Store (a URL) or OpenedStore")
	}
	if c.ShutdownTimeout < 0 {
		return configErrorf("--shutdown-timeout %s: want a positive duration", c.ShutdownTimeout)
	}
	rc := c.Registry
	if err := rc.Validate(); err != nil {
		if errors.As(err, new(*idkeeper.RangeError)) {
			return &ConfigError{err}
		}
		return err
	}
	if c.BootstrapAPIKey != "" && len(c.BootstrapAPIKey) < idkeeper.MinAPIKeyLen {
		return configErrorf("%s must be at least %d characters long", BootstrapKeyEnv, idkeeper.MinAPIKeyLen)
	}
	if c.AdminAPIKey != "" && len(c.AdminAPIKey) < idkeeper.MinAPIKeyLen {
		return configErrorf("%s must be at least %d characters long", AdminKeyEnv, idkeeper.MinAPIKeyLen)
	}
	if c.AdminAPIKey != "" && c.AdminAPIKey == c.BootstrapAPIKey {
		return configErrorf("%s and %s hold the same key; give the admin key a value of its own", AdminKeyEnv, BootstrapKeyEnv)
	}
	if c.NoStateFile && c.Registry.ReceiptSecret == nil {
		return configErrorf("NoStateFile needs Registry.ReceiptSecret: without a state file there is no folder to keep a generated one in")
	}
	if c.NoAdmin {
		return nil
	}
	return checkAdminSettings(c)
}
