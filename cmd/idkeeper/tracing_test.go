package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// An OTEL_* setting the server cannot honour stops it before it serves; tracing
// off (no OTEL_* variable) is the default and logs nothing about it.
func TestServerTracingSettings(t *testing.T) {
	store := "bolt:" + filepath.Join(t.TempDir(), "idk.db")
	initInProcess(t, store)
	code, _, stderr := runInProcess(context.Background(), []string{"server", "--listen", "127.0.0.1:0", "--store", store},
		map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"})
	if code != exitUsage || !strings.Contains(stderr, `OTEL_TRACES_EXPORTER="zipkin": this build exports over otlp only`) {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	s, code := startInProcess(t, []string{"--store", store}, bootstrapEnv)
	if s == nil || s.base == "" {
		t.Fatalf("server exited %d", code)
	}
	if c := s.stop(); c != exitOK || strings.Contains(s.logs.String(), "OpenTelemetry tracing on") {
		t.Fatalf("exit %d; tracing on without OTEL_* settings:\n%s", c, s.logs.String())
	}
}
