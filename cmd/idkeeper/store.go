package main

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
	"github.com/idkeeper/idkeeper/redis"
)

// DefaultStore is the --store default: the embedded store in ./data.
const DefaultStore = "bolt:./data/idkeeper.db"

// boltLockTimeout is how long opening a bolt file waits for another process's lock.
const boltLockTimeout = 5 * time.Second

// storeOptions are what openStore needs besides the --store value.
type storeOptions struct {
	Logger      *slog.Logger
	Clock       idkeeper.Clock // the time authority of bolt and etcd (neither has a clock to ask); time.Now when nil
	RedisPrefix string         // key prefix on Redis; the redis package's default when empty
	// RedisWaitReplicas, when positive, makes every Alloc and Renew wait until that
	// many replicas acknowledged the write (redis.Options.WaitReplicas).
	RedisWaitReplicas int
	// Create makes a missing bolt file, and its folder: for init, dev and backup
	// import only. Without it a missing file is a usageError naming `idkeeper init`,
	// and nothing is created: a typo in a path must not become an empty store that
	// a server waits on for ever.
	Create bool
}

// storePingTimeout bounds the first call openStore makes to a Redis or etcd store.
var storePingTimeout = 10 * time.Second

// openStore opens the store a --store value names: "bolt:PATH" (an existing file
// unless o.Create), a Redis URL of one server, Sentinel or a cluster
// (redis.IsURL), or an etcd URL (etcd.IsURL). Redis and etcd must answer a ping
// first: else the error says "cannot reach Redis at ADDR" (or etcd), without the
// URL's passwords. On Redis it then logs every warning of
// redis.Store.CheckConfig (eviction, no persistence).
func openStore(ctx context.Context, spec string, o storeOptions) (idkeeper.Store, error) {
	switch {
	case strings.HasPrefix(spec, "bolt:"):
		return openBolt(spec, o)
	case redis.IsURL(spec):
		s, err := redis.Open(spec, redis.Options{Prefix: o.RedisPrefix, Logger: o.Logger, WaitReplicas: o.RedisWaitReplicas})
		if err != nil {
			return nil, fmt.Errorf("open redis store %s: %w", redactURL(spec), err)
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
			return nil, usagef("--store %s: %w", redactURL(spec), err)
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
	}
	return nil, usagef("--store %q: want bolt:PATH, redis://HOST:PORT/DB, redis+sentinel://SENTINEL:PORT/DB?master_name=NAME&addr=…, "+
		"redis+cluster://NODE:PORT?addr=… (rediss… with TLS), etcd://HOST:PORT[,HOST:PORT…]/PREFIX (etcds… with TLS)", redactURL(spec))
}

// openBolt opens the bolt file of a "bolt:PATH" spec: see storeOptions.Create.
func openBolt(spec string, o storeOptions) (idkeeper.Store, error) {
	path := strings.TrimPrefix(spec, "bolt:")
	if path == "" {
		return nil, usagef("--store %q: the bolt store needs a file path, e.g. %s", spec, DefaultStore)
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
		return nil, usagef("--store %s: no store there (%s); only `idkeeper init` (and `idkeeper dev`) create a bolt "+
			"store: run `idkeeper init --store %s` for a new deployment, or correct the path", spec, where, spec)
	case err != nil:
		return nil, err
	}
	return s, nil
}

// pinger is a store that can check that its server answers.
type pinger interface {
	Ping(ctx context.Context) error
}

// pingStore pings s, a store of kind ("Redis", "etcd") at spec, within
// storePingTimeout. Its error names the store's addresses, never the URL's passwords.
func pingStore(ctx context.Context, s pinger, kind, spec string) error {
	ctx, cancel := context.WithTimeout(ctx, storePingTimeout)
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
		return redactURL(spec)
	}
	addrs := []string{u.Host}
	addrs = append(addrs, u.Query()["addr"]...)
	return strings.Join(addrs, ",")
}

// redactURL hides the passwords of a store URL (user info, and the password
// query parameters of the Sentinel form), for messages and logs.
func redactURL(spec string) string {
	switch {
	case etcd.IsURL(spec):
		return etcd.RedactURL(spec)
	case !strings.Contains(spec, "://"):
		return spec
	}
	return redis.RedactURL(spec)
}

// durabilityChecker is a store that can tell whether a restart of its server keeps
// every acknowledged write (the redis store).
type durabilityChecker interface {
	Durability(ctx context.Context) (safe bool, why string, err error)
}

// checkDurability decides at start-up what a restart of the store can lose
// (DESIGN §7): a Redis that would lose acknowledged writes is refused unless the
// operator accepts it with --accept-lost-writes-on-redis-restart. It returns the
// text /readyz shows.
func checkDurability(ctx context.Context, s idkeeper.Store, accept bool, log *slog.Logger) (string, error) {
	d, ok := s.(durabilityChecker)
	if !ok {
		return "bbolt file: every write is fsynced before it is answered", nil
	}
	safe, why, err := d.Durability(ctx)
	if err != nil {
		return "", fmt.Errorf("check the Redis persistence settings: %w", err)
	}
	// The redis package names its option; an operator sets the flag.
	why = strings.ReplaceAll(why, "WaitReplicas", "--redis-wait-replicas")
	if safe {
		return why, nil
	}
	if !accept {
		return "", fmt.Errorf("refusing to start: %s. A routine Redis restart would lose acknowledged grants, "+
			"and the registry would have to quarantine every node ID for lease + grace (48h10m by default). Set "+
			"appendonly yes and appendfsync always, or run replicas with --redis-wait-replicas 1; or accept the "+
			"risk explicitly with --accept-lost-writes-on-redis-restart", why)
	}
	log.Warn("--accept-lost-writes-on-redis-restart: Redis may lose acknowledged writes on a restart; each such "+
		"restart quarantines the whole pool for lease + grace", "settings", why)
	return "accepted lost writes on a Redis restart (--accept-lost-writes-on-redis-restart): " + why, nil
}
