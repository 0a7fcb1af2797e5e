package clockcheck

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// dialFrom opens a connection to addr from the loopback address src (Linux's
// loopback answers the whole of 127.0.0.0/8).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	return c
}

// idleFlood opens n connections from src to addr that send nothing, closed at
// the test's end.
func idleFlood(t *testing.T, src, addr string, n int) {
	t.Helper()
	for range n {
		c := dialFrom(t, src, addr)
		t.Cleanup(func() { c.Close() })
	}
}

// closedAtOnce reports whether the agent closed c unanswered within limit.
func closedAtOnce(t *testing.T, c net.Conn, limit time.Duration) bool {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(limit))
	b, err := io.ReadAll(c)
	return len(b) == 0 && (err == nil || isReset(err))
}

func testVerifier(addr string) *Verifier {
	return &Verifier{Addr: addr, Secret: testSecret, Timeout: 2 * time.Second}
}

// TestAgentFloodFromOneSource is issue #29's finding 1 with the Agent's
// defaults: 80 idle connections from one loopback address (127.0.0.2) used to
// take all 64 slots for 2 s each, so a replica's sample from 127.0.0.1 failed
// with an I/O error and latched its monitor. The per-source bound keeps 8 of
// them; the replica's sample is answered.
func TestAgentFloodFromOneSource(t *testing.T) {
	a, addr := startAgent(t, &Agent{Source: fixedSource{synced: true}})
	idleFlood(t, "127.0.0.2", addr, 80)
	eventually(t, "the flood accepted", func() bool { st := a.Stats(); return st.Refused+uint64(inFlight(a)) >= 80 })
	if s, err := testVerifier(addr).Sample(t.Context()); err != nil {
		t.Fatalf("the replica's sample during the flood: %v", err)
	} else if s.RTT > 200*time.Millisecond {
		t.Errorf("answered after %s", s.RTT)
	}
	// The flooding source's own slots: the replica's sample may still hold its
	// slot for a moment after its answer arrived.
	if n := heldBy(a, "127.0.0.2"); n > DefaultMaxConnsPerSource {
		t.Errorf("%d connections held from one source, at most %d allowed", n, DefaultMaxConnsPerSource)
	}
}

