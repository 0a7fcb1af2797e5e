package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/idkeeper/idkeeper/clockcheck"
)

// probeClock is `idkeeper probe tckclk://HOST:PORT`: one TCKCLK 2 sample of the
// clock agent (clockcheck.Verifier, retrying I/O failures within timeout) under
// the secret read from secretFile. It succeeds only on an authentic answer (MAC
// and nonce) with synced=1 and a source sample at most
// clockcheck.DefaultMaxSourceAge old: a listening agent that answers synced=0 is
// not healthy (brief 001: a connect is no readiness). It does not judge the
// offset: the registries do, against their own clocks.
func probeClock(ctx context.Context, raw string, u *url.URL, secretFile string, timeout time.Duration, stdout io.Writer) error {
	if u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("probe: %q: want tckclk://HOST:PORT", raw)
	}
	if secretFile == "" {
		return fmt.Errorf("probe %s: --secret-file is required: the file holding the agent's TCKCLK secret", raw)
	}
	// A warning of a file others may read is the agent's to give; the probe reads
	// the agent's own file.
	secret, _, err := clockcheck.ReadSecretFile(secretFile)
	if err != nil {
		return fmt.Errorf("probe %s: --secret-file: %w", raw, err)
	}
	v := &clockcheck.Verifier{Addr: u.Host, Secret: secret, Timeout: timeout}
	s, err := v.Sample(ctx)
	if err != nil {
		return fmt.Errorf("probe %s: %w", raw, err)
	}
	fmt.Fprintf(stdout, "%s: synced, offset %s, uncertainty %s, source sample %s old, round trip %s\n",
		raw, s.Offset, s.Uncertainty, s.SourceAge, s.RTT.Round(time.Microsecond))
	return nil
}
