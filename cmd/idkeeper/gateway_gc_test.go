package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
)

// gcPercentNow reads the garbage collector's target without changing it.
func gcPercentNow() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// The gateway (and dev) set the collector's target to --gc-percent (issue #18:
// single-ID requests), unless GOGC is set, which wins, or the flag is 0.
func TestApplyGCPercent(t *testing.T) {
	defer debug.SetGCPercent(gcPercentNow())
	log := slog.New(slog.DiscardHandler)
	envOf := func(m map[string]string) lookupEnv {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	debug.SetGCPercent(100)
	if got := applyGCPercent(envOf(nil), DefaultGCPercent, log); got != DefaultGCPercent || gcPercentNow() != DefaultGCPercent {
		t.Fatalf("applied %d, in force %d; want %d", got, gcPercentNow(), DefaultGCPercent)
	}
	debug.SetGCPercent(123)
	if got := applyGCPercent(envOf(map[string]string{"GOGC": "50"}), DefaultGCPercent, log); got != 0 || gcPercentNow() != 123 {
		t.Fatalf("with GOGC set: applied %d, in force %d; want nothing applied", got, gcPercentNow())
	}
	if got := applyGCPercent(envOf(nil), 0, log); got != 0 || gcPercentNow() != 123 {
		t.Fatalf("--gc-percent 0: applied %d, in force %d; want nothing applied", got, gcPercentNow())
	}
}

func TestGatewayGCPercentUsage(t *testing.T) {
	env := map[string]string{"IDKEEPER_API_KEY": bootstrapKey}
	for _, v := range []string{"5", "-1", "10001"} {
		code, _, stderr := runInProcess(context.Background(), []string{"gateway", "--listen", "127.0.0.1:0",
			"--server", "http://127.0.0.1:1", "--gc-percent", v}, env)
		if code != 2 || !strings.Contains(stderr, "gc-percent") {
			t.Errorf("--gc-percent %s: exit %d, %q; want 2 naming the flag", v, code, stderr)
		}
	}
}
