// Package gateway is the ID gateway (DESIGN §5, §10): an HTTP service that hands
// out batches of Snowflake IDs to programs that cannot embed the client library.
//
// The gateway mints with an IDSource, in production a *client.Session: the gateway
// holds its own node-ID leases and obeys every fail-closed rule of the library.
// When the session cannot issue (no lease yet, lease lost, a node ID still
// cooling, the clock unusable), issuance answers 503 ISSUING_UNAVAILABLE, and so do
// /health and /readyz: the health check is the issuing path itself, so it is never
// green while issuing answers 503.
//
// Routes:
//
//	POST /v1/ids          {"count":N} → 200 {"ids":[…ascending…]}; ?format=string: IDs as JSON strings
//	GET  /v1/ids/{id}     200 {"id":"…","time":"…","nodeId":17,"sequence":3}
//	GET  /v1/version      200 {"version":"…","commit":"…","layout":{…}}
//	GET  /health          200 {"status":"ok"} exactly when a mint succeeds now (and, when a
//	                      key is required, the idempotency store answers), else 503
//	GET  /readyz          the same condition as /health
//	GET  /livez           200 until the source has ended for good, then 503
//	GET  /metrics         Prometheus
//
// Issuance is all or nothing: a request is split into chunks over the source's
// generators, minted in parallel when large, sorted, and sent whole; if any chunk
// fails, the IDs already minted are dropped (a gap: a generator never mints an ID
// twice) and the answer is 503. POST /v1/ids takes an Idempotency-Key through the
// idempotency package when Options.Idempotency is set: the gateway checks the
// media type and size first, so the layer reads no more than MaxBodyBytes; a bad
// query or body binds the key to that request without storing the answer; an
// answer's IDs are stored as runs of consecutive IDs (idsCodec). With Options.ConsumerKeys,
// the /v1 routes other than /v1/version need a valid X-API-Key (401 otherwise).
// Every error is application/problem+json with a code. docs/gateway.md is the
// reference for clients and operators.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/api"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/buildinfo"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snowflake"
)

// IDSource mints the gateway's IDs. *client.Session implements it; tests wrap one
// to inject failures. A source that also has a Done() <-chan struct{} method, as
// *client.Session does, tells /livez when it has ended for good: closed when the
// gateway will never issue again and should be restarted.
type IDSource interface {
	// NextIDs fills dst with unique IDs in ascending order, or returns an error;
	// after an error the IDs written to dst are never handed out again by the
	// source. It is called concurrently, once per chunk of a request.
	NextIDs(dst []int64) error
	// NumGenerators is the number of node IDs the source mints with; a request is
	// split into at most this many chunks.
	NumGenerators() int
	// Check returns nil when issuing can succeed now, else the reason.
	Check() error
	// Layout is the ID layout; the zero Layout while it is not known yet.
	Layout() snowflake.Layout
}

// doner is the optional Done of an IDSource.
type doner interface{ Done() <-chan struct{} }

// DefaultMaxCount is the default of Options.MaxCount.
const DefaultMaxCount = 10_000

// MaxMaxCount bounds Options.MaxCount: a request's IDs and their JSON are held in
// memory at once.
const MaxMaxCount = 1_000_000

// IssueOperation names issuance in idempotency scopes.
const IssueOperation = "gateway.ids.issue"

// DefaultIdempotencyMaxRecords is the Idempotency-Key records one consumer may
// hold that `idkeeper gateway` configures by default (idempotency.Config
// MaxRecords): 11.6 requests with a new key per second, sustained over the 24 h
// TTL. A record is about 500 bytes, 1.5 to 1.7 KB of Redis memory or bolt file
// with the indexes: a caller at the cap holds 1.5 to 1.7 GB of the store.
const DefaultIdempotencyMaxRecords = 1_000_000

// Options configure a Server. A zero field means its default; New returns an
// error for a value outside a field's range.
type Options struct {
	// MaxCount is the largest count of one POST /v1/ids, 1 to MaxMaxCount; 0 means
	// DefaultMaxCount. A larger count is 400 COUNT_TOO_LARGE.
	MaxCount int
	// Idempotency, when set, gives POST /v1/ids the Idempotency-Key semantics of
	// the idempotency package under the operation IssueOperation; its Config
	// decides whether a key is required and how many records a caller may hold.
	// Its Collector is registered with Registerer. Nil: the header is ignored.
	Idempotency *idempotency.Service
	// ConsumerKeys, when it holds a key, makes POST /v1/ids and GET /v1/ids/{id}
	// require a valid X-API-Key. Nil or empty: no authentication.
	ConsumerKeys *ConsumerKeys
	// Logger: slog.Default(). At debug level every request is logged.
	Logger *slog.Logger
	// Registerer receives the gateway's metrics, idkeeper_build_info (with Version
	// and Commit) among them; nil registers none.
	Registerer prometheus.Registerer
	// Gatherer serves /metrics: prometheus.DefaultGatherer when nil.
	Gatherer prometheus.Gatherer
	// Version and Commit are reported by /v1/version.
	Version, Commit string
}

