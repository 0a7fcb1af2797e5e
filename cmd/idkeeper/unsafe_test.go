package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestUnsafeShortLeasesIsHiddenAndGated(t *testing.T) {
	code, _, stderr := runInProcess(context.Background(), []string{"server", "-h"}, nil)
	// --unsafe-no-clock-agent is an operator's choice and listed; the test-only flag is not.
	if code != exitOK || !strings.Contains(stderr, "--lease-duration") || strings.Contains(stderr, "unsafe-short-leases") ||
		!strings.Contains(stderr, "--unsafe-no-clock-agent") {
		t.Fatalf("server -h: exit %d, usage lists the unsafe flag or misses the others:\n%s", code, stderr)
	}
	if code, _, stderr := runInProcess(context.Background(), []string{"server", "--first-lease", "2s", "--lease-duration", "3s"}, nil); code != exitUsage ||
		!strings.Contains(stderr, "first-lease = 2s is outside its range 1m0s..20m0s") {
		t.Fatalf("short leases without the flag: exit %d, %q", code, stderr)
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"--unsafe-short-leases", "--first-lease", "2s", "--lease-duration", "3s"}, nil},
		{[]string{"--first-lease", "2s", "--lease-duration", "3s"}, map[string]string{"IDKEEPER_UNSAFE_SHORT_LEASES": "true"}},
	} {
		fs := newFlagSet("server", io.Discard)
		var f serverFlags
		f.register(fs)
		env := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		if err := parseFlags(fs, c.args, env); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.config(env, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Registry.Validate(); err != nil {
			t.Fatalf("%v %v: short leases refused: %v", c.args, c.env, err)
		}
	}
}
