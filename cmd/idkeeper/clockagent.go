package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/clockcheck"
	idkhttp "github.com/idkeeper/idkeeper/http"
)

// The clock-agent command (issue #13, DESIGN §8, docs/clock.md) serves TCKCLK 2:
// it answers each server replica's request with the time of its NTP servers, an
// honest uncertainty, a sync flag and the sample's age, under an HMAC with the
// shared secret. It never answers with its own unverified clock, and it listens
// only once it holds a first valid NTP sample: a listening agent is one that can
// vouch, so a replica that starts first gets a refused connection rather than an
// answer it must reject.

// clockAgentConfig is everything a clock agent is built from.
type clockAgentConfig struct {
	Listen       string   // host:port; ":0" picks a free port
	Secret       []byte   // at least clockcheck.MinSecretLen bytes
	NTPServers   []string // HOST or HOST:PORT, at least one
	PollInterval time.Duration
	MaxSampleAge time.Duration
	NTPTimeout   time.Duration
	Allow        []netip.Prefix // the sources served; empty: loopback only
	MaxConns     int
	MaxPerSource int
	ReadTimeout  time.Duration
	Timeout      time.Duration
	Logger       *slog.Logger
}

// allowFlag is a repeatable flag of CIDR prefixes or bare addresses; each value,
// and the environment's, may be a comma-separated list.
type allowFlag struct{ p *[]netip.Prefix }

func (f allowFlag) String() string {
	if f.p == nil {
		return ""
	}
	return prefixesFlag(f).String()
}

func (f allowFlag) Set(v string) error {
	ps, err := idkhttp.ParsePrefixes(v)
	if err != nil {
		return err
	}
	if len(ps) == 0 {
		return errors.New("empty list")
	}
	*f.p = append(*f.p, ps...)
	return nil
}

// loopbackHost reports whether a --listen host can be reached from this host
// only: a loopback address, or the name localhost.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// ntpServersFlag is a repeatable flag; from the environment (one Set) it takes a
// comma-separated list.
type ntpServersFlag struct{ v *[]string }

func (f ntpServersFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strings.Join(*f.v, ",")
}

func (f ntpServersFlag) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return errors.New("empty server name")
		}
		*f.v = append(*f.v, s)
	}
	return nil
}

// clockAgentFlags binds the clock-agent command's flags.
type clockAgentFlags struct {
	cfg        clockAgentConfig
	secretFile string
	log        logFlags
}

func (f *clockAgentFlags) register(fs *flag.FlagSet) {
	c := &f.cfg
	fs.StringVar(&c.Listen, "listen", "", "address to serve TCKCLK 2 on, HOST:PORT (required); reachable by the servers only")
	fs.StringVar(&f.secretFile, "secret-file", "", "file holding the shared TCKCLK secret, at least 32 bytes, trailing newline dropped, "+
		"mode 0600; the servers' --clock-secret-file holds the same (required)")
	fs.Var(ntpServersFlag{&c.NTPServers}, "ntp-server", "NTP server to take the time from, HOST or HOST:PORT; repeat it (or, in the environment, separate by commas); at least one")
	fs.DurationVar(&c.PollInterval, "poll-interval", clockcheck.DefaultPollInterval, "time between two queries of every NTP server; 1s..1h")
	fs.DurationVar(&c.MaxSampleAge, "max-sample-age", clockcheck.DefaultMaxAge, "answer synced=0 once the best NTP sample is older than this; more than --poll-interval, at most 1h")
	fs.DurationVar(&c.NTPTimeout, "ntp-timeout", clockcheck.DefaultNTPTimeout, "how long one NTP query may take; 100ms..1m")
	fs.Var(allowFlag{&c.Allow}, "allow", "source addresses served, CIDR or address: the replicas' network; repeat it or separate by commas; "+
		"anything else is closed at accept; without it, loopback only (127.0.0.0/8, ::1), and a --listen beyond loopback is refused")
	fs.IntVar(&c.MaxConns, "max-conns", clockcheck.DefaultMaxConns, "most connections served at once; one more is closed at once; 1..65536")
	fs.IntVar(&c.MaxPerSource, "max-conns-per-source", clockcheck.DefaultMaxConnsPerSource,
		"most connections served at once from one source address; one more is closed at once; 1..--max-conns")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", clockcheck.DefaultReadTimeout, "how long a connection may take to send its request line, from accept; 10ms..1m, and --timeout if shorter")
	fs.DurationVar(&c.Timeout, "timeout", clockcheck.DefaultTimeout, "how long one connection may take, from accept to the answer; 10ms..1m")
	f.log.register(fs)
}

