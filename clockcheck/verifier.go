package clockcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Defaults of the Verifier.
const (
	DefaultTimeout      = 2 * time.Second
	DefaultMaxSourceAge = 5 * time.Minute
	DefaultRetryPause   = 50 * time.Millisecond
)

// Verifier samples one clock agent. Its zero-value fields take their defaults;
// Addr and Secret are required. A Verifier is safe for concurrent use once its
// fields are set.
type Verifier struct {
	// Addr is the agent's host:port.
	Addr string
	// Secret is the shared TCKCLK secret, at least MinSecretLen bytes.
	Secret []byte
	// Timeout bounds one whole sample (dial, write, read, and the retries of
	// an I/O failure). Default 2 s.
	Timeout time.Duration
	// RetryPause is the pause before another attempt after an I/O failure of
	// the exchange. Default 50 ms.
	RetryPause time.Duration
	// MaxSourceAge is the oldest agent source sample accepted; older is
	// ReasonStale. Default 5 min.
	MaxSourceAge time.Duration
	// Now reads the local wall clock. Default time.Now; tests inject a shifted
	// clock. Round trips and the Monitor's step check use the monotonic clock
	// regardless.
	Now func() time.Time
	// Dial opens the TCP connection. Default a net.Dialer's DialContext.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Sample is one good exchange with the agent.
type Sample struct {
	// At is the local wall-clock time (by Verifier.Now) at the midpoint of the
	// exchange, without a monotonic reading.
	At time.Time
	// Reference is the agent's reference time, ms precision.
	Reference time.Time
	// RTT is the exchange's round trip on the monotonic clock, dial excluded.
	RTT time.Duration
	// Offset is Reference − At: how far the local clock is behind the reference
	// (negative: ahead).
	Offset time.Duration
	// Uncertainty is the agent's stated uncertainty of Reference.
	Uncertainty time.Duration
	// SourceAge is the age of the agent's time-source sample.
	SourceAge time.Duration
	// Bound is the conservative error bound of the local clock,
	// RTT + Uncertainty + |Offset| (DESIGN §8).
	Bound time.Duration
	// Attempts is the number of exchanges the sample took: 1, or more after
	// I/O failures.
	Attempts int

	// mono is the monotonic reading at the midpoint, for the Monitor's step
	// check; slack bounds how far apart At and mono were read (readClocks).
	mono  time.Time
	slack time.Duration
}

func (v *Verifier) timeout() time.Duration {
	if v.Timeout > 0 {
		return v.Timeout
	}
	return DefaultTimeout
}

func (v *Verifier) maxSourceAge() time.Duration {
	if v.MaxSourceAge > 0 {
		return v.MaxSourceAge
	}
	return DefaultMaxSourceAge
}

// check validates the configuration.
func (v *Verifier) check() error {
	if v.Addr == "" {
		return errors.New("clockcheck: the Verifier has no agent address")
	}
	return checkSecret(v.Secret)
}

// Sample takes one sample of the agent within Timeout and ctx, over a new TCP
// connection per attempt. An attempt that fails with ReasonIO — a refused dial,
// a reset, a connection closed before the answer's LF — is retried after
// RetryPause while the deadline leaves time for it: an I/O failure says nothing
// about the clock. Every other failure is the verdict on the sample and is
// returned at once, never retried.
//
// Its error is always a *Failure: a dial, write or read error is ReasonIO (the
// last attempt's; ReasonTimeout for a deadline), a bad answer has the reason
// ParseResponse gives, an answer with synced = 0 is ReasonUnsynced, one whose
// SourceAge exceeds MaxSourceAge is ReasonStale, one whose reference time is
// past the year 2262 (out of time.Duration's range) is ReasonBound. An answer
// without a LF within MaxLine+1 bytes is ReasonSize; one cut short by the
// connection's end, ReasonIO. A misconfigured Verifier (no Addr, a short
// secret) fails with ReasonIO without dialling. Sample does not judge Bound:
// that is the Monitor's.
func (v *Verifier) Sample(ctx context.Context) (Sample, error) {
	if err := v.check(); err != nil {
		return Sample{}, &Failure{Reason: ReasonIO, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, v.timeout())
	defer cancel()
	pause := v.RetryPause
	if pause <= 0 {
		pause = DefaultRetryPause
	}
	deadline, _ := ctx.Deadline()
	for attempt := 1; ; attempt++ {
		s, f := v.exchange(ctx)
		if f == nil {
			s.Attempts = attempt
			return s, nil
		}
		if f.Reason != ReasonIO || ctx.Err() != nil || time.Until(deadline) < 2*pause {
			if attempt > 1 {
				f.Err = fmt.Errorf("%w (attempt %d)", f.Err, attempt)
			}
			return Sample{}, f
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Err = fmt.Errorf("%w (attempt %d)", f.Err, attempt)
			return Sample{}, f
		case <-t.C:
		}
	}
}

// exchange makes one exchange with the agent over a new TCP connection, within
// ctx.
func (v *Verifier) exchange(ctx context.Context) (Sample, *Failure) {
	dial := v.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(ctx, "tcp", v.Addr)
	if err != nil {
		return Sample{}, netFailure("dial "+v.Addr, err)
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	// A ctx cancelled by the caller (not by its deadline) must end the exchange too.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req := NewRequest()
	line := req.AppendLine(make([]byte, 0, 32))
	wallStart, start, slack := readClocks(v.Now)
	if _, err := conn.Write(line); err != nil {
		return Sample{}, netFailure("write to the agent", err)
	}
	resp, err := readLine(conn)
	rtt := time.Since(start)
	if err != nil {
		return Sample{}, asFailure(err)
	}
	r, err := ParseResponse(resp, v.Secret, req.Nonce)
	if err != nil {
		return Sample{}, asFailure(err)
	}
	if !r.Synced {
		return Sample{}, fail(ReasonUnsynced, "the agent at %s is not synchronised to its time source (synced=0)", v.Addr)
	}
	age := msDuration(r.SourceAgeMs)
	if age > v.maxSourceAge() {
		return Sample{}, fail(ReasonStale, "the agent's source sample is %s old, at most %s allowed", age, v.maxSourceAge())
	}
	if r.ReferenceUnixMs > uint64(maxUnixMs) {
		return Sample{}, fail(ReasonBound, "reference_unix_ms %d is beyond the year 2262: no bound holds", r.ReferenceUnixMs)
	}
	s := Sample{
		At:          wallStart.Add(rtt / 2).Round(0),
		Reference:   time.UnixMilli(int64(r.ReferenceUnixMs)),
		RTT:         rtt,
		Uncertainty: msDuration(r.UncertaintyMs),
		SourceAge:   age,
		mono:        start.Add(rtt / 2),
		slack:       slack,
	}
	s.Offset = s.Reference.Sub(s.At)
	s.Bound = satAdd(satAdd(s.RTT, s.Uncertainty), s.Offset.Abs())
	return s, nil
}

// asFailure returns err's *Failure, or err as a ReasonIO one.
func asFailure(err error) *Failure {
	var f *Failure
	if errors.As(err, &f) && f != nil {
		return f
	}
	return &Failure{Reason: ReasonIO, Err: err}
}

// readClocks reads the wall clock (now, or time.Now when nil) and the monotonic
// clock at the same instant, within slack: with an injected now the two readings
// are apart, and a preempted reader must not look like a stepped clock.
func readClocks(now func() time.Time) (wall, mono time.Time, slack time.Duration) {
	if now == nil {
		t := time.Now()
		return t.Round(0), t, 0
	}
	m0 := time.Now()
	w := now()
	d := time.Since(m0)
	return w.Round(0), m0.Add(d / 2), d / 2
}

// maxUnixMs keeps reference times where time.Duration arithmetic cannot
// overflow: the year 2262.
const maxUnixMs = int64(1<<63-1) / int64(time.Millisecond)

// readLine reads one line, without its LF, of at most MaxLine bytes. Bytes after
// the LF are ignored: one line per connection.
func readLine(r io.Reader) ([]byte, error) {
	buf := make([]byte, 0, MaxLine+1)
	var chunk [MaxLine + 1]byte
	for {
		n, err := r.Read(chunk[:MaxLine+1-len(buf)])
		buf = append(buf, chunk[:n]...)
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			return buf[:i], nil
		}
		if len(buf) > MaxLine {
			return nil, fail(ReasonSize, "no LF within %d bytes", MaxLine+1)
		}
		if err == io.EOF {
			return nil, fail(ReasonIO, "the connection ended after %d bytes without a LF", len(buf))
		}
		if err != nil {
			return nil, netFailure("read", err)
		}
	}
}

// msDuration converts ms to a Duration, saturating instead of overflowing.
func msDuration(ms uint64) time.Duration {
	if ms > uint64(maxUnixMs) {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(ms) * time.Millisecond
}

func satAdd(a, b time.Duration) time.Duration {
	if s := a + b; s >= a {
		return s
	}
	return time.Duration(1<<63 - 1)
}

func (s Sample) String() string {
	return fmt.Sprintf("offset %s, rtt %s, uncertainty %s, bound %s, source age %s", s.Offset, s.RTT, s.Uncertainty, s.Bound, s.SourceAge)
}
