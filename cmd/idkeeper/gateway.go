package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	idkclient "github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/client/clientmetrics"
	"github.com/idkeeper/idkeeper/etcd"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/httpserve"
	"github.com/idkeeper/idkeeper/postgres"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/redis"
	"github.com/idkeeper/idkeeper/server"
)

// ConsumerKeysEnv names the environment variable of the gateway's consumer keys,
// comma-separated, in the syntax of a --consumer-keys-file line. Like the bootstrap
// key it is an environment variable only: a flag would show the keys in ps.
const ConsumerKeysEnv = "IDKEEPER_CONSUMER_KEYS"

// DefaultIdempotencyStore is the --idempotency-store default.
const DefaultIdempotencyStore = "bolt:./data/gateway-idem.db"

// gatewayConfig is everything a gateway is built from. runGateway fills it from
// flags and the environment; idkeeper dev fills it itself.
type gatewayConfig struct {
	Listen string // host:port; ":0" picks a free port
	// ServerURL is the registry (one URL); ServerURLs are several replicas of it,
	// failed over between (client.Config.ServerURLs). One of them is set.
	ServerURL  string
	ServerURLs []string
	APIKey     string // the registry API key the session leases with
	NodeIDs    int
	// NodeIDsMax, above NodeIDs, turns on node IDs on demand
	// (client.Config.MaxCount); 0 or NodeIDs: off.
	NodeIDsMax int
	// GCPercent is the garbage collector's target for the gateway's process
	// (applyGCPercent); 0 leaves Go's own.
	GCPercent int
	MaxCount  int
	// AllocBackoffInitial and AllocBackoffMax shape the session's Alloc retries
	// (client.Config.BackoffInitial, BackoffMax); RenewRetryMin and RenewRetryMax
	// its Renew retries (MinRetryInterval, RenewLoopDuration). Zero: the library's.
	AllocBackoffInitial, AllocBackoffMax time.Duration
	RenewRetryMin, RenewRetryMax         time.Duration
	IdempotencyStore                     string // "none", "bolt:PATH", "redis://…", "rediss://…", "etcd://…" or "etcds://…"
	IdempotencyTTL                       time.Duration
	IdempotencyRequired                  bool
	IdempotencyRecords                   int // most records of one caller (idempotency.Config.MaxRecords); 0: no cap
	RedisPrefix                          string
	ConsumerKeys                         *gateway.ConsumerKeys // nil or empty: no authentication
	ShutdownTimeout                      time.Duration
	Version, Commit                      string
	Logger                               *slog.Logger
	Requester                            idkeeper.Requester // zero: this process's (idkclient.ProcessRequester)
	Net                                  httpserve.Net      // the listener's TLS and the metrics listener
	ServerTLS                            *tls.Config        // trust for an https:// registry; nil: the system's roots
}

// gatewayFlags binds the gateway command's flags to a gatewayConfig.
type gatewayFlags struct {
	cfg       gatewayConfig
	log       logFlags
	listen    listenFlags
	keysFile  string
	serverCA  string
	apiKey    *secretFlag
	idemStore *secretFlag
}

