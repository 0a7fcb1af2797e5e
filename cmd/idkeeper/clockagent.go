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
// it answers each server replica's request with the time of its source, an
// honest uncertainty, a sync flag and the sample's age, under an HMAC with the
// shared secret. Its source is NTP servers (--source ntp, the default) or the
// host kernel's clock discipline by chrony, ntpd or timesyncd (--source kernel,
// issue #30). It never answers with its own unverified clock, and it listens
// only once its source vouches a first time: a listening agent is one that can
// vouch, so a replica that starts first gets a refused connection rather than an
// answer it must reject.

// The clock sources of --source.
const (
	sourceNTP    = "ntp"
	sourceKernel = "kernel"
)

// clockAgentConfig is everything a clock agent is built from.
type clockAgentConfig struct {
	Listen       string   // host:port; ":0" picks a free port
	Secret       []byte   // at least clockcheck.MinSecretLen bytes
	Source       string   // sourceNTP or sourceKernel
	NTPServers   []string // HOST or HOST:PORT, at least one for sourceNTP, none for sourceKernel
	PollInterval time.Duration
	MaxSampleAge time.Duration
	NTPTimeout   time.Duration
	Allow        []netip.Prefix // the sources served; empty: loopback only
	MaxConns     int
	MaxPerSource int
	ReadTimeout  time.Duration
	Timeout      time.Duration
	Logger       *slog.Logger

	// readKernel reads the kernel's NTP state for sourceKernel; nil:
	// clockcheck.ReadKernelClock. Tests inject readings.
	readKernel func() (clockcheck.KernelReading, error)
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

// clockAgentFlags binds the clock-agent command's flags.
type clockAgentFlags struct {
	cfg        clockAgentConfig
	secretFile string
	log        logFlags
	// ntpFromEnv: --ntp-server came from IDKEEPER_NTP_SERVER, not the command
	// line (with --source kernel it is then ignored with a warning, not refused).
	ntpFromEnv bool
}

func (f *clockAgentFlags) register(fs *flag.FlagSet) {
	c := &f.cfg
	fs.StringVar(&c.Listen, "listen", "", "address to serve TCKCLK 2 on, HOST:PORT (required); reachable by the servers only")
	fs.StringVar(&f.secretFile, "secret-file", "", "file holding the shared TCKCLK secret, at least 32 bytes, trailing newline dropped, "+
		"mode 0600; the servers' --clock-secret-file holds the same (required)")
	c.Source = sourceNTP
	fs.Var(choiceFlag{&c.Source, []string{sourceNTP, sourceKernel}}, "source", "where the time comes from: ntp (the --ntp-server servers) or "+
		"kernel (this host's kernel clock, as chrony, ntpd or systemd-timesyncd discipline it: answered synced=0 while the kernel says "+
		"TIME_ERROR or STA_UNSYNC, or its maximum error is over 16s)")
	fs.Var(listFlag{v: &c.NTPServers, what: "server name"}, "ntp-server", "NTP server to take the time from, HOST or HOST:PORT; repeat it (or, in the environment, separate by commas); "+
		"at least one with --source ntp, none on the command line with --source kernel (the environment's is then ignored)")
	fs.DurationVar(&c.PollInterval, "poll-interval", clockcheck.DefaultPollInterval, "time between two queries of every NTP server, or two readings of the kernel's "+
		"clock state (--source kernel); after a round that does not vouch, min(this, 4s); 1s..1h")
	fs.DurationVar(&c.MaxSampleAge, "max-sample-age", clockcheck.DefaultMaxAge, "answer synced=0 once the best NTP sample (or the last kernel reading) is older than this; "+
		"more than --poll-interval, at most 1h")
	fs.DurationVar(&c.NTPTimeout, "ntp-timeout", clockcheck.DefaultNTPTimeout, "how long one NTP query may take (--source ntp); 100ms..1m")
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
	case c.Source == sourceNTP && len(c.NTPServers) == 0:
		return c, usagef("--ntp-server is required (repeatable) with --source ntp: the NTP servers this agent takes the time from")
	case c.Source == sourceKernel && len(c.NTPServers) > 0 && !f.ntpFromEnv:
		return c, usagef("--ntp-server is for --source ntp: with --source kernel the kernel's discipline daemon (chrony, ntpd, timesyncd) " +
			"queries the NTP servers; drop --ntp-server, or use --source ntp")
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
	if c.Source == sourceKernel && len(c.NTPServers) > 0 {
		c.Logger.Warn("clock agent: --source kernel ignores IDKEEPER_NTP_SERVER", "ntpServers", strings.Join(c.NTPServers, ","))
		c.NTPServers = nil
	}
	return c, nil
}

// runClockAgent is the clock-agent command: it serves until ctx ends (SIGTERM,
// SIGINT), then stops.
func runClockAgent(ctx context.Context, args []string, env lookupEnv, stderr io.Writer) error {
	cfg, err := clockAgentSettings(args, env, stderr)
	if err != nil {
		return err
	}
	return serveClockAgent(ctx, cfg)
}

// clockAgentSettings parses the clock-agent command's flags and environment
// and checks them (clockAgentFlags.config).
func clockAgentSettings(args []string, env lookupEnv, stderr io.Writer) (clockAgentConfig, error) {
	fs := newFlagSet("clock-agent", stderr)
	var f clockAgentFlags
	f.register(fs)
	ntpEnv := envName("ntp-server")
	// parseFlags looks a flag up in the environment only when the command line
	// did not give it: a hit here means the servers came from there.
	watched := func(name string) (string, bool) {
		v, ok := env(name)
		if ok && name == ntpEnv {
			f.ntpFromEnv = true
		}
		return v, ok
	}
	if err := parseFlags(fs, args, watched); err != nil {
		return clockAgentConfig{}, err
	}
	return f.config(stderr)
}

// agentSource is a clock source the agent runs: clockcheck.NTPSource or
// clockcheck.KernelSource.
type agentSource interface {
	clockcheck.TimeSource
	Start(context.Context) error
	Wait(context.Context) error
	Close() error
}

// serveClockAgent starts the source (polls the NTP servers or reads the
// kernel), waits until it vouches a first time, then listens and serves until
// ctx ends. It returns nil when ctx ends, an error when it cannot listen or
// serve.
func serveClockAgent(ctx context.Context, cfg clockAgentConfig) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	var src agentSource = &clockcheck.NTPSource{Servers: cfg.NTPServers, PollInterval: cfg.PollInterval, MaxAge: cfg.MaxSampleAge,
		Timeout: cfg.NTPTimeout, Logger: log}
	if cfg.Source == sourceKernel {
		src = &clockcheck.KernelSource{Read: cfg.readKernel, PollInterval: cfg.PollInterval, MaxAge: cfg.MaxSampleAge, Logger: log}
	}
	if err := src.Start(ctx); err != nil {
		return err
	}
	defer src.Close()
	if cfg.Source == sourceKernel {
		log.Info("clock agent: waiting for the kernel clock to be synced before listening", "source", sourceKernel)
	} else {
		log.Info("clock agent: waiting for a first valid NTP sample before listening", "source", sourceNTP, "ntpServers", strings.Join(cfg.NTPServers, ","))
	}
	if err := src.Wait(ctx); err != nil {
		log.Info("clock agent stopped before its source vouched a first time", "source", cfg.Source)
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
	log.Info("clock agent listening", "addr", ln.Addr().String(), "source", cfg.Source, "uncertainty", unc, "allow", allow, "maxConns", cfg.MaxConns,
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
