package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/apikey"
)

// keyNoticeLine is the start of the session's log line about its key's expiry.
const keyNoticeLine = "this session's API key expires soon"

// A session whose key is in its last 14 days logs the registry's Warning at Warn
// level, with the key ID and expiry, at most once a day of its clock; a key
// further from its expiry is not logged about. A real registry on the fake clock.
func TestSessionLogsKeyExpiry(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	ctx := context.Background()
	secret, k, err := apikey.NewAdmin(e.reg).Create(ctx, apikey.Spec{Description: "expiring", ExpiresAt: t0.Add(10 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	later, _, err := apikey.NewAdmin(e.reg).Create(ctx, apikey.Spec{Description: "later", ExpiresAt: t0.Add(30 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	count := func() int { return strings.Count(e.logs.String(), keyNoticeLine) }

	cfg := e.config()
	cfg.APIKey = later
	e.open(cfg)
	if n := count(); n != 0 {
		t.Fatalf("a key 30 days from its expiry: %d notices\n%s", n, e.logs)
	}

	cfg = e.config()
	cfg.APIKey = secret
	s := e.open(cfg) // Alloc and the first Renew: both answers carry the Warning
	if n := count(); n != 1 {
		t.Fatalf("after Open: %d notices, want 1\n%s", n, e.logs)
	}
	var line string
	for l := range strings.Lines(e.logs.String()) {
		if strings.Contains(l, keyNoticeLine) {
			line = l
		}
	}
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "keyId="+k.ID) ||
		!strings.Contains(line, "expiresAt="+k.ExpiresAt.Format("2006-01-02T15:04:05.000Z")) || strings.Contains(line, secret) {
		t.Fatalf("notice %q", line)
	}
	e.clk.Advance(halfWay - time.Minute) // nothing is sent: still one
	if n := count(); n != 1 {
		t.Fatalf("%d notices", n)
	}
	e.clk.Advance(time.Minute) // the renew at half the lease, a day after Open
	if n := count(); n != 2 {
		t.Fatalf("a day later: %d notices, want 2\n%s", n, e.logs)
	}
	s.Close() // Remove within the same day: no third
	if n := count(); n != 2 {
		t.Fatalf("after Close: %d notices, want 2", n)
	}
	e.expectNoFatal()
}
