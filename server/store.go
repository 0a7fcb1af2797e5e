package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/etcd"
	"github.com/idkeeper/idkeeper/postgres"
	"github.com/idkeeper/idkeeper/redis"
)

// DefaultStore is the store of `idkeeper server` when none is given: the
// embedded store in ./data.
const DefaultStore = "bolt:./data/idkeeper.db"

// boltLockTimeout is how long opening a bolt file waits for another process's lock.
const boltLockTimeout = 5 * time.Second

// StoreOptions are what OpenStore needs besides the store's URL.
type StoreOptions struct {
	Logger      *slog.Logger   // slog.Default() when nil
	Clock       idkeeper.Clock // the time authority of bolt and etcd (neither has a clock to ask); time.Now when nil
	RedisPrefix string         // key prefix on Redis; the redis package's default when empty
	// RedisWaitReplicas, when positive, makes every Alloc and Renew wait until that
	// many replicas acknowledged the write (redis.Options.WaitReplicas).
	RedisWaitReplicas int
	// Create makes a missing bolt file, and its folder, or a PostgreSQL store's
	// schema and tables (postgres.Store.InitSchema): for init, dev and backup
	// import only. Without it a missing file is a *ConfigError naming `idkeeper
	// init`, and nothing is created: a typo in a path must not become an empty
	// store that a server waits on for ever.
	Create bool
}

// StorePingTimeout bounds the first call OpenStore makes to a Redis or etcd store.
var StorePingTimeout = 10 * time.Second

// OpenStore opens the store a URL names, one case per store adapter:
// "bolt:PATH" (an existing file unless o.Create), a Redis URL of one server,
// Sentinel or a cluster (redis.IsURL), an etcd URL (etcd.IsURL), or a
// PostgreSQL URL (postgres.IsURL: its schema created with o.Create). Redis and
// etcd must answer a ping first: else the error says "cannot reach Redis at
// ADDR" (or etcd), without the URL's passwords. On Redis it then logs every
// warning of redis.Store.CheckConfig (eviction, no persistence). A URL of no
// store is a *ConfigError listing the forms.
func OpenStore(ctx context.Context, spec string, o StoreOptions) (idkeeper.Store, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case strings.HasPrefix(spec, "bolt:"):
		return openBolt(spec, o)
	case redis.IsURL(spec):
		s, err := redis.Open(spec, redis.Options{Prefix: o.RedisPrefix, Logger: o.Logger, WaitReplicas: o.RedisWaitReplicas})
		if err != nil {
			return nil, fmt.Errorf("open redis store %s: %w", RedactURL(spec), err)
		}
		if err := pingStore(ctx, s, "Redis", spec); err != nil {
			_ = s.Close()
			return nil, err
		}
		for _, w := range s.CheckConfig(ctx) {
			o.Logger.Warn("redis configuration: " + w)
		}
		return s, nil
	case etcd.IsURL(spec):
		if _, _, err := etcd.ParseURL(spec); err != nil {
			return nil, configErrorf("--store %s: %w", RedactURL(spec), err)
		}
		// With a user name in the URL, Open authenticates: a failure then is one
		// to reach the cluster too.
		s, err := etcd.Open(spec, etcd.Options{Clock: o.Clock, Logger: o.Logger})
		if err != nil {
			return nil, fmt.Errorf("cannot reach etcd at %s: %w", storeAddrs(spec), err)
		}
		if err := pingStore(ctx, s, "etcd", spec); err != nil {
			_ = s.Close()
			return nil, err
		}
		return s, nil
	case postgres.IsURL(spec):
		if _, err := postgres.ParseURL(spec); err != nil {
			return nil, configErrorf("--store %s: %w", RedactURL(spec), err)
		}
		// The server decides on the durability, with the operator's flag
		// (checkDurability): Open only reports it.
		s, err := postgres.Open(ctx, spec, postgres.Options{Logger: o.Logger, DeferDurability: true})
		if errors.Is(err, postgres.ErrUnreachable) {
			return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %w", storeAddrs(spec), err)
		}
		if err != nil {
			return nil, fmt.Errorf("open the PostgreSQL store at %s: %w", storeAddrs(spec), err)
		}
		// o.Create (init, dev, backup import) creates the schema's tables, or
		// brings an older schema up to this release's version.
		if o.Create {
			if err := s.InitSchema(ctx); err != nil {
				_ = s.Close()
				return nil, err
			}
		}
		return s, nil
	}
	return nil, unknownStore(spec)
}