func (f *gatewayFlags) register(fs *flag.FlagSet) {
	c := &f.cfg
	fs.StringVar(&c.Listen, "listen", "", "address to serve the gateway on, host:port; default "+GatewayLoopbackListen+" (loopback only) without consumer keys, "+GatewayOpenListen+" with them")
	fs.Var(listFlag{v: &c.ServerURLs, skipEmpty: true}, "server", "the registry's base URL, e.g. http://idkeeper:8080 (required); several replicas of one deployment: repeat the flag or separate the URLs with commas, and the gateway fails over between them (at most "+strconv.Itoa(idkclient.MaxServerURLs)+")")
	f.apiKey = secretVar(fs, &c.APIKey, "api-key", "", "registry API key to lease node IDs with (required; prefer --api-key-file or IDKEEPER_API_KEY: a flag shows in ps)", always)
	fs.IntVar(&c.NodeIDs, "node-ids", 1, "node IDs to lease, each good for 1,024,000 IDs/s; 1.."+strconv.Itoa(protocol.MaxCount))
	fs.IntVar(&c.GCPercent, "gc-percent", DefaultGCPercent, "the Go garbage collector's target for this process, as GOGC (which, when set, wins): heap growth in percent of the live heap before a collection; 0: Go's own (100); "+strconv.Itoa(minGCPercent)+".."+strconv.Itoa(maxGCPercent))
	fs.IntVar(&c.NodeIDsMax, "node-ids-max", 0, "lease more node IDs on demand, up to this many: when issuing runs at 80 % of the ceiling in 3 of 6 s, the gateway leases as many again; idle (under 30 % for 60 s) it gives them back; 0 or --node-ids: off; --node-ids.."+strconv.Itoa(protocol.MaxCount))
	fs.IntVar(&c.MaxCount, "max-count", gateway.DefaultMaxCount, "largest count of one POST /v1/ids; 1.."+strconv.Itoa(gateway.MaxMaxCount))
	fs.DurationVar(&c.AllocBackoffInitial, "alloc-backoff-initial", idkclient.DefaultBackoffInitial, "first wait before an Alloc is retried (no node ID free, registry unreachable); doubles up to --alloc-backoff-max, ±20 % jitter")
	fs.DurationVar(&c.AllocBackoffMax, "alloc-backoff-max", idkclient.DefaultBackoffMax, "longest wait between Alloc retries")
	fs.DurationVar(&c.RenewRetryMin, "renew-retry-min", idkclient.DefaultMinRetryInterval, "shortest wait between Renew retries after a failed Renew")
	fs.DurationVar(&c.RenewRetryMax, "renew-retry-max", idkclient.DefaultRenewLoopDuration, "longest wait between Renew retries (the retries speed up as the lease's end nears)")
	f.idemStore = secretVar(fs, &c.IdempotencyStore, "idempotency-store", DefaultIdempotencyStore, "where Idempotency-Key records live: bolt:PATH (one gateway), a Redis URL (gateways sharing work: redis://[:PASSWORD@]HOST:PORT/DB, redis+sentinel://…, redis+cluster://…, rediss…), an etcd URL (gateways sharing work: etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…][/PREFIX], etcds… with TLS), a PostgreSQL URL (gateways sharing work: postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?schema=…], its tables created when missing), or none", urlHasPassword)
	fs.DurationVar(&c.IdempotencyTTL, "idempotency-ttl", idempotency.DefaultTTL, "how long an answer is replayed for its Idempotency-Key")
	fs.BoolVar(&c.IdempotencyRequired, "idempotency-required", false, "answer POST /v1/ids without an Idempotency-Key with 400 IDEMPOTENCY_KEY_REQUIRED")
	fs.IntVar(&c.IdempotencyRecords, "idempotency-max-records", gateway.DefaultIdempotencyMaxRecords, "most Idempotency-Key records one caller (consumer key, or client address without consumer keys) may hold; a new key beyond gets 429 IDEMPOTENCY_RECORDS_EXHAUSTED; 0: no cap")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", "", "prefix of the Redis keys of the idempotency records (default: the redis package's, which the registry uses too)")
	fs.StringVar(&f.keysFile, "consumer-keys-file", "", "file of the keys consumers present in X-API-Key: one per line, SHA-256 hex or the key itself; with "+ConsumerKeysEnv+" unset too, no authentication")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 20*time.Second, "how long a stopping gateway waits for requests in flight")
	fs.StringVar(&f.serverCA, "server-ca-file", "", "PEM bundle of the CAs to trust for an https:// --server, besides the system's")
	f.log.register(fs)
	f.listen.register(fs)
}