// TestAgentFloodFromStranger: with the allow-list 127.0.0.1/32, a flood from
// 127.0.0.2 is closed at accept without taking a slot, counted as Denied, and
// the replica at 127.0.0.1 is answered.
func TestAgentFloodFromStranger(t *testing.T) {
	var lines syncBuffer
	a, addr := startAgent(t, &Agent{Source: fixedSource{synced: true}, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Logger: slog.New(slog.NewTextHandler(&lines, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	idleFlood(t, "127.0.0.2", addr, 100)
	eventually(t, "the flood denied", func() bool { return a.Stats().Denied >= 100 })
	if n := inFlight(a); n != 0 {
		t.Errorf("%d connections of a stranger hold a slot", n)
	}
	if _, err := testVerifier(addr).Sample(t.Context()); err != nil {
		t.Fatalf("the replica's sample during the flood: %v", err)
	}
	if st := a.Stats(); st.Answered != 1 || st.Refused != 0 || st.Denied != 100 {
		t.Errorf("stats %+v", st)
	}
	if n := strings.Count(lines.String(), "off the allow-list"); n != 1 {
		t.Errorf("%d log lines for 100 denied connections, want 1 (one per 10 s):\n%s", n, lines.String())
	}
}

// TestAgentDeniesStrangerRequest: a source off the list gets no answer even to
// a valid request, and is closed at once.
func TestAgentDeniesStrangerRequest(t *testing.T) {
	a, addr := startAgent(t, &Agent{Source: fixedSource{synced: true}, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	c := dialFrom(t, "127.0.0.2", addr)
	defer c.Close()
	_, _ = io.WriteString(c, goodRequest())
	start := time.Now()
	if !closedAtOnce(t, c, 5*time.Second) || time.Since(start) > time.Second {
		t.Fatalf("a stranger's request was not closed at once, unanswered (%s)", time.Since(start))
	}
	if st := a.Stats(); st.Denied != 1 || st.Answered != 0 {
		t.Fatalf("stats %+v", st)
	}
	got, _ := exchange(t, addr, goodRequest())
	if !strings.HasPrefix(got, "TCKCLK 2 ") {
		t.Fatalf("the allowed source: %q", got)
	}
}

func TestAgentAllowed(t *testing.T) {
	def := &Agent{}
	list := &Agent{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00::/8")}}
	cases := []struct {
		a    *Agent
		src  string
		want bool
	}{
		{def, "127.0.0.1", true}, {def, "127.255.0.9", true}, {def, "::1", true},
		{def, "10.0.0.1", false}, {def, "::2", false}, {def, "fe80::1", false},
		{list, "10.1.2.3", true}, {list, "fd12::1", true}, {list, "10.2.0.1", false}, {list, "127.0.0.1", false},
	}
	for _, c := range cases {
		if got := c.a.allowed(netip.MustParseAddr(c.src)); got != c.want {
			t.Errorf("allowed(%s) = %v with %v", c.src, got, c.a.Allow)
		}
	}
	// A v4-mapped source is judged as its IPv4 address.
	srv, cli := net.Pipe()
	defer srv.Close()
	defer cli.Close()
	mapped := &net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 9}
	if src, ok := sourceOf(addrConn{srv, mapped}); !ok || !list.allowed(src) {
		t.Errorf("v4-mapped source %v: %v %v", mapped, src, ok)
	}
}

type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// TestAgentPerSourceBound: one allowed source holds at most MaxConnsPerSource
// connections; the next is closed at once, while another source is served.
func TestAgentPerSourceBound(t *testing.T) {
	a, addr := startAgent(t, &Agent{Source: fixedSource{synced: true}, MaxConnsPerSource: 3, ReadTimeout: time.Minute, Timeout: time.Minute})
	idleFlood(t, "127.0.0.2", addr, 3)
	eventually(t, "three connections held", func() bool { return inFlight(a) == 3 })
	c := dialFrom(t, "127.0.0.2", addr)
	defer c.Close()
	if !closedAtOnce(t, c, 2*time.Second) {
		t.Fatal("a fourth connection from one source was held")
	}
	if got, _ := exchange(t, addr, goodRequest()); !strings.HasPrefix(got, "TCKCLK 2 ") {
		t.Fatalf("another source: %q", got)
	}
	if st := a.Stats(); st.Refused != 1 || st.Answered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestAgentReadDeadline: a connection that sends no line is closed after
// ReadTimeout, long before Timeout; slots are given back.
func TestAgentReadDeadline(t *testing.T) {
	a, addr := startAgent(t, &Agent{Source: fixedSource{synced: true}, ReadTimeout: 100 * time.Millisecond, Timeout: time.Minute})
	c := dialFrom(t, "127.0.0.1", addr)
	defer c.Close()
	start := time.Now()
	if !closedAtOnce(t, c, 10*time.Second) {
		t.Fatal("an idle connection was answered")
	}
	if took := time.Since(start); took < 90*time.Millisecond || took > 5*time.Second {
		t.Fatalf("closed after %s, want the 100 ms read deadline", took)
	}
	eventually(t, "the slot given back", func() bool { return inFlight(a) == 0 && a.Stats().Malformed == 1 })
}

// TestAgentDefaultReadDeadline: the default read deadline, 500 ms, is well
// within the default Timeout of 2 s.
func TestAgentDefaultReadDeadline(t *testing.T) {
	_, addr := startAgent(t, &Agent{Source: fixedSource{synced: true}})
	c := dialFrom(t, "127.0.0.1", addr)
	defer c.Close()
	start := time.Now()
	_ = closedAtOnce(t, c, 10*time.Second)
	if took := time.Since(start); took < 400*time.Millisecond || took > 1500*time.Millisecond {
		t.Fatalf("closed after %s, want about %s", took, DefaultReadTimeout)
	}
}

// BenchmarkAgentAnswer is the work of one valid request once accepted: read the
// line, parse it, read the source, MAC and write the answer.
func BenchmarkAgentAnswer(b *testing.B) {
	a := &Agent{Secret: testSecret, Source: fixedSource{synced: true, unc: time.Millisecond}, Logger: quiet()}
	req := NewRequest().AppendLine(nil)
	b.ReportAllocs()
	for b.Loop() {
		c := &memConn{in: strings.NewReader(string(req))}
		a.answer(c)
		if c.out.Len() == 0 {
			b.Fatal("no answer")
		}
	}
}

// BenchmarkAgentExchange is one whole exchange over loopback TCP, dial included.
func BenchmarkAgentExchange(b *testing.B) {
	a := &Agent{Secret: testSecret, Source: fixedSource{synced: true, unc: time.Millisecond}, Logger: quiet()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = a.Serve(ln) }()
	defer a.Close()
	v := testVerifier(ln.Addr().String())
	for b.Loop() {
		if _, err := v.Sample(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// memConn is a connection in memory: it reads in and writes to out.
type memConn struct {
	in  io.Reader
	out strings.Builder
}

func (c *memConn) Read(p []byte) (int, error)       { return c.in.Read(p) }
func (c *memConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }
