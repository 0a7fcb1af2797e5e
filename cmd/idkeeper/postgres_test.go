package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
)

// Issue #32: durability is decided at start on PostgreSQL as on Redis. A server
// with fsync off (pgtest's default) is refused, naming PostgreSQL's settings and
// --accept-lost-writes (never Redis's advice, never the password); with the flag
// it starts and /readyz says what was accepted; with fsync on it starts plainly
// and /readyz says there is no standby.
func TestServer_PostgresDurabilityIsDecidedAtStart(t *testing.T) {
	for _, fsync := range []bool{false, true} {
		name := map[bool]string{false: "fsync off", true: "fsync on"}[fsync]
		t.Run(name, func(t *testing.T) {
			pg := pgtest.StartWith(t, pgtest.Options{Fsync: fsync})
			env := map[string]string{BootstrapKeyEnv: bootstrapKey, "IDKEEPER_STORE": pg.URL()}
			if code, _, stderr := runInProcess(t.Context(), []string{"init"}, env); code != exitOK {
				t.Fatalf("init: exit %d: %s", code, stderr)
			}
			// Not about the clock check: PostgreSQL is a shared store, which needs an agent or this flag.
			args := []string{"--state-file", filepath.Join(t.TempDir(), "state"), "--unsafe-no-clock-agent"}
			s, code := startInProcess(t, args, env)
			if fsync {
				if s.base == "" {
					t.Fatalf("refused to start (exit %d):\n%s", code, s.logs)
				}
				r := s.client(bootstrapKey).do("GET", "/readyz", "", 200)
				if d, _ := r["durability"].(string); !strings.HasPrefix(d, "PostgreSQL: fsync on, synchronous_commit on; no standby") {
					t.Fatalf("readyz %v", r)
				}
				s.stop()
				return
			}
			if s.base != "" || code != exitFail {
				t.Fatalf("started (exit %d) on a PostgreSQL that loses commits:\n%s", code, s.logs)
			}
			l := s.logs.String()
			for _, want := range []string{"fsync off", "fsync = on", "with --accept-lost-writes"} {
				if !strings.Contains(l, want) {
					t.Errorf("the refusal does not say %q:\n%s", want, l)
				}
			}
			if strings.Contains(l, "appendfsync") || strings.Contains(l, pg.Password()) || strings.Contains(l, "; accepted") {
				t.Fatalf("the refusal gives Redis's advice, holds the password, or logs an acceptance:\n%s", l)
			}
			s, _ = startInProcess(t, append(args, "--accept-lost-writes"), env)
			if s.base == "" {
				t.Fatalf("did not start with --accept-lost-writes:\n%s", s.logs)
			}
			r := s.client(bootstrapKey).do("GET", "/readyz", "", 200)
			if d, _ := r["durability"].(string); !strings.HasPrefix(d, "accepted lost writes on a crash of PostgreSQL") || !strings.Contains(d, "fsync off") {
				t.Fatalf("readyz does not show the accepted risk: %v", r)
			}
			s.stop()
		})
	}
}
