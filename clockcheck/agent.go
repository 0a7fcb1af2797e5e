package clockcheck

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// TimeSource is what an Agent answers from: a trusted clock, never the agent's
// own unverified one. Now returns the source's current time, an honest bound on
// its error, whether a fresh valid sample backs it, and that sample's age.
// Without any sample it returns synced = false (the other values are then
// ignored). It must be safe for concurrent use.
type TimeSource interface {
	Now() (ref time.Time, uncertainty time.Duration, synced bool, age time.Duration)
}

// Defaults of the Agent.
const (
	// DefaultMaxConns is the limit of connections served at once.
	DefaultMaxConns = 64
	// DefaultMaxConnsPerSource is the limit of connections served at once from
	// one source address.
	DefaultMaxConnsPerSource = 8
	// DefaultReadTimeout is how long a connection may take to send its request
	// line.
	DefaultReadTimeout = 500 * time.Millisecond
)

// LoopbackOnly is the allow-list of an Agent given none: 127.0.0.0/8 and ::1.
var LoopbackOnly = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// sparseLogEvery is the most often the agent logs connections closed at accept
// (from sources off its allow-list, or over a limit).
const sparseLogEvery = 10 * time.Second

// Agent serves TCKCLK 2 from its Source. Zero-value fields take their defaults;
// Secret and Source are required. Set the fields before Serve.
type Agent struct {
	// Secret is the shared secret, at least MinSecretLen bytes.
	Secret []byte
	// Source is the time answered.
	Source TimeSource
	// Allow lists the source addresses served (an IPv4-mapped IPv6 source is
	// judged as its IPv4 address). A connection from any other source is closed
	// at accept, unanswered, before it takes a slot of MaxConns or
	// MaxConnsPerSource. Empty: LoopbackOnly.
	Allow []netip.Prefix
	// MaxConns bounds the connections served at once; one over it is closed at
	// once without an answer. Default 64.
	MaxConns int
	// MaxConnsPerSource bounds the connections served at once from one source
	// address, so that one allowed host cannot take every slot of MaxConns; one
	// over it is closed at once without an answer. Default 8.
	MaxConnsPerSource int
	// ReadTimeout bounds the time from accept to the request line's LF: a
	// connection that has not sent its line by then is closed unanswered.
	// Default 500 ms; capped at Timeout.
	ReadTimeout time.Duration
	// Timeout bounds a whole connection, from accept to the answer written.
	// Default 2 s.
	Timeout time.Duration
	// Logger receives accept errors (warn), malformed requests (debug), and
	// connections from sources off Allow or over a limit (debug, at most one
	// line per 10 s of each, with the count since). Default slog.Default().
	Logger *slog.Logger

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	closed    bool
	sem       chan struct{}
	perSource map[netip.Addr]int // connections held by source
	wg        sync.WaitGroup

	answered, malformed, refused, denied atomic.Uint64
	deniedLog, refusedLog                sparseLog
}

// sparseLog lets one log line through per sparseLogEvery, with the count of the
// events since the last line: a flood must not flood the log too.
type sparseLog struct {
	mu     sync.Mutex
	logged time.Time
	since  uint64
}

// note counts an event and reports whether to log it now, with the count of
// events since the last line, this one included.
func (l *sparseLog) note() (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.since++
	now := time.Now()
	if now.Sub(l.logged) < sparseLogEvery {
		return 0, false
	}
	n := l.since
	l.logged, l.since = now, 0
	return n, true
}

// AgentStats counts an Agent's connections by outcome.
type AgentStats struct {
	Answered  uint64 // requests answered
	Malformed uint64 // connections closed without an answer: bad request, too long, too slow, I/O error
	Refused   uint64 // connections closed at once: over MaxConns or MaxConnsPerSource
	Denied    uint64 // connections closed at once: from a source off Allow
}

// ErrAgentClosed is returned by Serve after Close.
var ErrAgentClosed = errors.New("clockcheck: agent closed")

// Stats returns the counts so far.
func (a *Agent) Stats() AgentStats {
	return AgentStats{Answered: a.answered.Load(), Malformed: a.malformed.Load(), Refused: a.refused.Load(), Denied: a.denied.Load()}
}

func (a *Agent) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}

// Serve accepts connections on ln and answers each with one exchange: it reads
// one request line within ReadTimeout, answers it from Source with a MAC, and
// closes the connection. A connection from a source off Allow, or over
// MaxConnsPerSource or MaxConns, is closed at accept; a malformed or oversized
// request, or one not complete within ReadTimeout, gets the connection closed
// without an answer. Serve returns
// ErrAgentClosed after Close, an error for a missing Source or a secret under
// MinSecretLen (ln is then closed), or ln's fatal Accept error. Serve may be
// called for several listeners; they share MaxConns.
func (a *Agent) Serve(ln net.Listener) error {
	if err := checkSecret(a.Secret); err != nil {
		ln.Close()
		return err
	}
	if a.Source == nil {
		ln.Close()
		return errors.New("clockcheck: the Agent has no time source")
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		ln.Close()
		return ErrAgentClosed
	}
	if a.listeners == nil {
		a.listeners, a.conns, a.perSource = map[net.Listener]struct{}{}, map[net.Conn]struct{}{}, map[netip.Addr]int{}
		n := a.MaxConns
		if n <= 0 {
			n = DefaultMaxConns
		}
		a.sem = make(chan struct{}, n)
	}
	a.listeners[ln] = struct{}{}
	a.wg.Add(1)
	a.mu.Unlock()
	defer a.wg.Done()
	defer func() {
		a.mu.Lock()
		delete(a.listeners, ln)
		a.mu.Unlock()
	}()

	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if a.isClosed() {
				return ErrAgentClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// Out of file descriptors and the like: wait rather than spin or quit.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				a.logger().Warn("clock agent: accept failed; retrying", "err", err, "retryIn", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		src, ok := sourceOf(conn)
		if !ok || !a.allowed(src) {
			conn.Close()
			a.deny(conn)
			continue
		}
		switch a.admit(conn, src) {
		case admitted:
			go a.handle(conn, src)
		case overLimit:
			conn.Close()
			a.refused.Add(1)
			if n, ok := a.refusedLog.note(); ok {
				a.logger().Debug("clock agent: too many connections; closed one", "remote", conn.RemoteAddr().String(),
					"refusedSinceLastLine", n)
			}
		case agentClosed:
			conn.Close()
			return ErrAgentClosed
		}
	}
}

