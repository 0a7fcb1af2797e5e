package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The probe command is the health check of a container whose image has no shell,
// curl or wget (the release image is distroless): Docker and Compose run
//
//	idkeeper probe http://127.0.0.1:8080/readyz   GET; healthy on a 2xx answer
//	idkeeper probe tcp://127.0.0.1:4123            connect; healthy when accepted
//	idkeeper probe --secret-file F tckclk://127.0.0.1:4123   a TCKCLK 2 exchange; healthy on synced=1
//
// It exits 0 when healthy and 1 otherwise, a bad command line included: Docker
// reserves exit status 2 of a health check.

const probeUsage = `Usage: idkeeper probe [--timeout 2s] [--insecure-skip-verify] [--secret-file FILE] URL

A health check for containers: GET an http:// or https:// URL and exit 0 on a 2xx
answer (a redirect is not followed and fails), or connect to a tcp://HOST:PORT and
exit 0 when the connection is accepted (the clock agent listens only once it can
vouch for the time), or make one TCKCLK 2 exchange with tckclk://HOST:PORT under
the secret in --secret-file and exit 0 on an authentic answer with synced=1 (a clock
agent that can vouch now). Any other outcome prints the reason on stderr and exits 1.

  idkeeper probe http://127.0.0.1:8080/readyz     a registry server, ready
  idkeeper probe http://127.0.0.1:8081/health     a gateway that can mint
  idkeeper probe tcp://127.0.0.1:4123             a clock agent, listening
  idkeeper probe --secret-file /run/idkeeper-clock/clock.secret tckclk://127.0.0.1:4123
                                                  a clock agent, synchronised (it must
                                                  --allow the probe's source, 127.0.0.1)

Flags (not read from the environment):
  --timeout DURATION        the whole probe, connect to last byte; 1ms..1m (default 2s)
  --insecure-skip-verify    for https://, accept any certificate (a probe of 127.0.0.1
                            against a certificate issued for the service's public name)
  --secret-file FILE        for tckclk://, the file holding the agent's TCKCLK secret (required
                            there, and for tckclk:// only)
`

// defaultProbeTimeout is the --timeout default.
const defaultProbeTimeout = 2 * time.Second

// probeBodyLimit is how much of a failed answer's body the probe prints.
const probeBodyLimit = 512

// runProbe is the probe command. Its errors are never usage errors, so that run
// exits 1 for every failure.
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	timeout := fs.Duration("timeout", defaultProbeTimeout, "")
	insecure := fs.Bool("insecure-skip-verify", false, "")
	secretFile := fs.String("secret-file", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, probeUsage)
			return errHelp
		}
		return fmt.Errorf("probe: %s (%s)", flagError(err), helpHint("probe"))
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("probe: want one URL (flags before it), got %q (%s)", fs.Args(), helpHint("probe"))
	}
	if *timeout < time.Millisecond || *timeout > time.Minute {
		return fmt.Errorf("probe: --timeout %s: want 1ms..1m", *timeout)
	}
	raw := fs.Arg(0)
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("probe: %q: want http://HOST:PORT/PATH, https://… or tcp://HOST:PORT", raw)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if *secretFile != "" && u.Scheme != "tckclk" {
		return fmt.Errorf("probe: --secret-file is for tckclk:// URLs only, not %q", raw)
	}
	switch u.Scheme {
	case "tckclk":
		return probeClock(ctx, raw, u, *secretFile, *timeout, stdout)
	case "tcp":
		if u.Port() == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("probe: %q: want tcp://HOST:PORT", raw)
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", u.Host)
		if err != nil {
			return fmt.Errorf("probe %s: %w", raw, err)
		}
		_ = c.Close()
		fmt.Fprintf(stdout, "%s: connected\n", raw)
		return nil
	case "http", "https":
		return probeHTTP(ctx, raw, *insecure, stdout)
	}
	return fmt.Errorf("probe: %q: want an http://, https://, tcp:// or tckclk:// URL", raw)
}

// probeHTTP GETs target and succeeds on a 2xx answer, read to its end.
func probeHTTP(ctx context.Context, target string, insecure bool, stdout io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	req.Header.Set("User-Agent", "idkeeper-probe")
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // a probe of the container itself never goes through a proxy
	tr.DisableKeepAlives = true
	if insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for: --insecure-skip-verify
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s: %w", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, probeBodyLimit))
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := strings.TrimSpace(string(body))
		if msg != "" {
			msg = ": " + msg
		}
		return fmt.Errorf("probe %s: %s%s", target, resp.Status, msg)
	}
	if err != nil {
		return fmt.Errorf("probe %s: %s, but reading the body: %w", target, resp.Status, err)
	}
	fmt.Fprintf(stdout, "%s: %s\n", target, resp.Status)
	return nil
}