// unknownStore is the *ConfigError of a URL of no store, listing the forms.
func unknownStore(spec string) error {
	return configErrorf("--store %q: want bolt:PATH, redis://HOST:PORT/DB, redis+sentinel://SENTINEL:PORT/DB?master_name=NAME&addr=…, "+
		"redis+cluster://NODE:PORT?addr=… (rediss… with TLS), etcd://HOST:PORT[,HOST:PORT…]/PREFIX (etcds… with TLS), "+
		"postgres://USER@HOST:PORT/DB (postgresql… too)", RedactURL(spec))
}

// SharedStore reports whether the store of a URL may be shared by replicas:
// every store but a replica's own bolt file (Redis, Sentinel, Cluster, etcd,
// PostgreSQL). A URL of no store is OpenStore's *ConfigError.
func SharedStore(spec string) (bool, error) {
	switch {
	case strings.HasPrefix(spec, "bolt:"):
		return false, nil
	case redis.IsURL(spec), etcd.IsURL(spec), postgres.IsURL(spec):
		return true, nil
	}
	return false, unknownStore(spec)
}

// openBolt opens the bolt file of a "bolt:PATH" spec: see StoreOptions.Create.
func openBolt(spec string, o StoreOptions) (idkeeper.Store, error) {
	path := strings.TrimPrefix(spec, "bolt:")
	if path == "" {
		return nil, configErrorf("--store %q: the bolt store needs a file path, e.g. %s", spec, DefaultStore)
	}
	if dir := filepath.Dir(path); o.Create && dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create the store directory: %w", err)
		}
	}
	s, err := bolt.Open(path, bolt.Options{Clock: o.Clock, Timeout: boltLockTimeout, Logger: o.Logger, MustExist: !o.Create})
	switch {
	case errors.Is(err, bolt.ErrLocked):
		return nil, fmt.Errorf("%w (one process at a time: is a server running on it?)", err)
	case errors.Is(err, fs.ErrNotExist) && !o.Create:
		where := "the file does not exist"
		if _, derr := os.Stat(filepath.Dir(path)); errors.Is(derr, fs.ErrNotExist) {
			where = "neither the file nor its folder " + filepath.Dir(path) + " exists"
		}
		return nil, configErrorf("--store %s: no store there (%s); only `idkeeper init` (and `idkeeper dev`) create a bolt "+
			"store: run `idkeeper init --store %s` for a new deployment, or correct the path", spec, where, spec)
	case err != nil:
		return nil, err
	}
	return s, nil
}

// pingStore pings s, a store of kind ("Redis", "etcd") at spec, within
// StorePingTimeout. Its error names the store's addresses, never the URL's passwords.
func pingStore(ctx context.Context, s interface{ Ping(context.Context) error }, kind, spec string) error {
	ctx, cancel := context.WithTimeout(ctx, StorePingTimeout)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		return fmt.Errorf("cannot reach %s at %s: %w", kind, storeAddrs(spec), err)
	}
	return nil
}

// storeAddrs is the host:port list of a Redis or etcd URL: its host, then the
// addr query parameters (Sentinel, cluster). It holds no user info.
func storeAddrs(spec string) string {
	u, err := url.Parse(spec)
	if err != nil {
		return RedactURL(spec)
	}
	addrs := []string{u.Host}
	addrs = append(addrs, u.Query()["addr"]...)
	return strings.Join(addrs, ",")
}

// RedactURL hides the passwords of a store URL (user info, and the password
// query parameters of the Sentinel form), for messages and logs.
func RedactURL(spec string) string {
	switch {
	case etcd.IsURL(spec):
		return etcd.RedactURL(spec)
	case postgres.IsURL(spec):
		return postgres.RedactURL(spec)
	case !strings.Contains(spec, "://"):
		return spec
	}
	return redis.RedactURL(spec)
}

// StoreKind names the store of a URL in a backup's header: "bolt", "redis"
// (one server, Sentinel or a cluster), "etcd" or "postgres"; "store" for a URL
// of none of them. The header's store is for people only: an import reads the
// records, whatever store wrote them.
func StoreKind(spec string) string {
	switch {
	case strings.HasPrefix(spec, "bolt:"):
		return "bolt"
	case redis.IsURL(spec):
		return "redis"
	case etcd.IsURL(spec):
		return "etcd"
	case postgres.IsURL(spec):
		return "postgres"
	}
	return "store"
}

