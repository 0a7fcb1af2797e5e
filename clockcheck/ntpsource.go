package clockcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/beevik/ntp"
)

// Defaults of NTPSource.
const (
	DefaultPollInterval = 64 * time.Second
	DefaultMaxAge       = 5 * time.Minute
	DefaultNTPTimeout   = 5 * time.Second
	DefaultDriftPPM     = 15
)

// NTPSource is a TimeSource fed by NTP servers, queried with
// github.com/beevik/ntp. Every PollInterval it queries every server and keeps
// the best valid sample: the one whose uncertainty is lowest now, the sample it
// already held included. A response is valid when ntp.Response.Validate accepts
// it: stratum 1..15, no kiss-of-death, leap indicator not "alarm" (unsynchronised),
// root distance under 16 s, a fresh reference time.
//
// Now reports
//
//	ref         = the sample's server time at reception + monotonic time elapsed since
//	uncertainty = RootDelay/2 + RootDispersion + RTT/2 (the root distance)
//	              + DriftPPM × age (the local oscillator's drift since the sample)
//	synced      = a valid sample is held and age ≤ MaxAge
//	age         = monotonic time elapsed since the sample
//
// so the agent host's wall clock is never used after a sample is taken: steps of
// it change nothing. Zero-value fields take their defaults; Servers is required.
// Set the fields before Start.
type NTPSource struct {
	// Servers are NTP servers, HOST or HOST:PORT (port 123 by default).
	Servers []string
	// PollInterval is the time between two rounds of queries. Default 64 s. A
	// round that yields no valid sample is retried after min(PollInterval, 4 s).
	PollInterval time.Duration
	// MaxAge is the oldest sample that still counts as synced. Default 5 min.
	MaxAge time.Duration
	// Timeout bounds one NTP query. Default 5 s.
	Timeout time.Duration
	// DriftPPM is the assumed worst drift of the local oscillator, in parts per
	// million. Default 15.
	DriftPPM int
	// Logger receives a warning per failed query and per disagreement between
	// servers, an info line when the source becomes synced or loses it.
	// Default slog.Default().
	Logger *slog.Logger

	mu     sync.Mutex
	best   *ntpSample
	synced bool // as last logged
	run    poller
}

// ntpSample is one valid NTP answer, anchored on the monotonic clock.
type ntpSample struct {
	server string
	ref    time.Time     // the server's time at mono
	mono   time.Time     // local reading right after the answer, with its monotonic part
	dist   time.Duration // root distance: RootDelay/2 + RootDispersion + RTT/2
}

func (s *NTPSource) driftPPM() int {
	if s.DriftPPM > 0 {
		return s.DriftPPM
	}
	return DefaultDriftPPM
}

func (s *NTPSource) maxAge() time.Duration {
	if s.MaxAge > 0 {
		return s.MaxAge
	}
	return DefaultMaxAge
}

// uncertainty of sample x at monotonic time now.
func (s *NTPSource) uncertainty(x *ntpSample, now time.Time) time.Duration {
	age := max(now.Sub(x.mono), 0)
	return x.dist + age/time.Duration(1_000_000/s.driftPPM())
}

// Now implements TimeSource.
func (s *NTPSource) Now() (ref time.Time, uncertainty time.Duration, synced bool, age time.Duration) {
	now := time.Now()
	s.mu.Lock()
	best := s.best
	s.mu.Unlock()
	if best == nil {
		return time.Time{}, 0, false, 0
	}
	age = max(now.Sub(best.mono), 0)
	return best.ref.Add(age), s.uncertainty(best, now), age <= s.maxAge(), age
}

// Start checks the configuration and starts polling on a goroutine, the first
// round at once. It does not wait for a sample: see Wait. Errors: no servers,
// or Start called twice.
func (s *NTPSource) Start(ctx context.Context) error {
	if len(s.Servers) == 0 {
		return errors.New("clockcheck: NTPSource has no servers")
	}
	return s.run.start(ctx, "NTPSource", s.PollInterval, s.Poll, s.logSync)
}

// Wait blocks until the source has been synced once (it is, or was since, after
// a valid sample) and returns nil, or until ctx ends and returns ctx's error.
func (s *NTPSource) Wait(ctx context.Context) error { return s.run.wait(ctx) }

// Close stops polling and waits for the goroutine. The last sample stays, aging.
func (s *NTPSource) Close() error {
	s.run.stop()
	return nil
}

// Poll queries every server once, concurrently, and keeps the best valid sample.
// It returns an error when no server gave a valid sample in this round (the
// sample held before, if any, is kept and ages).
func (s *NTPSource) Poll(ctx context.Context) error {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultNTPTimeout
	}
	samples := make([]*ntpSample, len(s.Servers))
	errs := make([]error, len(s.Servers))
	var wg sync.WaitGroup
	for i, srv := range s.Servers {
		wg.Go(func() { samples[i], errs[i] = query(srv, timeout) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	now := time.Now()
	var fresh []*ntpSample
	for i, x := range samples {
		if errs[i] != nil {
			s.logger().Warn("NTP query failed", "server", s.Servers[i], "err", errs[i])
			continue
		}
		fresh = append(fresh, x)
	}
	s.warnDisagreement(fresh, now)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range fresh {
		if s.best == nil || s.uncertainty(x, now) < s.uncertainty(s.best, now) {
			s.best = x
		}
	}
	if len(fresh) == 0 {
		return fmt.Errorf("no valid NTP sample from %d servers: %w", len(s.Servers), errors.Join(errs...))
	}
	return nil
}

// query asks one server and returns a valid sample.
func query(server string, timeout time.Duration) (*ntpSample, error) {
	r, err := ntp.QueryWithOptions(server, ntp.QueryOptions{Timeout: timeout, GetSystemTime: time.Now})
	// Read the clock at once: the offset below holds for this instant.
	mono := time.Now()
	if err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("invalid answer (stratum %d, leap %d): %w", r.Stratum, r.Leap, err)
	}
	return &ntpSample{
		server: server,
		ref:    mono.Round(0).Add(r.ClockOffset),
		mono:   mono,
		dist:   r.RootDistance,
	}, nil
}

// warnDisagreement logs servers whose intervals [ref ± uncertainty] do not
// overlap: one of them is a falseticker. The best sample is still used.
func (s *NTPSource) warnDisagreement(xs []*ntpSample, now time.Time) {
	for i, a := range xs {
		for _, b := range xs[i+1:] {
			ra, rb := a.ref.Add(now.Sub(a.mono)), b.ref.Add(now.Sub(b.mono))
			if gap := ra.Sub(rb).Abs(); gap > s.uncertainty(a, now)+s.uncertainty(b, now) {
				s.logger().Warn("NTP servers disagree beyond their uncertainties", "a", a.server, "b", b.server, "difference", gap)
			}
		}
	}
}

// logSync logs changes of the synced state and wakes Wait.
func (s *NTPSource) logSync() {
	_, unc, synced, age := s.Now()
	s.mu.Lock()
	changed := synced != s.synced
	s.synced = synced
	server := ""
	if s.best != nil {
		server = s.best.server
	}
	s.mu.Unlock()
	if synced {
		s.run.synced()
	}
	switch {
	case changed && synced:
		s.logger().Info("NTP source synced", "server", server, "uncertainty", unc)
	case changed:
		s.logger().Warn("NTP source not synced: no valid sample fresh enough", "age", age, "maxAge", s.maxAge())
	}
}

func (s *NTPSource) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}
