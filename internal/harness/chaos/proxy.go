package chaos

import (
	"bytes"
	"errors"
	"maps"
	"net"
	"sync"
	"time"
)

// Mode is what a Proxy does to the traffic it forwards.
type Mode int

// Proxy modes.
const (
	// Pass forwards everything at once.
	Pass Mode = iota
	// Drop is a partition: nothing passes either way. Connections stay open and
	// their bytes are swallowed; new connections are accepted and black-holed. When
	// the partition heals, every connection that lost bytes is closed, as TCP would
	// after its retransmissions gave up.
	Drop
	// Delay delivers every chunk, both ways, Delay after it was read.
	Delay
	// DelayAnswers delays only what the servers send back: requests arrive (and take
	// effect) on time, their answers late.
	DelayAnswers
	// DelayRenewAnswers delays only the answers to Renew requests.
	DelayRenewAnswers
)

func (m Mode) String() string {
	return [...]string{"pass", "drop", "delay", "delay-answers", "delay-renew-answers"}[m]
}

// renewLine starts every Renew request on the wire (DESIGN §10).
var renewLine = []byte("POST /v1/leases/renew ")

// Proxy is a TCP proxy on a loopback port in front of one or more backends, that a
// test switches between modes. Each accepted connection goes to the next backend in
// turn that accepts a dial, as a load balancer would. Safe for concurrent use.
type Proxy struct {
	ln       net.Listener
	backends []string

	mu    sync.Mutex
	mode  Mode
	delay time.Duration
	next  int
	out   map[string]bool // backends taken out of the rotation (Drain)
	conns map[*proxyConn]struct{}
	done  bool
	wg    sync.WaitGroup
}

// proxyConn is one client connection and its backend connection (nil while
// black-holed).
type proxyConn struct {
	client, backend net.Conn
	mu              sync.Mutex
	renew           bool // the last request on it was a Renew
	lost            bool // bytes were dropped: close it when the partition heals
}

// NewProxy listens on a free loopback port and forwards to backends (host:port).
func NewProxy(backends ...string) (*Proxy, error) {
	if len(backends) == 0 {
		return nil, errors.New("chaos: a proxy needs a backend")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, backends: backends, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set switches the mode; delay is used by the delaying modes. Leaving Drop closes
// every connection that lost bytes.
func (p *Proxy) Set(mode Mode, delay time.Duration) {
	p.mu.Lock()
	p.mode, p.delay = mode, delay
	var broken []*proxyConn
	if mode != Drop {
		for c := range p.conns {
			c.mu.Lock()
			if c.lost {
				broken = append(broken, c)
			}
			c.mu.Unlock()
		}
	}
	p.mu.Unlock()
	for _, c := range broken {
		c.close()
	}
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.done = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) state() (Mode, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		pc := &proxyConn{client: c}
		p.mu.Lock()
		if p.done {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.conns[pc] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pc)
	}
}

// serve dials a backend unless the proxy is partitioned (then the connection is
// black-holed for good) and pumps both ways until either side ends.
func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if mode, _ := p.state(); mode == Drop {
		c.mu.Lock()
		c.lost = true
		c.mu.Unlock()
		buf := make([]byte, 4096)
		for {
			if _, err := c.client.Read(buf); err != nil {
				return
			}
		}
	}
	b := p.dial()
	if b == nil {
		return
	}
	c.mu.Lock()
	c.backend = b
	c.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.pump(c, c.client, b, true) })
	wg.Go(func() { p.pump(c, b, c.client, false) })
	wg.Wait()
}

// Drain takes backend out of the rotation and closes the connections to it, as
// a load balancer does with a backend whose readiness check fails.
func (p *Proxy) Drain(backend string) {
	p.mu.Lock()
	if p.out == nil {
		p.out = map[string]bool{}
	}
	p.out[backend] = true
	var conns []*proxyConn
	for c := range p.conns {
		c.mu.Lock()
		if c.backend != nil && c.backend.RemoteAddr().String() == backend {
			conns = append(conns, c)
		}
		c.mu.Unlock()
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// dial returns a connection to the next backend in the rotation that accepts
// one, or nil.
func (p *Proxy) dial() net.Conn {
	p.mu.Lock()
	start := p.next
	p.next++
	out := maps.Clone(p.out)
	p.mu.Unlock()
	for i := range p.backends {
		addr := p.backends[(start+i)%len(p.backends)]
		if out[addr] {
			continue
		}
		if b, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			return b
		}
	}
	return nil
}

type chunk struct {
	data []byte
	at   time.Time
}

// pump copies src to dst, one read at a time, dropping or delaying each chunk as
// the mode at the time of its reading says. Delayed chunks keep their order.
func (p *Proxy) pump(c *proxyConn, src, dst net.Conn, up bool) {
	q := make(chan chunk, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ch := range q {
			time.Sleep(time.Until(ch.at))
			if _, err := dst.Write(ch.data); err != nil {
				c.close()
				for range q {
				}
				return
			}
		}
	})
	defer wg.Wait()
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			c.close()
			return
		}
		data := bytes.Clone(buf[:n])
		mode, delay := p.state()
		c.mu.Lock()
		if up {
			if bytes.HasPrefix(data, renewLine) {
				c.renew = true
			} else if bytes.HasPrefix(data, []byte("POST ")) || bytes.HasPrefix(data, []byte("GET ")) {
				c.renew = false
			}
		}
		renew := c.renew
		if mode == Drop {
			c.lost = true
		}
		c.mu.Unlock()
		at := time.Now()
		switch {
		case mode == Drop:
			continue
		case mode == Delay,
			mode == DelayAnswers && !up,
			mode == DelayRenewAnswers && !up && renew:
			at = at.Add(delay)
		}
		q <- chunk{data, at}
	}
}

func (c *proxyConn) close() {
	c.mu.Lock()
	b := c.backend
	c.mu.Unlock()
	c.client.Close()
	if b != nil {
		b.Close()
	}
}
