package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// Defaults of Config (DESIGN §4).
const (
	DefaultRenewLoopDuration = 10 * time.Minute
	DefaultMinRetryInterval  = 5 * time.Second
	DefaultBackoffInitial    = 3 * time.Second
	DefaultBackoffMax        = 60 * time.Second
	DefaultBackoffMultiplier = 2.0
	DefaultBackoffJitter     = 0.2
	DefaultRequestTimeout    = 10 * time.Second
)

// MaxServerURLs is the most registry replicas a Config may name.
const MaxServerURLs = 16

// Config configures a Session. Zero fields mean the default; APIKey and one of
// ServerURL or ServerURLs are required.
type Config struct {
	// ServerURL is the registry's base URL, e.g. "http://idkeeper:8080": one
	// replica, or a load balancer in front of several. Set it or ServerURLs, not
	// both (an error, rather than a guess at which list was meant).
	ServerURL string
	// ServerURLs are the base URLs of several replicas of one registry deployment
	// (one shared store), e.g. {"http://idkeeper-1:8080", "http://idkeeper-2:8080"}:
	// 1..MaxServerURLs distinct http(s) URLs. Alloc, Renew and Remove go to one
	// replica and move on to the next, once each per call, on a transport error
	// (refused, reset, timed out after RequestTimeout) or a 5xx answer, never on
	// another answer: a 4xx is the registry's verdict, and every replica would
	// give the same. The replica that answered last is the first one tried next
	// time. Failing over is safe: the replicas share one store, a retried Alloc
	// carries the same requester (so it is answered the same lease, never a second
	// one), and a Renew or Remove is the same request again. A lease's deadline
	// counts from the first send of the call, whichever replica answered.
	ServerURLs []string
	// APIKey is sent as X-API-Key on every request.
	APIKey string
	// Count is the number of node IDs (generators) to lease: 1, at most 4096.
	Count int
	// MaxCount turns on node IDs on demand (issue #18) when above Count: while
	// issuing runs at 80 % or more of the ceiling (node IDs held × the layout's
	// IDs per second) in 3 of the last 6 one-second samples of Clock, the session
	// leases as many node IDs again as it holds, up to MaxCount, as an extra
	// session with a requester instance, lease, windows and renewals of its own;
	// when issuing stays below 30 % for 60 s it gives the newest extra session back
	// (drain, then Remove with mintedUpTo). It never holds fewer than Count. An
	// extra session that loses its lease is dropped, the others go on; OnFatal is
	// only for the session's own lease. NextID, NextIDs and NextIDsOn spread over
	// every node ID held (NumNodeIDs); Generator and NumGenerators are the
	// session's own. Close closes the extra sessions too. 0 (or Count): off; at
	// most 4096.
	MaxCount int
	// HTTPClient sends the requests. Default: a client of its own with dial, TLS
	// handshake and response-header timeouts, TLSConfig for https:// and the
	// environment's proxy settings, its transport wrapped by WrapTransport when set;
	// a given client is used as it is. RequestTimeout bounds each request on top of
	// whatever timeout it has. Whatever client is given, the session never follows
	// a redirect: it would send the API key to wherever the redirect points; a 3xx
	// answer is an error like any other non-200.
	HTTPClient *http.Client
	// WrapTransport, when set, wraps the default HTTPClient's transport: the hook
	// for instrumentation from outside, e.g. tracing.Transport (package tracing)
	// for an OpenTelemetry client span per request with its context sent as W3C
	// traceparent. The library itself imports no tracing: without it, requests are
	// not traced. Ignored when HTTPClient is set (wrap that client's transport).
	// It is called once, by New, and must not return nil.
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// TLSConfig configures the default HTTPClient's TLS for an https:// ServerURL,
	// e.g. RootCAs holding a private CA bundle (see CABundle). Ignored when
	// HTTPClient is set. Default: the system's roots.
	TLSConfig *tls.Config
	// RequestTimeout bounds one Alloc, Renew or Remove request: 10 s. A request that
	// runs out of it is a transport error (retried).
	RequestTimeout time.Duration
	// Logger receives the session's logs: slog.Default().
	Logger *slog.Logger
	// OnFatal is called once, after Open has succeeded, when the session loses its
	// lease (the error wraps ErrLeaseLost). Issuing is already blocked when it is
	// called. Default: log the error and os.Exit(1). It runs in a goroutine of the
	// session (a timer's) with no lock held, so it may call Close.
	OnFatal func(error)
	// RenewLoopDuration caps the interval between Renew retries: 10 min.
	RenewLoopDuration time.Duration
	// MinRetryInterval is the shortest interval between Renew retries: 5 s.
	MinRetryInterval time.Duration
	// BackoffInitial, BackoffMax, BackoffMultiplier and BackoffJitter shape the Alloc
	// retries of Open: the k-th retry (k from 0) waits b × (1 ± BackoffJitter,
	// uniformly), b = min(BackoffMax, BackoffInitial × BackoffMultiplier^k), and
	// never longer than BackoffMax: the cap applies after the jitter too. So every
	// wait lies in [b × (1 − BackoffJitter), min(BackoffMax, b × (1 + BackoffJitter))].
	// Defaults 3 s, 60 s, 2 and 0.2: waits of 2.4–3.6 s, 4.8–7.2 s, 9.6–14.4 s,
	// 19.2–28.8 s, 38.4–57.6 s, then 48–60 s. A negative BackoffJitter turns jitter
	// off. Each retry tries every replica of ServerURLs once.
	BackoffInitial    time.Duration
	BackoffMax        time.Duration
	BackoffMultiplier float64
	BackoffJitter     float64
	// Requester identifies this process to the registry: machine ID, PID and start
	// time. Zero: ProcessRequester(). Whatever it holds, the session sets its
	// Instance to a fresh random one of its own (DESIGN §3), so sessions never share
	// a requester.
	Requester protocol.Requester
	// Host is the host name sent with Alloc for the lease history, which answers
	// "which process minted this ID" (idkeeper decode --origin): os.Hostname()
	// when empty; "-" sends none. At most 253 bytes of printable UTF-8.
	Host string
	// Labels are sent with Alloc for the lease history too, e.g. {"service":
	// "orders", "version": "1.4.2"}: at most 16, names of 1..63 characters of
	// A-Z a-z 0-9 _ . - /, values of at most 256 bytes. Nothing is decided on
	// them.
	Labels map[string]string
	// Clock is the session's time source: SystemClock().
	Clock Clock
	// MaxBackwardStep is how far the wall clock may step back while the generators
	// keep minting at their last timestamp (logical time) before they refuse with
	// snowflake.ErrClockBackwards: snowflake.DefaultMaxBackwardStep (5 s); negative
	// tolerates no step.
	MaxBackwardStep time.Duration
}

