// Package clockchecktest runs a TCKCLK 2 clock agent on loopback, fed by a test
// NTP server of its own, for the tests of servers that check their clocks (the
// chaos suite, cmd/idkeeper). Moving the NTP server's offset moves the agent's
// reference time away from this machine's clock.
package clockchecktest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/idkeeper/idkeeper/clockcheck"
	"github.com/idkeeper/idkeeper/internal/harness/ntptest"
)

// Agent is a running agent and the NTP server it follows.
type Agent struct {
	Addr string          // the agent's host:port
	NTP  *ntptest.Server // SetOffset moves the agent's reference
	src  *clockcheck.NTPSource
	ag   *clockcheck.Agent
}

// Start starts an agent with secret on 127.0.0.1 once its NTP source, polled
// every 100 ms, has a sample; within 10 s, or an error.
func Start(secret []byte) (*Agent, error) {
	ntp, err := ntptest.Start()
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	a := &Agent{NTP: ntp, src: &clockcheck.NTPSource{Servers: []string{ntp.Addr()}, PollInterval: 100 * time.Millisecond, Logger: quiet}}
	if err := a.src.Start(context.Background()); err != nil {
		a.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.src.Wait(ctx); err != nil {
		a.Close()
		return nil, fmt.Errorf("clockchecktest: the test NTP server gave the agent no sample: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.Close()
		return nil, err
	}
	a.Addr = ln.Addr().String()
	a.ag = &clockcheck.Agent{Secret: secret, Source: a.src, Logger: quiet}
	go func() { _ = a.ag.Serve(ln) }()
	return a, nil
}

// Close stops the agent, its source and the NTP server.
func (a *Agent) Close() {
	if a.ag != nil {
		_ = a.ag.Close()
	}
	_ = a.src.Close()
	a.NTP.Close()
}