// Server serves the gateway's routes. It is safe for concurrent use.
type Server struct {
	src      IDSource
	opts     Options
	keys     *ConsumerKeys
	maxCount int
	log      *slog.Logger
	m        *metrics
	layout   atomic.Pointer[snowflake.Layout] // cached once valid: a session's layout never changes
	mux      *http.ServeMux
	routes   map[string]*routeMetrics // by mux pattern
	other    *routeMetrics            // requests that matched no pattern
}

// New returns a gateway over src. It does no I/O. An option outside its range
// (MaxCount negative or above MaxMaxCount) is an error that wraps an
// *idkeeper.RangeError.
func New(src IDSource, opts Options) (*Server, error) {
	if opts.MaxCount < 0 || opts.MaxCount > MaxMaxCount {
		return nil, fmt.Errorf("gateway: %w", &idkeeper.RangeError{Setting: "MaxCount", Value: strconv.Itoa(opts.MaxCount),
			Min: "0", Max: strconv.Itoa(MaxMaxCount)})
	}
	s := &Server{src: src, opts: opts, keys: opts.ConsumerKeys, maxCount: opts.MaxCount, log: opts.Logger}
	if s.maxCount == 0 {
		s.maxCount = DefaultMaxCount
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.DefaultGatherer
	}
	s.m = newMetrics(opts.Registerer)
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(buildinfo.Collector(opts.Version, opts.Commit))
	}

	var issue http.Handler = http.HandlerFunc(s.issue)
	if opts.Idempotency != nil {
		// Media type and size checked first, so the layer reads no more than
		// MaxBodyBytes; a 400 binds the key to its request; answers stored as
		// runs of IDs.
		issue = s.admitted(opts.Idempotency.Wrap(IssueOperation, s.caller, issue,
			idempotency.MaxBody(MaxBodyBytes), idempotency.WithCodec(idsCodec), idempotency.BindKeyOn(http.StatusBadRequest)))
		if opts.Registerer != nil {
			opts.Registerer.MustRegister(opts.Idempotency.Collector())
		}
	}
	mux := http.NewServeMux()
	s.routes = map[string]*routeMetrics{}
	handle := func(pattern, route string, h http.Handler) {
		mux.Handle(pattern, h)
		s.routes[pattern] = s.m.route(route)
	}
	handle("POST /v1/ids", routeIssue, s.authenticated(issue))
	handle("GET /v1/ids/{id}", routeDecode, s.authenticated(http.HandlerFunc(s.decode)))
	handle("GET /v1/version", routeVersion, http.HandlerFunc(s.version))
	handle("GET /openapi.yaml", routeOpenAPI, api.Handler())
	handle("GET /health", routeHealth, http.HandlerFunc(s.health))
	handle("GET /readyz", routeReadyz, http.HandlerFunc(s.readyz))
	handle("GET /livez", routeLivez, http.HandlerFunc(s.livez))
	handle("GET /metrics", routeProm, promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	s.other = s.m.route(routeOther)
	s.mux = mux
	return s, nil
}

// Handler returns the http.Handler that serves every route.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// MaxCount is the largest count one request may ask for.
func (s *Server) MaxCount() int { return s.maxCount }

// serveHTTP routes r, turns the mux's plain-text 404 and 405 into problem+json,
// counts and times the request by route, and logs it at debug level (never its
// headers, so never a key).
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := recorders.Get().(*recorder)
	rec.w, rec.r, rec.status, rec.replaced = w, r, 0, false
	s.mux.ServeHTTP(rec, r)
	status, replayed := rec.status, rec.replayed()
	*rec = recorder{}
	recorders.Put(rec)
	if status == 0 {
		status = http.StatusOK
	}
	rm := s.routes[r.Pattern] // ServeMux.ServeHTTP sets r.Pattern
	if rm == nil {
		rm = s.other
	}
	rm.observe(status, replayed, start)
	if s.log.Enabled(r.Context(), slog.LevelDebug) {
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "http request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", status),
			slog.Bool("replayed", replayed), slog.Duration("elapsed", time.Since(start)), slog.String("remoteIp", remoteIP(r.RemoteAddr)))
	}
}

