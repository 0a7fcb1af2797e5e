package clockcheck

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// exchange sends raw on a new connection to addr and returns all it reads until
// the agent closes, and how long that took.
func exchange(t *testing.T, addr, raw string) (string, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil && !isReset(err) {
		t.Fatalf("read: %v", err)
	}
	return string(b), time.Since(start)
}

// isReset: a peer that closes with unread input resets the connection.
func isReset(err error) bool {
	return strings.Contains(err.Error(), "reset") || errors.Is(err, net.ErrClosed)
}

// inFlight is the number of connections the agent holds.
func inFlight(a *Agent) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.sem)
}

// heldBy is how many connections of source hold a slot of a.
func heldBy(a *Agent, source string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.perSource[netip.MustParseAddr(source)]
}

func goodRequest() string { return string(NewRequest().AppendLine(nil)) }

func TestAgentAnswers(t *testing.T) {
	_, addr := startAgent(t, &Agent{Source: fixedSource{unc: 3 * time.Millisecond, synced: true, age: 2 * time.Second}})
	req := NewRequest()
	got, _ := exchange(t, addr, string(req.AppendLine(nil))+"trailing bytes are ignored")
	if !strings.HasSuffix(got, "\n") || strings.Count(got, "\n") != 1 {
		t.Fatalf("answer %q", got)
	}
	r, err := ParseResponse([]byte(strings.TrimSuffix(got, "\n")), testSecret, req.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Synced || r.UncertaintyMs != 4 || r.SourceAgeMs != 2000 || time.Since(time.UnixMilli(int64(r.ReferenceUnixMs))).Abs() > time.Second {
		t.Fatalf("%+v", r)
	}
}

func TestAgentMalformedRequests(t *testing.T) {
	a, addr := startAgent(t, &Agent{Source: fixedSource{synced: true}, Timeout: 5 * time.Second})
	good := strings.TrimSuffix(goodRequest(), "\n")
	bad := []string{
		"\n",
		"hello\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		good + "\r\n",
		" " + good + "\n",
		good + " \n",
		strings.Replace(good, " 2 ", " 1 ", 1) + "\n",
		strings.Replace(good, " 2 ", " 02 ", 1) + "\n",
		good[:len(good)-1] + "\n",
		good + "A\n",
		"TCKCLK 2 \x00\x01\x02\xff\xfe\n",
		strings.Repeat("A", MaxLine+1),         // no LF within the limit: closed at once
		strings.Repeat("A", 4096) + "\n",       // oversized
		good + strings.Repeat(" ", 300) + "\n", // oversized
	}
	for _, raw := range bad {
		got, took := exchange(t, addr, raw)
		if got != "" {
			t.Errorf("%q answered %q", raw, got)
		}
		if took > 2*time.Second {
			t.Errorf("%q: closed after %s, want at once", raw, took)
		}
	}
	if got, _ := exchange(t, addr, goodRequest()); !strings.HasPrefix(got, "TCKCLK 2 ") {
		t.Fatalf("good request after the bad ones: %q", got)
	}
	if st := a.Stats(); st.Malformed != uint64(len(bad)) || st.Answered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestAgentSlowClient: a client that stalls mid-line is cut off after Timeout,
// without an answer, and does not hold up the others.
func TestAgentSlowClient(t *testing.T) {
	_, addr := startAgent(t, &Agent{Source: fixedSource{synced: true}, Timeout: 300 * time.Millisecond})
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	start := time.Now()
	if _, err := io.WriteString(slow, "TCKCLK 2 AAEC"); err != nil {
		t.Fatal(err)
	}
	if got, took := exchange(t, addr, goodRequest()); !strings.HasPrefix(got, "TCKCLK 2 ") || took > 200*time.Millisecond {
		t.Fatalf("a good client behind a slow one: %q after %s", got, took)
	}
	_ = slow.SetDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(slow)
	if took := time.Since(start); len(b) != 0 || took < 250*time.Millisecond || took > 2*time.Second {
		t.Fatalf("slow client got %q after %s", b, took)
	}
}

// TestAgentTooManyConnections: over MaxConns a connection is closed at once;
// once the others end, service resumes.
func TestAgentTooManyConnections(t *testing.T) {
	a, addr := startAgent(t, &Agent{Source: fixedSource{synced: true}, MaxConns: 2, Timeout: 500 * time.Millisecond})
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "TCKCLK"); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "two connections held", func() bool { return inFlight(a) == 2 })
	got, took := exchange(t, addr, goodRequest())
	if got != "" || took > 300*time.Millisecond {
		t.Fatalf("third connection: %q after %s", got, took)
	}
	if st := a.Stats(); st.Refused != 1 {
		t.Fatalf("stats %+v", st)
	}
	eventually(t, "the held connections to time out", func() bool { return inFlight(a) == 0 })
	if got, _ := exchange(t, addr, goodRequest()); !strings.HasPrefix(got, "TCKCLK 2 ") {
		t.Fatalf("after the others ended: %q", got)
	}
}