// config checks the settings and returns the gatewayConfig, consumer keys read.
func (f *gatewayFlags) config(env lookupEnv, stderr io.Writer) (gatewayConfig, error) {
	log := f.log.logger(stderr)
	if err := resolveSecrets(log, f.apiKey, f.idemStore); err != nil {
		return f.cfg, err
	}
	c := f.cfg
	if err := checkServerURLs(c.ServerURLs); err != nil {
		return c, err
	}
	switch {
	case c.APIKey == "":
		return c, usagef("--api-key-file, IDKEEPER_API_KEY(_FILE) or --api-key is required: the registry API key to lease node IDs with")
	case c.NodeIDs < 1 || c.NodeIDs > protocol.MaxCount:
		return c, usageError{&idkeeper.RangeError{Setting: "node-ids", Value: strconv.Itoa(c.NodeIDs), Min: "1", Max: strconv.Itoa(protocol.MaxCount)}}
	case c.GCPercent != 0 && (c.GCPercent < minGCPercent || c.GCPercent > maxGCPercent):
		return c, usageError{&idkeeper.RangeError{Setting: "gc-percent", Value: strconv.Itoa(c.GCPercent), Min: "0 or " + strconv.Itoa(minGCPercent), Max: strconv.Itoa(maxGCPercent)}}
	case c.NodeIDsMax != 0 && (c.NodeIDsMax < c.NodeIDs || c.NodeIDsMax > protocol.MaxCount):
		return c, usageError{&idkeeper.RangeError{Setting: "node-ids-max", Value: strconv.Itoa(c.NodeIDsMax), Min: strconv.Itoa(c.NodeIDs) + " (--node-ids)", Max: strconv.Itoa(protocol.MaxCount)}}
	case c.MaxCount < 1 || c.MaxCount > gateway.MaxMaxCount:
		return c, usageError{&idkeeper.RangeError{Setting: "max-count", Value: strconv.Itoa(c.MaxCount), Min: "1", Max: strconv.Itoa(gateway.MaxMaxCount)}}
	case c.IdempotencyTTL < time.Millisecond:
		return c, usagef("--idempotency-ttl %s: want at least 1ms", c.IdempotencyTTL)
	case c.ShutdownTimeout <= 0:
		return c, usagef("--shutdown-timeout %s: want a positive duration", c.ShutdownTimeout)
	case c.AllocBackoffInitial < 10*time.Millisecond || c.AllocBackoffMax < c.AllocBackoffInitial || c.AllocBackoffMax > time.Hour:
		return c, usagef("--alloc-backoff-initial %s, --alloc-backoff-max %s: want 10ms ≤ initial ≤ max ≤ 1h", c.AllocBackoffInitial, c.AllocBackoffMax)
	case c.RenewRetryMin < 10*time.Millisecond || c.RenewRetryMax < c.RenewRetryMin || c.RenewRetryMax > 24*time.Hour:
		return c, usagef("--renew-retry-min %s, --renew-retry-max %s: want 10ms ≤ min ≤ max ≤ 24h", c.RenewRetryMin, c.RenewRetryMax)
	case c.IdempotencyRecords < 0:
		return c, usagef("--idempotency-max-records %d: want 0 (no cap) or more", c.IdempotencyRecords)
	case c.IdempotencyRequired && c.IdempotencyStore == "none":
		return c, usagef("--idempotency-required needs an --idempotency-store")
	}
	if err := checkIdempotencyStore(c.IdempotencyStore); err != nil {
		return c, err
	}
	var keys *gateway.ConsumerKeys
	if f.keysFile != "" {
		b, err := os.ReadFile(f.keysFile)
		if err != nil {
			return c, usagef("--consumer-keys-file: %v", err)
		}
		if keys, err = gateway.ParseConsumerKeys(string(b), f.keysFile); err != nil {
			return c, usageError{err}
		}
		if keys.Len() == 0 {
			return c, usagef("--consumer-keys-file %s holds no key", f.keysFile)
		}
	}
	if v, ok := env(ConsumerKeysEnv); ok && strings.TrimSpace(v) != "" {
		fromEnv, err := gateway.ParseConsumerKeys(v, ConsumerKeysEnv)
		if err != nil {
			return c, usageError{err}
		}
		keys = keys.Merge(fromEnv)
	}
	c.ConsumerKeys = keys
	if c.Listen == "" {
		c.Listen = defaultGatewayListen(keys)
	}
	c.Logger = log
	var err error
	if c.Net, err = f.listen.load(c.Logger); err != nil {
		return c, err
	}
	if f.serverCA != "" {
		if c.ServerTLS, err = idkclient.CABundle(f.serverCA); err != nil {
			return c, usagef("--server-ca-file: %v", err)
		}
	}
	c.Version, c.Commit = buildVersion()
	return c, nil
}