// remoteIP is the IP of a peer's host:port, the form every idkeeper log gives a
// client's address in (remoteIp); addr itself when it is not host:port.
func remoteIP(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// authenticated checks X-API-Key when the gateway has consumer keys.
func (s *Server) authenticated(h http.Handler) http.Handler {
	if s.keys.Len() == 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.keys.Authenticate(r.Header.Get(APIKeyHeader)); err != nil {
			writeProblem(w, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// currentLayout returns the source's layout once it is known.
func (s *Server) currentLayout() (snowflake.Layout, bool) {
	if l := s.layout.Load(); l != nil {
		return *l, true
	}
	l := s.src.Layout()
	if l.Validate() != nil {
		return l, false
	}
	s.layout.Store(&l)
	return l, true
}

var errNoLayout = &idkeeper.Error{Code: protocol.CodeNotReady,
	Message: "the gateway holds no lease yet, so the ID layout is not known; retry later"}

func (s *Server) decode(w http.ResponseWriter, r *http.Request) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		writeProblem(w, err)
		return
	}
	l, ok := s.currentLayout()
	if !ok {
		writeProblem(w, errNoLayout)
		return
	}
	p, err := l.Decode(id)
	if err != nil {
		writeProblem(w, protocol.Invalidf("id", "%v", err))
		return
	}
	writeJSON(w, wire.DecodedID{
		ID: strconv.FormatInt(id, 10), Time: wire.FormatTime(p.Time), NodeID: p.Node, Sequence: p.Sequence,
	})
}

func (s *Server) version(w http.ResponseWriter, _ *http.Request) {
	v := wire.VersionResponse{Version: s.opts.Version, Commit: s.opts.Commit} // layout null until the gateway holds a lease
	if l, ok := s.currentLayout(); ok {
		v.Layout = &wire.Layout{Epoch: wire.FormatTime(l.Epoch), TimestampBits: l.TimestampBits, NodeBits: l.NodeBits, SequenceBits: l.SequenceBits}
	}
	writeJSON(w, v)
}

// healthStoreTimeout bounds the idempotency store's answer to a health check.
const healthStoreTimeout = 2 * time.Second

// canIssue is the health condition: the source's Check, then one ID minted and
// dropped, so that every refusal of the issuing path turns health red too (Check
// sees the lease, the windows and a clock stepped back past the tolerated step,
// but not, for one, a clock that stalls);
// and, when every POST /v1/ids needs an Idempotency-Key, the idempotency store
// answering, since no request can succeed without it.
func (s *Server) canIssue(ctx context.Context) error {
	if err := s.src.Check(); err != nil {
		return err
	}
	var one [1]int64
	if err := s.src.NextIDs(one[:]); err != nil {
		return err
	}
	if svc := s.opts.Idempotency; svc != nil && svc.Required() {
		ctx, cancel := context.WithTimeout(ctx, healthStoreTimeout)
		defer cancel()
		if err := svc.Check(ctx); err != nil {
			// The cause (an address, a dial error) goes to the log, not to callers.
			s.log.Warn("health: the idempotency store does not answer", "err", err)
			return errors.New("every request needs an Idempotency-Key, and " + protocol.ErrorMessage(err))
		}
	}
	return nil
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if err := s.canIssue(r.Context()); err != nil {
		writeProblem(w, unavailable(err))
		return
	}
	writeJSON(w, wire.StatusResponse{Status: "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.canIssue(r.Context()); err != nil {
		writeProblem(w, &idkeeper.Error{Code: protocol.CodeNotReady, Message: "the gateway cannot issue IDs now: " + err.Error(), Err: err})
		return
	}
	writeJSON(w, wire.StatusResponse{Status: "ready"})
}

var errEnded = &idkeeper.Error{Code: CodeIssuingUnavailable,
	Message: "the gateway's session has ended for good (lease lost or closed) and will never issue again; restart the gateway"}

func (s *Server) livez(w http.ResponseWriter, _ *http.Request) {
	if d, ok := s.src.(doner); ok {
		select {
		case <-d.Done():
			writeProblem(w, errEnded)
			return
		default:
		}
	}
	writeJSON(w, wire.StatusResponse{Status: "ok"})
}