// StoreIdentity is the identity of the store s opened from the URL spec: its own
// (idkeeper.IdentifiedStore), else the redacted URL.
func StoreIdentity(s idkeeper.Store, spec string) string {
	if is, ok := s.(idkeeper.IdentifiedStore); ok {
		return is.Identity()
	}
	return RedactURL(spec)
}

// Durable is a store that says what a restart of its server keeps. Every store
// adapter is one (bolt.Store, redis.Store, etcd.Store, postgres.Store): safe is
// true when every acknowledged write survives, why describes it for /readyz and
// the operator, err is set only when the store could not be asked.
type Durable interface {
	Durability(ctx context.Context) (safe bool, why string, err error)
}

// AcceptLostWritesFlag is the flag (Config.AcceptLostWrites) that starts a server
// on a store that may lose acknowledged writes; --accept-lost-writes-on-redis-restart
// is its older, Redis-only name.
const AcceptLostWritesFlag = "--accept-lost-writes"

// lossRisk is how a store that is not safe would lose acknowledged writes, and
// how to make it safe: the words of checkDurability's refusal and warning.
type lossRisk struct {
	kind  string // "Redis", "PostgreSQL": for "check the … settings"
	event string // what loses the writes: "a routine Redis restart"
	fix   string // the settings that make it safe
}

// riskOf is the lossRisk of s's store adapter.
func riskOf(s idkeeper.Store) lossRisk {
	switch s.(type) {
	case *redis.Store:
		return lossRisk{kind: "Redis", event: "a routine Redis restart",
			fix: "Set appendonly yes and appendfsync always, or run replicas with --redis-wait-replicas 1"}
	case *postgres.Store:
		return lossRisk{kind: "PostgreSQL", event: "a crash of PostgreSQL or of its machine",
			fix: "Set fsync = on and synchronous_commit = on (or remote_write or remote_apply with a synchronous standby) " +
				"in postgresql.conf or with ALTER SYSTEM, and no ALTER ROLE or ALTER DATABASE setting that turns " +
				"synchronous_commit off for the registry's connections"}
	}
	return lossRisk{kind: "store", event: "a restart of the store", fix: "Make the store keep every acknowledged write"}
}

// checkDurability decides at start-up what a restart of the store can lose
// (DESIGN §7): a store that would lose acknowledged writes (a Redis without the
// append-only file fsynced or replicas waited for, a PostgreSQL with fsync or
// synchronous_commit off) is refused unless the operator accepts it
// (Config.AcceptLostWrites), with the settings that would make it safe. It
// returns the text /readyz shows.
func checkDurability(ctx context.Context, s idkeeper.Store, accept bool, log *slog.Logger) (string, error) {
	d, ok := s.(Durable)
	if !ok {
		return fmt.Sprintf("unknown: the store %T does not say what a restart keeps", s), nil
	}
	risk := riskOf(s)
	safe, why, err := d.Durability(ctx)
	if err != nil {
		return "", fmt.Errorf("check the %s durability settings: %w", risk.kind, err)
	}
	text, refusal := risk.judge(safe, why, accept)
	if refusal != nil {
		return "", refusal
	}
	if !safe {
		log.Warn(AcceptLostWritesFlag+": "+risk.event+" may lose acknowledged writes; each such loss quarantines the "+
			"whole pool for lease + grace", "settings", text)
	}
	return text, nil
}

// judge is the /readyz text of a store whose Durability answered safe and why,
// or the refusal of an unsafe one the operator did not accept.
func (risk lossRisk) judge(safe bool, why string, accept bool) (string, error) {
	why = operatorWords(why)
	switch {
	case safe:
		return why, nil
	case accept:
		return "accepted lost writes on " + risk.event + " (" + AcceptLostWritesFlag + "): " + why, nil
	}
	return "", fmt.Errorf("refusing to start: %s. %s would lose acknowledged grants, and the registry would "+
		"have to quarantine every node ID for lease + grace (48h10m by default). %s; or accept the risk "+
		"explicitly with %s", why, upperFirst(risk.event), risk.fix, AcceptLostWritesFlag)
}

// operatorWords is a store's durability text as an operator reads it: the redis
// package names its option, an operator sets the flag.
func operatorWords(why string) string {
	return strings.ReplaceAll(why, "WaitReplicas", "--redis-wait-replicas")
}

// upperFirst is s with its first letter upper case (ASCII).
func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
