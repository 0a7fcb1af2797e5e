// Package registrytest starts a real registry for tests: a store (a bbolt file in
// t.TempDir() unless the caller brings one) and an API key, assembled into a
// registry server by package server, whose handler httptest serves on loopback.
// Everything it starts is closed by t.Cleanup.
//
// It is test support: it may import the http adapter, so only external test
// packages (package http_test) of http may use it.
package registrytest

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/server"
	"github.com/prometheus/client_golang/prometheus"
)

// TB is the part of testing.TB the helper uses.
type TB interface {
	Helper()
	Fatal(args ...any)
	TempDir() string
	Cleanup(func())
}

// Options says what differs between callers. The zero value serves a bolt
// registry on the system clock with the default config, logging nowhere.
type Options struct {
	// Config is the registry's config (pool size, lease settings, cleanup interval,
	// observer). A nil Logger becomes Logger.
	Config idkeeper.Config
	// Clock is the bolt store's clock (a fake clock's Now) and, unless
	// Config.Clock is set, the registry's own; nil means time.Now.
	Clock idkeeper.Clock
	// Store, when set, is the store to serve instead of a new bolt file. The
	// helper closes it at the end of the test. Either way it is initialised (as
	// `idkeeper init` does) unless NoInit.
	Store idkeeper.Store
	// NoInit leaves the store as it is: the registry waits for an initialisation.
	NoInit bool
	// Logger is the bolt store's and, unless Config.Logger or HTTP.Logger is set,
	// the registry's and the server's logger; nil means a discarding logger.
	Logger *slog.Logger
	// APIKey is the key the registry stores (DefaultAPIKey when empty), named
	// KeyName ("tests" when empty).
	APIKey, KeyName string
	// HTTP are the server's options. A nil Gatherer becomes a fresh prometheus
	// registry.
	HTTP idkhttp.Options
	// Opened, when set, runs after the registry opened, before the key is stored.
	Opened func(*idkeeper.Registry)
	// Wrap, when set, wraps the server's handler (a fault-injecting proxy).
	Wrap func(http.Handler) http.Handler
	// TLS serves HTTPS with httptest's own certificate (Server.HTTP.Certificate);
	// Server.Client trusts it.
	TLS bool
}

// DefaultAPIKey is the API key stored when Options.APIKey is empty.
const DefaultAPIKey = "idk_registrytest-key-0123456789abcdefghij"

// ReceiptSecret is the receipt secret of every registry Start serves, unless
// Config.ReceiptSecret is set.
var ReceiptSecret = []byte("registrytest-receipt-secret-0123456789abcdef")

// Server is a registry served on loopback.
type Server struct {
	URL      string       // the server's base URL
	Client   *http.Client // a client for URL
	APIKey   string       // the stored API key
	Registry *idkeeper.Registry
	Store    idkeeper.Store
	HTTP     *httptest.Server
}

// Start starts a registry server as o says, assembled by package server as
// `idkeeper server` is (without the admin web, the alerts, the backups and a
// replica state file), its handler served by httptest; t.Cleanup closes the
// HTTP server, then the registry and the store.
func Start(t TB, o Options) *Server {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.APIKey == "" {
		o.APIKey = DefaultAPIKey
	}
	if o.KeyName == "" {
		o.KeyName = "tests"
	}
	st := o.Store
	if st == nil {
		bs, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Clock: o.Clock, Logger: o.Logger})
		if err != nil {
			t.Fatal(err)
		}
		st = bs
	}
	cfg := o.Config
	if cfg.Clock == nil && o.Clock != nil {
		cfg.Clock = o.Clock
	}
	if cfg.ReceiptSecret == nil {
		cfg.ReceiptSecret = ReceiptSecret
	}
	ctx := context.Background()
	if !o.NoInit {
		pool := idkeeper.PoolSpec{First: cfg.First, Nodes: cfg.Nodes, Layout: cfg.Layout}
		if pool.Nodes == 0 {
			pool.Nodes = pool.LayoutOrDefault().Nodes() - int(pool.First)
		}
		if _, err := st.Init(ctx, pool); err != nil {
			_ = st.Close()
			t.Fatal(err)
		}
	}
	log := o.Logger
	if cfg.Logger != nil {
		log = cfg.Logger
	}
	hopts := o.HTTP
	if hopts.Logger == nil {
		hopts.Logger = log
	}
	if hopts.Gatherer == nil {
		hopts.Gatherer = prometheus.NewRegistry()
	}
	onAdopt := cfg.OnAdopt
	cfg.OnAdopt = nil
	srv, err := server.Open(ctx, server.Config{
		OpenedStore: st,
		Store:       "registrytest",
		Registry:    cfg,
		Logger:      log,
		NoAdmin:     true,
		NoStateFile: true,
		// The harness's Redis persists nothing: a test restarts no Redis.
		AcceptLostWrites: true,
		Env:              func(string) (string, bool) { return "", false },
		// As the server does with its bootstrap key: a store that lost its data
		// gets the key again after the recovery.
		OnAdopt: func(ctx context.Context, reg *idkeeper.Registry) error {
			if onAdopt != nil {
				return onAdopt(ctx)
			}
			_, err := reg.EnsureAPIKey(ctx, o.APIKey, o.KeyName)
			return err
		},
		// The caller's options stand as given: this harness tests the API.
		API:  func(opts *idkhttp.Options) { *opts = hopts },
		Wrap: o.Wrap,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	reg := srv.Registry()
	if o.Opened != nil {
		o.Opened(reg)
	}
	if !o.NoInit {
		if _, err := reg.EnsureAPIKey(ctx, o.APIKey, o.KeyName); err != nil {
			t.Fatal(err)
		}
	}
	ts := httptest.NewUnstartedServer(srv.Handler())
	if o.TLS {
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)
	return &Server{URL: ts.URL, Client: ts.Client(), APIKey: o.APIKey, Registry: reg, Store: st, HTTP: ts}
}