func TestAgentServeRefusesBadConfig(t *testing.T) {
	for _, a := range []*Agent{{Secret: testSecret[:31], Source: fixedSource{}}, {Secret: testSecret}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Serve(ln); err == nil || errors.Is(err, ErrAgentClosed) {
			t.Fatalf("Serve: %v", err)
		}
		if _, err := ln.Accept(); err == nil {
			t.Fatal("listener left open")
		}
	}
}

func TestAgentCloseEndsConnections(t *testing.T) {
	a := &Agent{Secret: testSecret, Source: fixedSource{synced: true}, Timeout: time.Minute, Logger: quiet()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually(t, "the connection held", func() bool { return inFlight(a) == 1 })
	start := time.Now()
	_ = a.Close()
	if err := <-served; !errors.Is(err, ErrAgentClosed) || time.Since(start) > time.Second {
		t.Fatalf("Serve: %v after %s", err, time.Since(start))
	}
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if b, err := io.ReadAll(c); len(b) != 0 || (err != nil && !isReset(err)) {
		t.Fatalf("held connection: %q %v", b, err)
	}
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := a.Serve(ln2); !errors.Is(err, ErrAgentClosed) {
		t.Fatalf("Serve after Close: %v", err)
	}
}

// exactSource returns fixed values, for the rounding rules.
type exactSource struct {
	ref      time.Time
	unc, age time.Duration
	synced   bool
}

func (s exactSource) Now() (time.Time, time.Duration, bool, time.Duration) {
	return s.ref, s.unc, s.synced, s.age
}

func TestResponseRounding(t *testing.T) {
	base := time.UnixMilli(1767225600000)
	cases := []struct {
		src  exactSource
		want Response
	}{
		{exactSource{base.Add(499 * time.Microsecond), 0, 0, true}, Response{ReferenceUnixMs: 1767225600000, UncertaintyMs: 1, Synced: true}},
		{exactSource{base.Add(500 * time.Microsecond), time.Millisecond, 1200 * time.Microsecond, true}, Response{ReferenceUnixMs: 1767225600001, UncertaintyMs: 2, SourceAgeMs: 2, Synced: true}},
		{exactSource{base, 2400 * time.Microsecond, time.Second, false}, Response{ReferenceUnixMs: 1767225600000, UncertaintyMs: 3, SourceAgeMs: 1000}},
		{exactSource{base, 2500 * time.Microsecond, -time.Second, true}, Response{ReferenceUnixMs: 1767225600000, UncertaintyMs: 3, Synced: true}},
		{exactSource{}, Response{}},                                      // never synced
		{exactSource{synced: true}, Response{}},                          // no time: never synced
		{exactSource{ref: time.UnixMilli(-5), synced: true}, Response{}}, // before 1970
	}
	for i, c := range cases {
		if got := responseFrom([16]byte{}, c.src); got != c.want {
			t.Errorf("case %d: %+v, want %+v", i, got, c.want)
		}
	}
}
