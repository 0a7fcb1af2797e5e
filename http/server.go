// Package http is the registry's REST API (DESIGN §10): Alloc, Renew, Remove and
// Remaining under /v1/leases, /v1/version, the health probes /livez, /readyz and
// /health (the gateway's shape: {"status":"ok"} when ready),
// Prometheus /metrics, and, when Options.Admin is set, the admin API and pages
// under /admin/ (package admin serves them; this package only mounts them).
//
// Every /v1 route but /v1/version checks, in this order, the client's IP address
// against the allow-list (403 IP_NOT_ALLOWED), that the registry serves (503
// STORE_NOT_INITIALISED while it waits for `idkeeper init`, STORE_RECOVERING while
// it recovers from a store reset, both with Retry-After: never a 401 for a key it
// cannot read yet), and the X-API-Key header (401 API_KEY_MISSING, API_KEY_INVALID,
// API_KEY_EXPIRED); an answer to a key that expires within 14 days carries a
// Warning header (see authed). Renew and Remove of leases another key allocated
// answer 403 LEASE_NOT_OWNED. Request bodies are JSON
// (Content-Type application/json, at most Options.MaxBodyBytes), decoded strictly:
// unknown or duplicate members, trailing data and out-of-range values are 400
// INVALID_REQUEST with a "field" member, and nothing is written. Every error is an
// application/problem+json body (RFC 9457) with a stable "code" member; no failure
// is ever sent with status 200. docs/api.md is the reference for clients.
package http

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/api"
	"github.com/idkeeper/idkeeper/internal/jsonbody"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// DefaultMaxBodyBytes is the default limit on request bodies: 64 KiB.
const DefaultMaxBodyBytes = 64 << 10

// DefaultTimeout bounds the store work of one request by default.
const DefaultTimeout = 10 * time.Second

// APIKeyHeader carries the API key on every /v1 route but /v1/version.
const APIKeyHeader = "X-API-Key"

// Options configure a Server. A zero field means its default; NewServer returns an
// error for a value outside a field's range.
type Options struct {
	Logger *slog.Logger // nil: slog.Default()
	// AllowedIPs, when not empty, are the only client addresses the /v1 routes other
	// than /v1/version answer; others get 403 IP_NOT_ALLOWED. Empty allows all.
	AllowedIPs []netip.Prefix
	// AllowList, when set, is the allow-list in force instead of AllowedIPs: a
	// floor and the entries kept in the store (allowlist.List). Its refreshing
	// is the caller's (AllowList.Run).
	AllowList *allowlist.List
	// TrustedProxies are the peers whose X-Forwarded-For is believed. The client
	// address is the TCP peer unless the peer is listed here; see clientIP.
	TrustedProxies []netip.Prefix
	// Version and Commit are reported by /v1/version.
	Version, Commit string
	// Gatherer serves /metrics: prometheus.DefaultGatherer when nil.
	Gatherer prometheus.Gatherer
	// MaxBodyBytes limits request bodies (413 BODY_TOO_LARGE); 0 means
	// DefaultMaxBodyBytes, a negative value is an error.
	MaxBodyBytes int64
	// Timeout bounds the store work of one request, API-key check included; 0 means
	// DefaultTimeout, a negative value is an error. A request that runs out of it
	// fails with 503 STORE_UNAVAILABLE.
	Timeout time.Duration
	// Durability, when set, is asked at every /readyz for what the store's settings
	// guarantee now, e.g. that an acknowledged grant is on a synchronous standby,
	// or that the operator accepted lost writes on a Redis restart.
	Durability func() string
	// Clock, when set, is shown by /readyz: how the replicas' clocks are checked
	// (the clock agent and Δ, or that nothing checks them).
	Clock string
	// Metrics, when set, counts every answer of status 400 or above by route and
	// code (idkeeper_http_rejected_total) and registers idkeeper_build_info with
	// Version and Commit, with the Registerer given to NewMetrics. Nil: neither.
	Metrics *Metrics
	// Admin, when set, serves every path under /admin/ (the admin API under
	// AdminPrefix, and the admin pages): package admin's Handler. It does its own
	// authentication, allow-list check for API keys, body limits and timeouts; the
	// access log covers it. Nil: /admin/ answers 404.
	Admin http.Handler
}

