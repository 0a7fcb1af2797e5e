package chaos

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// echoServer answers every line with "echo: <line>".
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte("echo: " + line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

type lineConn struct {
	net.Conn
	r *bufio.Reader
}

func dialProxy(t *testing.T, p *Proxy) *lineConn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &lineConn{c, bufio.NewReader(c)}
}

// roundTrip sends line and returns the answer and how long it took; "" when none
// came within timeout.
func (c *lineConn) roundTrip(t *testing.T, line string, timeout time.Duration) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", time.Since(start)
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	ans, err := c.r.ReadString('\n')
	if err != nil {
		return "", time.Since(start)
	}
	return strings.TrimSpace(ans), time.Since(start)
}

func newProxy(t *testing.T, backends ...string) *Proxy {
	t.Helper()
	p, err := NewProxy(backends...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestProxyPassesAndDelays(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dialProxy(t, p)
	if ans, d := c.roundTrip(t, "hi", time.Second); ans != "echo: hi" || d > 200*time.Millisecond {
		t.Fatalf("pass: %q in %v", ans, d)
	}
	p.Set(Delay, 150*time.Millisecond)
	if ans, d := c.roundTrip(t, "slow", 2*time.Second); ans != "echo: slow" || d < 300*time.Millisecond {
		t.Fatalf("delay both ways: %q in %v, want ≥ 300ms", ans, d)
	}
	p.Set(DelayAnswers, 150*time.Millisecond)
	if ans, d := c.roundTrip(t, "late", 2*time.Second); ans != "echo: late" || d < 150*time.Millisecond || d > 280*time.Millisecond {
		t.Fatalf("delay answers: %q in %v, want 150ms..280ms", ans, d)
	}
}

func TestProxyDelaysOnlyRenewAnswers(t *testing.T) {
	p := newProxy(t, echoServer(t))
	p.Set(DelayRenewAnswers, 200*time.Millisecond)
	c := dialProxy(t, p)
	if _, d := c.roundTrip(t, "POST /v1/leases HTTP/1.1", time.Second); d > 150*time.Millisecond {
		t.Fatalf("an alloc answer was delayed by %v", d)
	}
	if _, d := c.roundTrip(t, "POST /v1/leases/renew HTTP/1.1", time.Second); d < 200*time.Millisecond {
		t.Fatalf("a renew answer came after %v, want ≥ 200ms", d)
	}
	if _, d := c.roundTrip(t, "GET /v1/version HTTP/1.1", time.Second); d > 150*time.Millisecond {
		t.Fatalf("the answer after a renew was delayed by %v", d)
	}
}

func TestProxyDropsAndClosesOnHeal(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dialProxy(t, p)
	if ans, _ := c.roundTrip(t, "before", time.Second); ans != "echo: before" {
		t.Fatalf("before the partition: %q", ans)
	}
	p.Set(Drop, 0)
	if ans, _ := c.roundTrip(t, "lost", 300*time.Millisecond); ans != "" {
		t.Fatalf("during the partition: %q got through", ans)
	}
	fresh := dialProxy(t, p) // accepted, black-holed
	if ans, _ := fresh.roundTrip(t, "lost too", 300*time.Millisecond); ans != "" {
		t.Fatalf("a new connection during the partition: %q got through", ans)
	}
	p.Set(Pass, 0)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.r.ReadString('\n'); err == nil {
		t.Fatal("a connection that lost bytes survived the heal")
	}
	if ans, _ := dialProxy(t, p).roundTrip(t, "after", time.Second); ans != "echo: after" {
		t.Fatalf("after the heal: %q", ans)
	}
}

func TestProxySkipsADeadBackend(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	p := newProxy(t, dead, echoServer(t))
	for i := range 3 {
		if ans, _ := dialProxy(t, p).roundTrip(t, "x", time.Second); ans != "echo: x" {
			t.Fatalf("connection %d: %q", i, ans)
		}
	}
}
