package clockcheck

import (
	"errors"
	"log/slog"
	"net"
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

// DefaultMaxConns is the Agent's default limit of connections served at once.
const DefaultMaxConns = 64

// Agent serves TCKCLK 2 from its Source. Zero-value fields take their defaults;
// Secret and Source are required. Set the fields before Serve.
type Agent struct {
	// Secret is the shared secret, at least MinSecretLen bytes.
	Secret []byte
	// Source is the time answered.
	Source TimeSource
	// MaxConns bounds the connections served at once; one over it is closed at
	// once without an answer. Default 64.
	MaxConns int
	// Timeout bounds a whole connection, from accept to the answer written.
	// Default 2 s.
	Timeout time.Duration
	// Logger receives accept errors (warn) and refused or malformed requests
	// (debug). Default slog.Default().
	Logger *slog.Logger

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	closed    bool
	sem       chan struct{}
	wg        sync.WaitGroup

	answered, malformed, refused atomic.Uint64
}

// AgentStats counts an Agent's connections by outcome.
type AgentStats struct {
	Answered  uint64 // requests answered
	Malformed uint64 // connections closed without an answer: bad request, too long, too slow, I/O error
	Refused   uint64 // connections closed at once: over MaxConns
}

// ErrAgentClosed is returned by Serve after Close.
var ErrAgentClosed = errors.New("clockcheck: agent closed")

// Stats returns the counts so far.
func (a *Agent) Stats() AgentStats {
	return AgentStats{Answered: a.answered.Load(), Malformed: a.malformed.Load(), Refused: a.refused.Load()}
}

func (a *Agent) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}

// Serve accepts connections on ln and answers each with one exchange: it reads
// one request line within Timeout, answers it from Source with a MAC, and closes
// the connection. A malformed or oversized request, or one not complete within
// Timeout, gets the connection closed without an answer. Serve returns
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
		a.listeners, a.conns = map[net.Listener]struct{}{}, map[net.Conn]struct{}{}
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
		select {
		case a.sem <- struct{}{}:
		default:
			a.refused.Add(1)
			a.logger().Debug("clock agent: too many connections; closing one", "remote", conn.RemoteAddr().String())
			conn.Close()
			continue
		}
		if !a.track(conn) {
			<-a.sem
			conn.Close()
			return ErrAgentClosed
		}
		go a.handle(conn)
	}
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

func (a *Agent) track(c net.Conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.conns[c] = struct{}{}
	a.wg.Add(1)
	return true
}

func (a *Agent) handle(c net.Conn) {
	defer func() {
		c.Close()
		a.mu.Lock()
		delete(a.conns, c)
		a.mu.Unlock()
		<-a.sem
		a.wg.Done()
	}()
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
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