func checkIdempotencyStore(spec string) error {
	switch {
	case spec == "none", redis.IsURL(spec):
		return nil
	case strings.HasPrefix(spec, "bolt:") && spec != "bolt:":
		return nil
	case etcd.IsURL(spec):
		// ParseURL's errors never repeat the URL; it does no I/O but read the
		// TLS files the URL names.
		if _, _, err := etcd.ParseURL(spec); err != nil {
			return usagef("--idempotency-store %s: %v", etcd.RedactURL(spec), err)
		}
		return nil
	case postgres.IsURL(spec):
		if _, err := postgres.ParseURL(spec); err != nil {
			return usagef("--idempotency-store %s: %v", postgres.RedactURL(spec), err)
		}
		return nil
	}
	return usagef("--idempotency-store %q: want bolt:PATH, redis://HOST:PORT/DB, redis+sentinel://…, redis+cluster://…, rediss…, "+
		"etcd://HOST:PORT[,HOST:PORT…]/PREFIX (etcds… with TLS), postgres://USER@HOST:PORT/DB (postgresql… too) or none", server.RedactURL(spec))
}

// idemEtcdPingTimeout bounds the check at start that an etcd idempotency store
// answers.
var idemEtcdPingTimeout = 10 * time.Second

// idempotencyLockTimeout is how long opening a bolt idempotency file waits for
// another process's lock.
const idempotencyLockTimeout = 5 * time.Second

// idemPurgeEvery is how often a gateway deletes the lapsed records of an etcd
// idempotency store, which, unlike Redis, drops nothing by itself (lapsed records
// are treated as absent meanwhile, but take room). Each gateway sharing the store
// purges; the deletes are conditional, so they do not get in each other's way.
var idemPurgeEvery = time.Minute

// openEtcdIdempotency opens the etcd idempotency store of spec (etcd.Open, with the
// URL's key prefix, as the registry's --store) and checks that it answers.
func openEtcdIdempotency(spec string, log *slog.Logger) (*etcd.Store, error) {
	if _, _, err := etcd.ParseURL(spec); err != nil {
		return nil, fmt.Errorf("open the etcd idempotency store %s: %w", etcd.RedactURL(spec), err)
	}
	unreachable := func(err error) error {
		return fmt.Errorf("the etcd idempotency store %s does not answer (check its endpoints, TLS options and credentials; "+
			"the gateway does not start without its store): %w", etcd.RedactURL(spec), err)
	}
	// With a user name in the URL, Open authenticates, within the URL's
	// dial_timeout; else the Ping is the first call.
	s, err := etcd.Open(spec, etcd.Options{Logger: log})
	if err != nil {
		return nil, unreachable(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), idemEtcdPingTimeout)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		_ = s.Close()
		return nil, unreachable(err)
	}
	return s, nil
}

// openPostgresIdempotency opens a PostgreSQL idempotency store and creates its
// tables when the schema has none (postgres.Store.InitSchema, which waits on an
// advisory lock, so gateways starting together create them once). A server that
// does not answer within idemEtcdPingTimeout stops the gateway, as on etcd. The
// durability is not judged here: a lost record makes one retry mint again, as a
// gateway without a store would.
func openPostgresIdempotency(spec string, log *slog.Logger) (*postgres.Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), idemEtcdPingTimeout)
	defer cancel()
	s, err := postgres.Open(ctx, spec, postgres.Options{Logger: log, DeferDurability: true})
	if err != nil {
		return nil, fmt.Errorf("the PostgreSQL idempotency store %s does not answer (check its host, TLS options and "+
			"credentials; the gateway does not start without its store): %w", postgres.RedactURL(spec), err)
	}
	if err := s.InitSchema(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("create the PostgreSQL idempotency store's tables in %s: %w", postgres.RedactURL(spec), err)
	}
	return s, nil
}

