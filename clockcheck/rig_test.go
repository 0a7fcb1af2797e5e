package clockcheck

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/ntptest"
)

var testSecret = []byte("test-secret-0123456789abcdefghij")

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startNTP starts an SNTP responder on loopback, closed at the test's end.
func startNTP(t *testing.T) *ntptest.Server {
	t.Helper()
	s, err := ntptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// startSource starts an NTPSource on the responders and waits until it is synced.
func startSource(t *testing.T, src *NTPSource, servers ...*ntptest.Server) *NTPSource {
	t.Helper()
	for _, s := range servers {
		src.Servers = append(src.Servers, s.Addr())
	}
	if src.Timeout == 0 {
		src.Timeout = 500 * time.Millisecond
	}
	if src.Logger == nil {
		src.Logger = quiet()
	}
	if err := src.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := src.Wait(ctx); err != nil {
		t.Fatalf("the NTP source never synced: %v", err)
	}
	return src
}

// startAgent serves src on a loopback port and returns the agent and its address.
func startAgent(t *testing.T, a *Agent) (*Agent, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if a.Secret == nil {
		a.Secret = testSecret
	}
	if a.Logger == nil {
		a.Logger = quiet()
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ln) }()
	t.Cleanup(func() {
		_ = a.Close()
		if err := <-served; !errors.Is(err, ErrAgentClosed) {
			t.Errorf("Serve returned %v, want ErrAgentClosed", err)
		}
	})
	return a, ln.Addr().String()
}

// proxy sits between a Verifier and an agent and misbehaves on demand: mode
// decides what reaches the verifier.
type proxy struct {
	upstream string
	ln       net.Listener
	mode     atomic.Value // proxyMode
	mu       sync.Mutex
	previous []byte // the last answer passed through, LF included
	wg       sync.WaitGroup
}

// proxyMode turns the request and the agent's answer (LF included) into what
// the verifier gets. hold: answer nothing, keep the connection open.
type proxyMode struct {
	name      string
	hold      bool
	transform func(p *proxy, req, resp []byte) []byte
}

var passThrough = proxyMode{name: "pass"}

func startProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{upstream: upstream, ln: ln}
	p.mode.Store(passThrough)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *proxy) Addr() string       { return p.ln.Addr().String() }
func (p *proxy) set(m proxyMode)    { p.mode.Store(m) }
func (p *proxy) current() proxyMode { return p.mode.Load().(proxyMode) }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer c.Close()
			p.handle(c)
		}()
	}
}

func (p *proxy) handle(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req, err := readLine(c)
	if err != nil {
		return
	}
	m := p.current()
	if m.hold {
		_, _ = io.Copy(io.Discard, c) // until the verifier gives up
		return
	}
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer up.Close()
	if _, err := up.Write(append(bytes.Clone(req), '\n')); err != nil {
		return
	}
	resp, err := readLine(up)
	if err != nil {
		return
	}
	resp = append(resp, '\n')
	out := resp
	if m.transform != nil {
		out = m.transform(p, req, resp)
	}
	p.mu.Lock()
	p.previous = resp
	p.mu.Unlock()
	_, _ = c.Write(out)
}

// The proxy modes of the failure cases.
var (
	flipMAC = proxyMode{name: "mac flipped", transform: func(_ *proxy, _, resp []byte) []byte {
		out := bytes.Clone(resp)
		out[len(out)-6] = flipLetter(out[len(out)-6])
		return out
	}}
	otherNonce = proxyMode{name: "nonce mismatch", transform: func(_ *proxy, _, resp []byte) []byte {
		// A confused agent: a correct MAC over another nonce.
		r, _, err := parseResponseSyntax(resp[:len(resp)-1])
		if err != nil {
			panic(err)
		}
		r.Nonce[3] ^= 0x40
		return r.AppendLine(nil, testSecret)
	}}
	replay = proxyMode{name: "replayed answer", transform: func(p *proxy, _, resp []byte) []byte {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.previous == nil {
			return resp
		}
		return p.previous
	}}
	oversized = proxyMode{name: "oversized line", transform: func(_ *proxy, _, resp []byte) []byte {
		return append(bytes.Repeat([]byte("TCKCLK 2 "), 40), '\n')
	}}
	leadingZeros = proxyMode{name: "leading zeros", transform: func(_ *proxy, _, resp []byte) []byte {
		f := bytes.Split(resp, []byte(" "))
		f[4] = append([]byte("0"), f[4]...)
		return bytes.Join(f, []byte(" "))
	}}
	otherVersion = proxyMode{name: "version 3", transform: func(_ *proxy, _, resp []byte) []byte {
		return bytes.Replace(resp, []byte("TCKCLK 2 "), []byte("TCKCLK 3 "), 1)
	}}
	cutShort = proxyMode{name: "cut short", transform: func(_ *proxy, _, resp []byte) []byte {
		return resp[:20]
	}}
	silent = proxyMode{name: "never answers", hold: true}
)

// shiftedClock is a Verifier.Now whose offset from time.Now the test sets.
type shiftedClock struct{ shift atomic.Int64 }

func (c *shiftedClock) Now() time.Time         { return time.Now().Add(time.Duration(c.shift.Load())) }
func (c *shiftedClock) Set(d time.Duration)    { c.shift.Store(int64(d)) }
func (c *shiftedClock) Add(d time.Duration)    { c.shift.Add(int64(d)) }
func (c *shiftedClock) Current() time.Duration { return time.Duration(c.shift.Load()) }
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