// withDefaults checks c and fills in the defaults. It does no I/O.
func (c Config) withDefaults() (Config, error) {
	urls, err := c.serverURLs()
	if err != nil {
		return c, err
	}
	c.ServerURL, c.ServerURLs = "", urls
	if c.APIKey == "" {
		return c, errors.New("idkeeper client: Config.APIKey is required")
	}
	if c.Count == 0 {
		c.Count = 1
	}
	if c.Count < 1 || c.Count > protocol.MaxCount {
		return c, fmt.Errorf("idkeeper client: Config.Count %d is outside 1..%d", c.Count, protocol.MaxCount)
	}
	if c.MaxCount != 0 && (c.MaxCount < c.Count || c.MaxCount > protocol.MaxCount) {
		return c, fmt.Errorf("idkeeper client: Config.MaxCount %d is outside Count..%d (%d..%d); 0 turns node IDs on demand off",
			c.MaxCount, protocol.MaxCount, c.Count, protocol.MaxCount)
	}
	if c.Requester != (protocol.Requester{}) {
		r := c.Requester
		r.Instance = ""
		if err := r.Validate(); err != nil {
			return c, fmt.Errorf("idkeeper client: Config.Requester: %w", err)
		}
	}
	switch c.Host {
	case "":
		c.Host, _ = os.Hostname()
	case "-":
		c.Host = ""
	}
	c.Labels = maps.Clone(c.Labels)
	if err := (protocol.ClientInfo{Host: c.Host, Labels: c.Labels}).Validate(); err != nil {
		return c, fmt.Errorf("idkeeper client: Config.Host or Config.Labels: %s", protocol.ErrorMessage(err))
	}
	if c.HTTPClient == nil {
		c.HTTPClient = defaultHTTPClient(c.TLSConfig, c.WrapTransport)
		if c.HTTPClient.Transport == nil {
			return c, errors.New("idkeeper client: Config.WrapTransport returned a nil transport")
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.OnFatal == nil {
		log := c.Logger
		c.OnFatal = func(err error) {
			log.Error("idkeeper client: the lease is lost; exiting the process", "err", err)
			os.Exit(1)
		}
	}
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	durations := []struct {
		p   *time.Duration
		def time.Duration
		nm  string
	}{
		{&c.RequestTimeout, DefaultRequestTimeout, "RequestTimeout"},
		{&c.RenewLoopDuration, DefaultRenewLoopDuration, "RenewLoopDuration"},
		{&c.MinRetryInterval, DefaultMinRetryInterval, "MinRetryInterval"},
		{&c.BackoffInitial, DefaultBackoffInitial, "BackoffInitial"},
		{&c.BackoffMax, DefaultBackoffMax, "BackoffMax"},
	}
	for _, d := range durations {
		if *d.p == 0 {
			*d.p = d.def
		}
		if *d.p < 0 {
			return c, fmt.Errorf("idkeeper client: Config.%s %v is negative", d.nm, *d.p)
		}
	}
	if c.BackoffMultiplier == 0 {
		c.BackoffMultiplier = DefaultBackoffMultiplier
	}
	if c.BackoffMultiplier < 1 {
		return c, fmt.Errorf("idkeeper client: Config.BackoffMultiplier %v is below 1", c.BackoffMultiplier)
	}
	switch {
	case c.BackoffJitter == 0:
		c.BackoffJitter = DefaultBackoffJitter
	case c.BackoffJitter < 0:
		c.BackoffJitter = 0
	case c.BackoffJitter >= 1:
		return c, fmt.Errorf("idkeeper client: Config.BackoffJitter %v must be below 1", c.BackoffJitter)
	}
	return c, nil
}

// serverURLs checks ServerURL and ServerURLs and returns the replicas' base URLs
// without a trailing slash.
func (c Config) serverURLs() ([]string, error) {
	urls, field := c.ServerURLs, "ServerURLs"
	switch {
	case c.ServerURL != "" && len(c.ServerURLs) > 0:
		return nil, errors.New("idkeeper client: set Config.ServerURL (one URL) or Config.ServerURLs (several replicas), not both")
	case c.ServerURL != "":
		urls, field = []string{c.ServerURL}, "ServerURL"
	case len(urls) == 0:
		return nil, errors.New("idkeeper client: Config.ServerURL or Config.ServerURLs is required")
	case len(urls) > MaxServerURLs:
		return nil, fmt.Errorf("idkeeper client: Config.ServerURLs names %d URLs, at most %d", len(urls), MaxServerURLs)
	}
	out := make([]string, 0, len(urls))
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("idkeeper client: Config.%s %q is not an http(s) URL", field, raw)
		}
		base := strings.TrimRight(raw, "/")
		if slices.Contains(out, base) {
			return nil, fmt.Errorf("idkeeper client: Config.%s names %q twice", field, raw)
		}
		out = append(out, base)
	}
	return out, nil
}