// durability is what Options.Durability says now, "" without it.
func (o *Options) durability() string {
	if o.Durability == nil {
		return ""
	}
	return o.Durability()
}

// AdminPrefix starts the routes of the admin API (package admin), which
// `idkeeper apikey … --server` calls.
const AdminPrefix = wire.AdminAPIPrefix

// Server serves the registry's REST API. It is safe for concurrent use.
type Server struct {
	reg     *idkeeper.Registry
	opts    Options
	log     *slog.Logger
	handler http.Handler
}

// NewServer returns the API server for reg. It does no I/O. An option outside its
// range (a negative MaxBodyBytes or Timeout) is an error that wraps an
// *idkeeper.RangeError.
func NewServer(reg *idkeeper.Registry, opts Options) (*Server, error) {
	switch {
	case opts.MaxBodyBytes < 0:
		return nil, fmt.Errorf("http: %w", &idkeeper.RangeError{Setting: "MaxBodyBytes",
			Value: strconv.FormatInt(opts.MaxBodyBytes, 10), Min: "0", Max: "∞"})
	case opts.Timeout < 0:
		return nil, fmt.Errorf("http: %w", &idkeeper.RangeError{Setting: "Timeout",
			Value: opts.Timeout.String(), Min: "0s", Max: "∞"})
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.DefaultGatherer
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.AllowList == nil {
		opts.AllowList = allowlist.New(opts.AllowedIPs, nil)
	}
	s := &Server{reg: reg, opts: opts, log: opts.Logger}
	mux := http.NewServeMux()
	routes := map[string]string{} // route pattern → route label
	handle := func(pattern, route string, h http.Handler) {
		mux.Handle(pattern, h)
		routes[pattern] = route
	}
	handle("POST /v1/leases", routeAlloc, s.v1(s.alloc))
	handle("POST /v1/leases/renew", routeRenew, s.v1(s.renew))
	handle("POST /v1/leases/remove", routeRemove, s.v1(s.remove))
	handle("GET /v1/leases/remaining", routeRemaining, s.v1(s.remaining))
	handle("GET /v1/version", routeVersion, http.HandlerFunc(s.version))
	handle("GET /openapi.yaml", routeOpenAPI, api.Handler())
	if opts.Admin != nil {
		handle("/admin/", routeAdmin, opts.Admin)
	}
	handle("GET /health", routeHealth, http.HandlerFunc(s.health))
	handle("GET /livez", routeLivez, http.HandlerFunc(s.livez))
	handle("GET /readyz", routeReadyz, http.HandlerFunc(s.readyz))
	handle("GET /metrics", routeProm, promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	if opts.Metrics != nil {
		opts.Metrics.registerBuild(opts.Version, opts.Commit)
	}
	s.handler = s.accessLog(s.route(mux, routes))
	return s, nil
}

// Handler returns the http.Handler that serves every route.
func (s *Server) Handler() http.Handler { return s.handler }

// caller is who sent a /v1 request that passed the IP and API-key checks.
type caller struct {
	remoteIP string
	key      idkeeper.APIKey
}

// apiFunc handles one /v1 request that passed the IP and API-key checks. It returns
// the 200 body, or an error sent as problem+json.
type apiFunc func(w http.ResponseWriter, r *http.Request, c caller) (any, error)

// v1 wraps h in the IP allow-list and API-key checks and the request timeout
// (authed).
func (s *Server) v1(h apiFunc) http.Handler { return s.authed(h) }

// readBody returns the request body after checking its media type and size
// (jsonbody.Read).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return jsonbody.Read(w, r, s.opts.MaxBodyBytes)
}

func (s *Server) alloc(w http.ResponseWriter, r *http.Request, c caller) (any, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	req, err := decodeAllocRequest(body)
	if err != nil {
		return nil, err
	}
	req.RemoteIP, req.Key = c.remoteIP, c.key
	g, err := s.reg.Alloc(r.Context(), req)
	if err != nil {
		return nil, err
	}
	return wire.AllocResponse{Layout: layoutOf(s.reg.Layout()), Leases: leasesOf(g.Leases, s.reg.Layout()), ServerUtcNow: wire.FormatTime(g.Now)}, nil
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request, c caller) (any, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	req, err := decodeRenewRequest(body)
	if err != nil {
		return nil, err
	}
	req.RemoteIP, req.KeyID = c.remoteIP, c.key.ID
	g, err := s.reg.Renew(r.Context(), req)
	if err != nil {
		return nil, err
	}
	return wire.RenewResponse{Leases: leasesOf(g.Leases, s.reg.Layout()), ServerUtcNow: wire.FormatTime(g.Now)}, nil
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request, c caller) (any, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	req, err := decodeRemoveRequest(body)
	if err != nil {
		return nil, err
	}
	req.RemoteIP, req.KeyID = c.remoteIP, c.key.ID
	n, err := s.reg.Remove(r.Context(), req)
	if err != nil {
		return nil, err
	}
	return wire.RemoveResponse{Removed: &n}, nil
}

func (s *Server) remaining(_ http.ResponseWriter, r *http.Request, _ caller) (any, error) {
	c, err := s.reg.Remaining(r.Context())
	if err != nil {
		return nil, err
	}
	first := int64(s.reg.Config().First)
	out := wire.RemainingResponse{First: first, Last: first + int64(c.Total) - 1, Total: c.Total, Remaining: c.Remaining, Leased: c.Leased, InGrace: c.InGrace,
		Quarantined: c.Quarantined, Cooling: c.Cooling}
	if !c.NextReadyAt.IsZero() {
		out.NextReadyAt = wire.FormatTime(c.NextReadyAt)
	}
	return out, nil
}

func (s *Server) version(w http.ResponseWriter, _ *http.Request) {
	cfg := s.reg.Config()
	s.writeJSON(w, wire.VersionResponse{Version: s.opts.Version, Commit: s.opts.Commit, Layout: layoutOf(s.reg.Layout()),
		NodeRange: &wire.NodeRange{First: int64(cfg.First), Last: int64(cfg.First) + int64(cfg.Nodes) - 1}})
}

// livez answers 200 while the process can serve HTTP at all; it checks nothing else,
// so a store outage never gets the process restarted.
func (s *Server) livez(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, wire.StatusResponse{Status: "ok"})
}