// purgingIdempotency is an idempotency store whose lapsed records stay until
// purged (etcd's and PostgreSQL's; Redis and bolt expire their own).
type purgingIdempotency interface {
	idempotency.Store
	io.Closer
	Purge(context.Context) (int, error)
}

// purging makes s the gateway's idempotency store and purges its lapsed records
// until the gateway stops (stopPurge).
func (g *gatewayServer) purging(s purgingIdempotency, log *slog.Logger) idempotency.Store {
	g.idem = s
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go purgeIdempotency(ctx, s, log, done)
	g.stopPurge = func() { cancel(); <-done }
	return s
}

// purgeIdempotency deletes p's lapsed records every idemPurgeEvery until ctx
// ends, then closes done.
func purgeIdempotency(ctx context.Context, p purgingIdempotency, log *slog.Logger, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(idemPurgeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := p.Purge(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("purge the lapsed idempotency records", "err", err, "deleted", n)
		case n > 0:
			log.Debug("purged the lapsed idempotency records", "deleted", n)
		}
	}
}

// DefaultGCPercent is --gc-percent's default. An issuing request allocates little,
// but net/http allocates for every request, and the gateway's live heap (its
// metrics, session and idempotency store) is several times a bare handler's: at
// Go's 100 a collection marks that heap every few thousand requests, about 7 %
// of the process's CPU at 40,000 single-ID requests/s (docs/benchmarks.md). At 400
// the heap may grow to five times the live one (tens of MB) between collections.
const DefaultGCPercent = 400

// The bounds of --gc-percent (besides 0).
const (
	minGCPercent = 10
	maxGCPercent = 10000
)

// applyGCPercent sets the garbage collector's target (debug.SetGCPercent) of a
// process that issues IDs to percent, unless percent is 0 or the GOGC environment
// variable is set: GOGC is Go's own knob and wins, as for any Go program. It
// returns the percent it set, 0 when it set none.
func applyGCPercent(env lookupEnv, percent int, log *slog.Logger) int {
	if env == nil {
		env = os.LookupEnv
	}
	if v, ok := env("GOGC"); ok {
		log.Debug("GOGC is set: --gc-percent not applied", "GOGC", v)
		return 0
	}
	if percent == 0 {
		return 0
	}
	debug.SetGCPercent(percent)
	return percent
}

// runGateway is the gateway command: it serves until ctx ends or the session
// loses its lease (exit status 1), then shuts down.
func runGateway(ctx context.Context, args []string, env lookupEnv, stderr io.Writer) error {
	fs := newFlagSet("gateway", stderr)
	var f gatewayFlags
	f.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	cfg, err := f.config(env, stderr)
	if err != nil {
		return err
	}
	applyGCPercent(env, cfg.GCPercent, cfg.Logger)
	g, err := startGateway(cfg)
	if err != nil {
		return err
	}
	return g.wait(ctx)
}

// gatewayServer is a running gateway: its session, idempotency store and HTTP
// listener.
type gatewayServer struct {
	cfg      gatewayConfig
	log      *slog.Logger
	sess     *idkclient.Session
	idem     io.Closer // nil without an idempotency store
	api      *httpserve.Service
	metrics  *httpserve.Service // nil without --metrics-listen
	fatal    chan error         // the session's lost lease
	openDone chan struct{}      // closed when Open has returned; then openErr is set
	openErr  error
	traces   *httpserve.Traces
	// stopPurge stops the purge of an etcd idempotency store's lapsed records and
	// waits for it; nil for the other stores.
	stopPurge func()
}

