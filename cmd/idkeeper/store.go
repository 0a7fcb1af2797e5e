package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/redis"
)

// DefaultStore is the --store default: the embedded store in ./data.
const DefaultStore = "bolt:./data/idkeeper.db"

// boltLockTimeout is how long opening a bolt file waits for another process's lock.
const boltLockTimeout = 5 * time.Second

// storeOptions are what openStore needs besides the --store value.
type storeOptions struct {
	Logger      *slog.Logger
	Clock       idkeeper.Clock // bolt's time authority; time.Now when nil
	RedisPrefix string         // key prefix on Redis; the redis package's default when empty
	// RedisWaitReplicas, when positive, makes every Alloc and Renew wait until that
	// many replicas acknowledged the write (redis.Options.WaitReplicas).
	RedisWaitReplicas int
}

// openStore opens the store a --store value names: "bolt:PATH" (the parent
// directory is created) or a "redis://" or "rediss://" URL. On Redis it logs every
// warning of redis.Store.CheckConfig (eviction, no persistence).
func openStore(ctx context.Context, spec string, o storeOptions) (idkeeper.Store, error) {
	switch {
	case strings.HasPrefix(spec, "bolt:"):
		path := strings.TrimPrefix(spec, "bolt:")
		if path == "" {
			return nil, usagef("--store %q: the bolt store needs a file path, e.g. %s", spec, DefaultStore)
		}
		if dir := filepath.Dir(path); dir != "" {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("create the store directory: %w", err)
			}
		}
		s, err := bolt.Open(path, bolt.Options{Clock: o.Clock, Timeout: boltLockTimeout, Logger: o.Logger})
		if errors.Is(err, bolt.ErrLocked) {
			return nil, fmt.Errorf("%w (one process at a time: is a server running on it?)", err)
		}
		if err != nil {
			return nil, err
		}
		return s, nil
	case strings.HasPrefix(spec, "redis://"), strings.HasPrefix(spec, "rediss://"):
		s, err := redis.Open(spec, redis.Options{Prefix: o.RedisPrefix, Logger: o.Logger, WaitReplicas: o.RedisWaitReplicas})
		if err != nil {
			return nil, fmt.Errorf("open redis store %s: %w", redactURL(spec), err)
		}
		for _, w := range s.CheckConfig(ctx) {
			o.Logger.Warn("redis configuration: " + w)
		}
		return s, nil
	}
	return nil, usagef("--store %q: want bolt:PATH, redis://HOST:PORT/DB or rediss://HOST:PORT/DB", redactURL(spec))
}

// redactURL hides the password of a store URL, for messages and logs.
func redactURL(spec string) string {
	if !strings.Contains(spec, "://") {
		return spec
	}
	u, err := url.Parse(spec)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}