// ready is the condition of /readyz and /health: nil when the registry serves,
// its store answers, the two clocks agree and the clock agent vouches for them;
// else the reason: STORE_NOT_INITIALISED, STORE_RECOVERING, POOL_MISMATCH,
// STORE_CLOCK_SKEW, CLOCK_UNVERIFIED, or NOT_READY when the store does not answer
// within min(Timeout, 5 s).
func (s *Server) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, min(s.opts.Timeout, 5*time.Second))
	defer cancel()
	err := s.reg.Ready(ctx)
	if protocol.ErrorCode(err) == protocol.CodeStoreUnavailable {
		err = &idkeeper.Error{Code: protocol.CodeNotReady, Message: "the lease store does not answer", Err: err}
	}
	return err
}

// readyz answers 200 with the store's generation (and durability and the clock
// check, when set) when the registry is ready (see ready), else 503 with the
// reason's code.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.ready(r.Context()); err != nil {
		s.writeProblem(w, r, err)
		return
	}
	g := s.reg.Generation()
	s.writeJSON(w, wire.ReadyResponse{Status: "ready", Durability: s.opts.durability(), Clock: s.opts.Clock, Generation: wire.Generation{
		Number: g.Number, ID: g.ID, Origin: string(g.Origin), At: wire.FormatTime(g.At)}})
}

// health answers as the gateway's /health does: 200 {"status":"ok"} exactly when
// /readyz would answer 200, else the same 503 problem.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if err := s.ready(r.Context()); err != nil {
		s.writeProblem(w, r, err)
		return
	}
	s.writeJSON(w, wire.StatusResponse{Status: "ok"})
}