// startGateway opens the idempotency store, starts serving on cfg.Listen, and
// starts opening the session in the background: until it holds its lease, issuance
// and /health answer 503 while /livez is green, so a supervisor does not restart a
// gateway that waits for its registry. The session's OnFatal ends the gateway
// (wait returns an error) rather than the process, so that it shuts down
// gracefully; the process then exits with status 1 for its supervisor to restart.
func startGateway(cfg gatewayConfig) (_ *gatewayServer, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	g := &gatewayServer{cfg: cfg, log: log, fatal: make(chan error, 1), openDone: make(chan struct{})}
	// Bound before the idempotency store is opened: a busy port fails at once.
	lns, err := cfg.Net.BindAPI(cfg.Listen, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && g.api == nil {
			lns.Release()
		}
	}()
	var store idempotency.Store
	switch spec := cfg.IdempotencyStore; {
	case spec == "none" || spec == "":
	case strings.HasPrefix(spec, "bolt:"):
		path := strings.TrimPrefix(spec, "bolt:")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("create the idempotency store's directory: %w", err)
		}
		s, err := bolt.OpenIdempotency(path, bolt.Options{Timeout: idempotencyLockTimeout})
		if errors.Is(err, bolt.ErrLocked) {
			return nil, fmt.Errorf("%w (one gateway per bolt file: gateways that share work share a redis:// or etcd:// store)", err)
		}
		if err != nil {
			return nil, err
		}
		store, g.idem = s, s
	case etcd.IsURL(spec):
		s, err := openEtcdIdempotency(spec, log)
		if err != nil {
			return nil, err
		}
		store = g.purging(s, log)
	case postgres.IsURL(spec):
		s, err := openPostgresIdempotency(spec, log)
		if err != nil {
			return nil, err
		}
		store = g.purging(s, log)
	default:
		s, err := redis.OpenIdempotency(spec, redis.Options{Prefix: cfg.RedisPrefix, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("open the redis idempotency store %s: %w", server.RedactURL(spec), err)
		}
		store, g.idem = s, s
	}
	defer func() {
		if err != nil && g.stopPurge != nil {
			g.stopPurge()
		}
		if err != nil && g.idem != nil {
			_ = g.idem.Close()
		}
	}()
	var svc *idempotency.Service
	if store != nil {
		if svc, err = idempotency.New(store, idempotency.Config{TTL: cfg.IdempotencyTTL, Required: cfg.IdempotencyRequired, MaxRecords: cfg.IdempotencyRecords, Logger: log}); err != nil {
			return nil, err
		}
	}

	warnOpenGateway(log, cfg.Listen, cfg.ConsumerKeys)
	// Before the session: its requests to the registry are traced through
	// WrapTransport when tracing is on.
	if g.traces, err = httpserve.StartTracing(os.LookupEnv, "idkeeper-gateway", cfg.Version, log); err != nil {
		return nil, usageError{err}
	}
	defer func() {
		if err != nil {
			_ = g.traces.Close().Close()
		}
	}()
	g.sess, err = idkclient.New(idkclient.Config{
		ServerURL:  cfg.ServerURL,
		ServerURLs: cfg.ServerURLs,
		APIKey:     cfg.APIKey,
		Count:      cfg.NodeIDs,
		MaxCount:   cfg.NodeIDsMax,
		Logger:     log,
		// Zero (a config built in code) keeps the library's defaults.
		BackoffInitial: cfg.AllocBackoffInitial, BackoffMax: cfg.AllocBackoffMax,
		MinRetryInterval: cfg.RenewRetryMin, RenewLoopDuration: cfg.RenewRetryMax,
		Requester:     cfg.Requester,
		TLSConfig:     cfg.ServerTLS,
		WrapTransport: g.traces.Transport,
		OnFatal: func(err error) {
			select {
			case g.fatal <- err:
			default:
			}
		},
	})
	if err != nil {
		return nil, usageError{err}
	}
	promReg := httpserve.NewPromRegistry(clientmetrics.NewCollector(g.sess))
	gw, err := gateway.New(g.sess, gateway.Options{
		MaxCount:     cfg.MaxCount,
		Idempotency:  svc,
		ConsumerKeys: cfg.ConsumerKeys,
		Logger:       log,
		Registerer:   promReg,
		Gatherer:     promReg,
		Version:      cfg.Version,
		Commit:       cfg.Commit,
	})
	if err != nil {
		return nil, usageError{err}
	}
	g.api, g.metrics = lns.Serve("the gateway", g.traces.Handler(gw.Handler(), "idkeeper-gateway"), promReg, log)
	go func() {
		g.openErr = g.sess.Open(context.Background()) // Close ends it
		close(g.openDone)
	}()
	idem := "none"
	if store != nil {
		idem = server.RedactURL(cfg.IdempotencyStore)
	}
	log.Info("gateway listening; leasing node IDs", "addr", g.api.Addr().String(), "tls", cfg.Net.TLS != nil, "server", cfg.servers(),
		"nodeIds", cfg.NodeIDs, "nodeIdsMax", max(cfg.NodeIDsMax, cfg.NodeIDs), "maxCount", cfg.MaxCount, "idempotencyStore", idem, "idempotencyRequired", cfg.IdempotencyRequired,
		"consumerKeys", cfg.ConsumerKeys.Len(), "version", cfg.Version)
	return g, nil
}

