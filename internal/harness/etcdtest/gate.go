package etcdtest

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// gate stands in front of one member's peer listener: the other members reach
// that member only through it, so a test can cut the member off from its peers
// (Server.Isolate) while its clients still reach it, as a partition between racks
// would.
//
// Every peer connection etcd opens (a stream or a pipeline request of rafthttp)
// starts with an HTTP request whose X-Server-From header names the member that
// dialled, and an etcd transport is per remote member, so a connection carries one
// sender's traffic only. The gate reads that header and, while the sender or the
// receiver is cut, closes the connection instead of passing it on.
type gate struct {
	ln     net.Listener
	target string // the member's real peer address
	to     string // the member's ID (hex), once it is known
	cut    func(from, to string) bool

	mu    sync.Mutex
	conns map[*gateConn]struct{}
	wg    sync.WaitGroup
}

type gateConn struct {
	down net.Conn
	// from and checked are guarded by the gate's mu: checked once the first
	// request's header was read; from is its sender, "" when it names none.
	from    string
	checked bool

	mu     sync.Mutex
	up     net.Conn
	closed bool
}

// close closes both sides, now or, for a side not dialled yet, as it is.
func (c *gateConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.down.Close()
	if c.up != nil {
		c.up.Close()
	}
}

// setUp records the member's side, false when the connection was closed meanwhile.
func (c *gateConn) setUp(up net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.up = up
	return true
}

// headerLimit bounds what the gate buffers to find the sender: rafthttp's request
// headers take a few hundred bytes.
const headerLimit = 16 << 10

func newGate(ln net.Listener, target string, cut func(from, to string) bool) *gate {
	g := &gate{ln: ln, target: target, cut: cut, conns: map[*gateConn]struct{}{}}
	g.wg.Go(g.serve)
	return g
}

func (g *gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.wg.Go(func() { g.pass(c) })
	}
}

func (g *gate) pass(down net.Conn) {
	gc := &gateConn{down: down}
	if !g.track(gc) {
		down.Close()
		return
	}
	defer g.untrack(gc)
	defer gc.close()
	br := bufio.NewReaderSize(down, headerLimit)
	_ = down.SetReadDeadline(time.Now().Add(10 * time.Second))
	head, err := peekHeader(br)
	if err != nil {
		return
	}
	_ = down.SetReadDeadline(time.Time{})
	g.mu.Lock()
	gc.from, gc.checked = serverFrom(head), true
	refused := g.cut(gc.from, g.to)
	g.mu.Unlock()
	if refused {
		return
	}
	up, err := net.DialTimeout("tcp", g.target, 5*time.Second)
	if err != nil {
		return
	}
	if !gc.setUp(up) {
		up.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, br); done <- struct{}{} }()
	go func() { _, _ = io.Copy(down, up); done <- struct{}{} }()
	<-done
}

// peekHeader returns the bytes of the first request's header, leaving them in br.
// It reads only as far as the header: a request without a body (a stream's GET)
// sends nothing more until it is answered.
func peekHeader(br *bufio.Reader) ([]byte, error) {
	for {
		b, _ := br.Peek(br.Buffered())
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			return b[:i], nil
		}
		if len(b) == headerLimit {
			return nil, errors.New("etcdtest: a peer request header past the gate's limit")
		}
		// Wait for at least one more byte.
		if _, err := br.Peek(len(b) + 1); err != nil {
			return nil, err
		}
	}
}

// serverFrom is the value of the X-Server-From header in head, "" without one.
func serverFrom(head []byte) string {
	for _, line := range bytes.Split(head, []byte("\r\n")) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(name), []byte("X-Server-From")) {
			return string(bytes.TrimSpace(value))
		}
	}
	return ""
}

func (g *gate) track(c *gateConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conns == nil {
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *gate) untrack(c *gateConn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

// sever closes every connection the cut now refuses.
func (g *gate) sever() {
	g.mu.Lock()
	var doomed []*gateConn
	for c := range g.conns {
		if c.checked && g.cut(c.from, g.to) {
			doomed = append(doomed, c)
		}
	}
	g.mu.Unlock()
	for _, c := range doomed {
		c.close()
	}
}

// setMember records the ID of the member behind the gate (hex, as rafthttp
// writes it).
func (g *gate) setMember(id string) {
	g.mu.Lock()
	g.to = id
	g.mu.Unlock()
}

func (g *gate) close() {
	g.ln.Close()
	g.mu.Lock()
	conns := g.conns
	g.conns = nil
	g.mu.Unlock()
	for c := range conns {
		c.close()
	}
	g.wg.Wait()
}