// config checks the settings and reads the secret; warnings (a secret file
// others may read) are logged.
func (f *clockAgentFlags) config(stderr io.Writer) (clockAgentConfig, error) {
	c := f.cfg
	c.Logger = f.log.logger(stderr)
	between := func(setting string, v, lo, hi time.Duration) error {
		if v < lo || v > hi {
			return usageError{&idkeeper.RangeError{Setting: setting, Value: v.String(), Min: lo.String(), Max: hi.String()}}
		}
		return nil
	}
	switch {
	case c.Listen == "":
		return c, usagef("--listen HOST:PORT is required: where the servers reach this agent")
	case f.secretFile == "":
		return c, usagef("--secret-file is required: the file holding the shared TCKCLK secret (at least %d bytes)", clockcheck.MinSecretLen)
	case len(c.NTPServers) == 0:
		return c, usagef("--ntp-server is required (repeatable): the NTP servers this agent takes the time from")
	case c.MaxConns < 1 || c.MaxConns > 65536:
		return c, usageError{&idkeeper.RangeError{Setting: "max-conns", Value: strconv.Itoa(c.MaxConns), Min: "1", Max: "65536"}}
	case c.MaxPerSource < 1 || c.MaxPerSource > c.MaxConns:
		return c, usageError{&idkeeper.RangeError{Setting: "max-conns-per-source", Value: strconv.Itoa(c.MaxPerSource), Min: "1",
			Max: strconv.Itoa(c.MaxConns) + " (--max-conns)"}}
	}
	for _, err := range []error{
		between("poll-interval", c.PollInterval, time.Second, time.Hour),
		between("max-sample-age", c.MaxSampleAge, c.PollInterval+time.Nanosecond, time.Hour),
		between("ntp-timeout", c.NTPTimeout, 100*time.Millisecond, time.Minute),
		between("timeout", c.Timeout, 10*time.Millisecond, time.Minute),
		between("read-timeout", c.ReadTimeout, 10*time.Millisecond, time.Minute),
	} {
		if err != nil {
			return c, err
		}
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return c, usagef("--listen %q: want HOST:PORT: %v", c.Listen, err)
	}
	if len(c.Allow) == 0 && !loopbackHost(host) {
		return c, usagef("--listen %s reaches beyond loopback, and without --allow the agent serves loopback only: "+
			"give --allow CIDR (repeatable) with the replicas' network, or listen on a loopback address", c.Listen)
	}
	secret, warning, err := clockcheck.ReadSecretFile(f.secretFile)
	if err != nil {
		return c, usagef("--secret-file: %v", err)
	}
	if warning != "" {
		c.Logger.Warn(warning)
	}
	c.Secret = secret
	return c, nil
}

// runClockAgent is the clock-agent command: it serves until ctx ends (SIGTERM,
// SIGINT), then stops.
func runClockAgent(ctx context.Context, args []string, env lookupEnv, stderr io.Writer) error {
	fs := newFlagSet("clock-agent", stderr)
	var f clockAgentFlags
	f.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	cfg, err := f.config(stderr)
	if err != nil {
		return err
	}
	return serveClockAgent(ctx, cfg)
}

// serveClockAgent polls the NTP servers, waits for a first valid sample, then
// listens and serves until ctx ends. It returns nil when ctx ends, an error when
// it cannot listen or serve.
func serveClockAgent(ctx context.Context, cfg clockAgentConfig) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	src := &clockcheck.NTPSource{Servers: cfg.NTPServers, PollInterval: cfg.PollInterval, MaxAge: cfg.MaxSampleAge,
		Timeout: cfg.NTPTimeout, Logger: log}
	if err := src.Start(ctx); err != nil {
		return err
	}
	defer src.Close()
	log.Info("clock agent: waiting for a first valid NTP sample before listening", "ntpServers", strings.Join(cfg.NTPServers, ","))
	if err := src.Wait(ctx); err != nil {
		log.Info("clock agent stopped before its first NTP sample")
		return nil
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("clock agent: listen on %s: %w", cfg.Listen, err)
	}
	agent := &clockcheck.Agent{Secret: cfg.Secret, Source: src, Allow: cfg.Allow, MaxConns: cfg.MaxConns, MaxConnsPerSource: cfg.MaxPerSource,
		ReadTimeout: cfg.ReadTimeout, Timeout: cfg.Timeout, Logger: log}
	served := make(chan error, 1)
	go func() { served <- agent.Serve(ln) }()
	_, unc, _, _ := src.Now()
	allow := prefixesFlag{&cfg.Allow}.String()
	if allow == "" {
		allow = "loopback only"
	}
	log.Info("clock agent listening", "addr", ln.Addr().String(), "uncertainty", unc, "allow", allow, "maxConns", cfg.MaxConns,
		"maxConnsPerSource", cfg.MaxPerSource)
	select {
	case <-ctx.Done():
		_ = agent.Close()
		<-served
		st := agent.Stats()
		log.Info("clock agent stopped", "answered", st.Answered, "malformed", st.Malformed, "refused", st.Refused, "denied", st.Denied)
		return nil
	case err := <-served:
		_ = agent.Close()
		return fmt.Errorf("clock agent: serve: %w", err)
	}
}