// Addr is the address the gateway listens on.
func (g *gatewayServer) Addr() net.Addr { return g.api.Addr() }

// waitOpen waits until the session holds its lease and returns nil, or returns
// Open's error, or ctx's.
func (g *gatewayServer) waitOpen(ctx context.Context) error {
	select {
	case <-g.openDone:
		return g.openErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait serves until ctx ends, serving fails, Open fails, or the session loses its
// lease; then it shuts down.
func (g *gatewayServer) wait(ctx context.Context) error {
	var cause error
	opened := g.openDone
	for cause == nil {
		select {
		case <-ctx.Done():
			g.log.Info("stopping: draining requests in flight", "timeout", g.cfg.ShutdownTimeout)
			return g.shutdown()
		case err := <-g.api.Served():
			cause = fmt.Errorf("HTTP server failed: %w", err)
		case err := <-g.fatal:
			cause = fmt.Errorf("the gateway lost its lease and cannot issue IDs any more: %w", err)
		case <-opened:
			opened = nil
			if g.openErr != nil {
				cause = fmt.Errorf("lease node IDs from %s: %w", g.cfg.servers(), g.openErr)
				break
			}
			g.log.Info("gateway ready: issuing IDs", "nodeIds", nodeIDsOf(g.sess.Leases()))
		}
	}
	g.log.Error("stopping", "err", cause)
	return errors.Join(cause, g.shutdown())
}

func nodeIDsOf(ls []idkclient.Lease) []int64 {
	ids := make([]int64, len(ls))
	for i, l := range ls {
		ids[i] = l.NodeID
	}
	return ids
}

// shutdown stops accepting connections and waits for requests in flight (at most
// ShutdownTimeout), then closes the session (drain, then Remove: the node IDs are
// free at once) and the idempotency store.
func (g *gatewayServer) shutdown() error {
	steps := []httpserve.Step{httpserve.CloseMetrics(g.metrics), {What: "release the node IDs", Close: g.sess.Close}, g.traces.Close()}
	if g.stopPurge != nil {
		steps = append(steps, httpserve.Step{What: "stop purging the idempotency records", Close: func() error { g.stopPurge(); return nil }})
	}
	if g.idem != nil {
		steps = append(steps, httpserve.Step{What: "close the idempotency store", Close: g.idem.Close})
	}
	if err := g.api.Shutdown(g.cfg.ShutdownTimeout, steps...); err != nil {
		return err
	}
	g.log.Info("gateway stopped")
	return nil
}