// Timeouts of the default HTTPClient's transport.
const (
	dialTimeout           = 5 * time.Second
	tlsHandshakeTimeout   = 10 * time.Second
	responseHeaderTimeout = 10 * time.Second
)

// defaultHTTPClient is the client a session uses when Config.HTTPClient is nil: its
// own transport (keep-alive to the registry, the environment's proxy) with
// timeouts at every step, so that a registry that stops answering costs a retry,
// never a stuck renewal. wrap, when not nil, wraps that transport
// (Config.WrapTransport).
func defaultHTTPClient(tlsCfg *tls.Config, wrap func(http.RoundTripper) http.RoundTripper) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = tlsHandshakeTimeout
	t.ResponseHeaderTimeout = responseHeaderTimeout
	if tlsCfg != nil {
		t.TLSClientConfig = tlsCfg.Clone()
	}
	if wrap == nil {
		return &http.Client{Transport: t}
	}
	return &http.Client{Transport: wrap(t)}
}

// CABundle returns a TLS configuration that trusts the certificates of the PEM
// file at path besides the system's roots (TLS 1.2 at least): for a registry whose
// certificate a private CA signed. It fails when the file cannot be read or holds
// no certificate.
func CABundle(path string) (*tls.Config, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("idkeeper client: read the CA bundle: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("idkeeper client: %s holds no PEM certificate", path)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// clientOf is what the session reports about itself with Alloc; nil when it
// has nothing to report.
func clientOf(c Config) *wire.Client {
	if c.Host == "" && len(c.Labels) == 0 {
		return nil
	}
	return &wire.Client{Host: c.Host, Labels: c.Labels}
}
