package main

import (
	"flag"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/clockcheck"
	"github.com/idkeeper/idkeeper/server"
)

// The server's cluster clock check (issue #13, DESIGN §8, docs/clock.md): with
// --clock-agent the server proves its clock and the store's against a TCKCLK 2
// clock agent before it listens and every --clock-check-interval after; the
// first failure fails it closed for good: it grants nothing, hands back its job
// locks and exits with exitClockUnverified, for its supervisor to start a fresh
// process (issue #29). On a shared store (Redis, etcd, PostgreSQL) the agent is required
// unless --unsafe-no-clock-agent says otherwise.

// ClockSecretEnv names the environment variable that may hold the clock agent's
// secret instead of --clock-secret-file (ClockSecretEnv_FILE: a file holding it).
const ClockSecretEnv = "IDKEEPER_CLOCK_SECRET"

// DefaultClockDelta is the --clock-delta default: any two verified replicas'
// clocks differ by at most 1 s, each within 500 ms of the agent's reference.
const DefaultClockDelta = time.Second

// clockFlags are the server's clock check flags.
type clockFlags struct {
	agent, secretFile string
	delta, interval   time.Duration
	unsafeNoAgent     bool
}

func (f *clockFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.agent, "clock-agent", "", "HOST:PORT of the TCKCLK 2 clock agent (`idkeeper clock-agent`) that vouches for this server's clock and the store's; "+
		"required on a shared store (Redis, etcd, PostgreSQL) unless --unsafe-no-clock-agent")
	fs.StringVar(&f.secretFile, "clock-secret-file", "", "file holding the clock agent's secret (at least 32 bytes, apart from every other credential); "+
		ClockSecretEnv+" may hold the secret itself instead")
	fs.DurationVar(&f.delta, "clock-delta", DefaultClockDelta, "Δ: the most two replicas' clocks may differ; every error bound must stay within Δ/2, "+
		"and cleanup waits Δ past expiry + grace; 2ms..60s")
	fs.DurationVar(&f.interval, "clock-check-interval", clockcheck.DefaultInterval, "time between two samples of the clock agent; 100ms..1m")
	fs.BoolVar(&f.unsafeNoAgent, "unsafe-no-clock-agent", false, "serve a shared store (Redis, etcd, PostgreSQL) without a clock agent: nothing bounds how far "+
		"the replicas' clocks drift apart, and a replica whose clock runs late reclaims leases early (duplicate IDs); logged, and shown in /readyz and the admin")
}

// config checks the flags against the store: a shared store needs an agent or
// the explicit --unsafe-no-clock-agent.
func (f *clockFlags) config(env lookupEnv, store string) (server.ClockConfig, error) {
	// Every store but a replica's own bolt file may be shared by replicas (Redis,
	// etcd, PostgreSQL: server.SharedStore); on etcd each
	// replica's clock is the time authority, so only the agent bounds them.
	shared, err := server.SharedStore(store)
	if err != nil {
		return server.ClockConfig{}, err
	}
	switch {
	case f.agent != "" && f.unsafeNoAgent:
		return server.ClockConfig{}, usagef("--clock-agent and --unsafe-no-clock-agent contradict each other: give one")
	case f.agent == "" && f.secretFile != "":
		return server.ClockConfig{}, usagef("--clock-secret-file needs --clock-agent: the agent it is the secret of")
	case f.agent == "" && shared && !f.unsafeNoAgent:
		return server.ClockConfig{}, usagef("the store %s is shared by replicas: give --clock-agent HOST:PORT and --clock-secret-file "+
			"(or %s), so that every replica proves its clock (DESIGN §8, docs/clock.md); or, knowingly, --unsafe-no-clock-agent",
			server.RedactURL(store), ClockSecretEnv)
	case f.agent == "":
		return server.ClockConfig{Unsafe: shared}, nil
	}
	if err := clockcheck.CheckDelta(f.delta); err != nil {
		return server.ClockConfig{}, usageError{&idkeeper.RangeError{Setting: "clock-delta", Value: f.delta.String(),
			Min: clockcheck.MinDelta.String(), Max: clockcheck.MaxDelta.String()}}
	}
	if f.interval < 100*time.Millisecond || f.interval > time.Minute {
		return server.ClockConfig{}, usageError{&idkeeper.RangeError{Setting: "clock-check-interval", Value: f.interval.String(),
			Min: "100ms", Max: "1m0s"}}
	}
	secret, warning, err := clockSecret(env, f.secretFile)
	if err != nil {
		return server.ClockConfig{}, err
	}
	return server.ClockConfig{Agent: f.agent, Secret: secret, Delta: f.delta, Interval: f.interval, Warning: warning}, nil
}

// clockSecret reads the agent's secret from ClockSecretEnv or from file (the
// --clock-secret-file flag, which ClockSecretEnv_FILE sets as every flag's
// environment variable does); at least clockcheck.MinSecretLen bytes. warning
// says the file is readable by others.
func clockSecret(env lookupEnv, file string) (secret []byte, warning string, err error) {
	s, _ := env(ClockSecretEnv)
	switch {
	case s != "" && file != "":
		return nil, "", usagef("%s and --clock-secret-file both give the clock agent's secret: give one", ClockSecretEnv)
	case s == "" && file == "":
		return nil, "", usagef("--clock-agent needs its secret: --clock-secret-file FILE or %s", ClockSecretEnv)
	case file != "":
		b, warning, err := clockcheck.ReadSecretFile(file)
		if err != nil {
			return nil, "", usagef("--clock-secret-file: %v", err)
		}
		return b, warning, nil
	}
	if len(s) < clockcheck.MinSecretLen {
		return nil, "", usagef("%s must hold at least %d bytes", ClockSecretEnv, clockcheck.MinSecretLen)
	}
	return []byte(s), "", nil
}