// sourceOf is the connection's remote address, IPv4-mapped addresses unmapped.
func sourceOf(c net.Conn) (netip.Addr, bool) {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().WithZone(""), true
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), true
}

func (a *Agent) allowed(src netip.Addr) bool {
	allow := a.Allow
	if len(allow) == 0 {
		allow = LoopbackOnly
	}
	for _, p := range allow {
		if p.Contains(src) {
			return true
		}
	}
	return false
}

// deny counts a connection from a source off Allow and logs it at debug level,
// at most once per sparseLogEvery with the count since.
func (a *Agent) deny(c net.Conn) {
	a.denied.Add(1)
	n, ok := a.deniedLog.note()
	if !ok {
		return
	}
	a.logger().Debug("clock agent: connection from a source off the allow-list; closed", "remote", c.RemoteAddr().String(),
		"deniedSinceLastLine", n)
}

type admission int

const (
	admitted admission = iota
	overLimit
	agentClosed
)

// admit takes a slot of MaxConns and of src's MaxConnsPerSource for c, and
// tracks it for Close.
func (a *Agent) admit(c net.Conn, src netip.Addr) admission {
	perSource := a.MaxConnsPerSource
	if perSource <= 0 {
		perSource = DefaultMaxConnsPerSource
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return agentClosed
	}
	if a.perSource[src] >= perSource {
		return overLimit
	}
	select {
	case a.sem <- struct{}{}:
	default:
		return overLimit
	}
	a.perSource[src]++
	a.conns[c] = struct{}{}
	a.wg.Add(1)
	return admitted
}

// isTemporary reports errors a server should wait out, as net/http does.
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (a *Agent) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

func (a *Agent) handle(c net.Conn, src netip.Addr) {
	defer func() {
		c.Close()
		a.mu.Lock()
		delete(a.conns, c)
		if a.perSource[src]--; a.perSource[src] <= 0 {
			delete(a.perSource, src)
		}
		a.mu.Unlock()
		<-a.sem
		a.wg.Done()
	}()
	a.answer(c)
}

// answer serves one exchange on c: the work of a connection once admitted.
func (a *Agent) answer(c net.Conn) {
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	readTimeout := a.ReadTimeout
	if readTimeout <= 0 {
		readTimeout = DefaultReadTimeout
	}
	now := time.Now()
	_ = c.SetDeadline(now.Add(timeout))
	_ = c.SetReadDeadline(now.Add(min(readTimeout, timeout)))
	line, err := readLine(c)
	var req Request
	if err == nil {
		req, err = ParseRequest(line)
	}
	if err != nil {
		a.malformed.Add(1)
		a.logger().Debug("clock agent: no valid request; closing", "remote", c.RemoteAddr().String(), "reason", string(ReasonOf(err)), "err", err)
		return
	}
	resp := responseFrom(req.Nonce, a.Source)
	if _, err := c.Write(resp.AppendLine(make([]byte, 0, 160), a.Secret)); err != nil {
		a.malformed.Add(1)
		a.logger().Debug("clock agent: write failed", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	a.answered.Add(1)
}

// responseFrom builds the answer from the source's reading: the reference time
// rounded to the nearest ms, and the uncertainty rounded up to whole ms after
// adding the 0.5 ms that rounding may cost; the age is rounded up. Without a
// sample (synced = false and a zero ref) every number is 0.
func responseFrom(nonce [NonceLen]byte, src TimeSource) Response {
	ref, unc, synced, age := src.Now()
	r := Response{Nonce: nonce, Synced: synced}
	if ref.IsZero() || ref.UnixMilli() < 0 {
		r.Synced = false
		return r
	}
	r.ReferenceUnixMs = uint64(ref.Add(time.Millisecond / 2).UnixMilli())
	r.UncertaintyMs = ceilMs(max(unc, 0) + time.Millisecond/2)
	r.SourceAgeMs = ceilMs(max(age, 0))
	return r
}

func ceilMs(d time.Duration) uint64 {
	return uint64((d + time.Millisecond - 1) / time.Millisecond)
}

// Close stops every Serve, closes the connections in progress and waits for
// their handlers. Serve returns ErrAgentClosed afterwards.
func (a *Agent) Close() error {
	a.mu.Lock()
	a.closed = true
	for ln := range a.listeners {
		ln.Close()
	}
	for c := range a.conns {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
	return nil
}
