package harness

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/conformance/internal/leasejson"
)

// TestProxyFaults puts each fault action of the proxy in front of a backend that
// answers one fixed Renew and checks what a client gets.
func TestProxyFaults(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"layout":{"epoch":"2026-01-01T00:00:00.000Z","timestampBits":41,"nodeBits":12,"sequenceBits":10},`+
			`"leases":[{"nodeId":1,"notBefore":"2026-12-01T09:00:00.000Z","expiresAt":"2026-12-01T10:00:06.000Z","fencingToken":9007199254740991},`+
			`{"nodeId":2,"notBefore":"2026-12-01T09:00:00.000Z","expiresAt":"2026-12-01T10:00:08.000Z","fencingToken":3}],`+
			`"serverUtcNow":"2026-12-01T10:00:00.000Z"}`)
	}))
	defer backend.Close()
	p, err := StartProxy(backend.URL, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	post := func(path string) (int, map[string]any, error) {
		resp, err := http.Post(p.URL+path, "application/json", strings.NewReader(`{"requester":{"machineId":"m"}}`))
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var m map[string]any
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &m)
		return resp.StatusCode, m, nil
	}
	cases := []struct {
		action  string
		status  int
		leases  int
		now     time.Time
		connErr bool
	}{
		{action: "pass", status: 200, leases: 2, now: now.Add(2 * time.Second)},
		{action: "empty", status: 200, leases: 0, now: now.Add(2 * time.Second)},
		{action: "drop-lease", status: 200, leases: 1, now: now.Add(2 * time.Second)},
		{action: "expired", status: 200, leases: 2, now: now.Add(7 * time.Second)},
		{action: "delay-response:50", status: 200, leases: 2, now: now.Add(2 * time.Second)},
		{action: "status:503", status: 503},
		{action: "malformed", status: 200},
		{action: "reset", connErr: true},
		{action: "drop", connErr: true},
	}
	for _, c := range cases {
		p.Fault("renew", []string{c.action}, false)
		status, m, err := post("/v1/leases/renew")
		if c.connErr {
			if err == nil {
				t.Errorf("%s: answered %d, want a broken connection", c.action, status)
			}
			continue
		}
		if err != nil || status != c.status {
			t.Errorf("%s: status %d, err %v; want %d", c.action, status, err, c.status)
			continue
		}
		if c.now.IsZero() {
			continue
		}
		ls, _ := m["leases"].([]any)
		got, _ := leasejson.Time(m["serverUtcNow"])
		if len(ls) != c.leases || !got.Equal(c.now) {
			t.Errorf("%s: %d leases, serverUtcNow %v; want %d, %v", c.action, len(ls), got, c.leases, c.now)
		}
		if len(ls) > 0 {
			if tok := ls[0].(map[string]any)["fencingToken"]; tok != float64(9007199254740991) {
				t.Errorf("%s: fencing token %v, not kept exactly", c.action, tok)
			}
		}
	}
	p.Fault("alloc", []string{"bad-layout"}, false)
	if _, m, err := post("/v1/leases"); err != nil || m["layout"].(map[string]any)["sequenceBits"] != float64(11) {
		t.Errorf("bad-layout: %v %v", m, err)
	}
	p.SetBackend("")
	if _, _, err := post("/v1/leases/renew"); err == nil {
		t.Error("the registry is down, yet the proxy answered")
	}
	// A hung-up exchange is logged just after the connection goes.
	log, changed := p.Log()
	for len(log) < len(cases)+2 {
		select {
		case <-changed:
		case <-time.After(2 * time.Second):
			t.Fatalf("%d exchanges logged, want %d", len(log), len(cases)+2)
		}
		log, changed = p.Log()
	}
	if len(log) != len(cases)+2 || log[1].Granted() || !log[0].Granted() || log[0].LeaseTime() != 4*time.Second {
		t.Errorf("log: %d exchanges, first granted %v for %v, second granted %v", len(log), log[0].Granted(), log[0].LeaseTime(), log[1].Granted())
	}
}

// TestLoadRefuses checks that a scenario file with a mistake is refused, not run.
func TestLoadRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"no-break":      `{"name":"no-break","rule":"r","registry":{"firstLease":"6s","lease":"6s"},"steps":[]}`,
		"odd-break":     `{"name":"odd-break","rule":"r","break":"nope","registry":{"firstLease":"6s","lease":"6s"},"steps":[]}`,
		"bad-step":      `{"name":"bad-step","rule":"r","break":"no-backoff","registry":{"firstLease":"6s","lease":"6s"},"steps":[{"do":"fly"}]}`,
		"bad-check":     `{"name":"bad-check","rule":"r","break":"no-backoff","registry":{"firstLease":"6s","lease":"6s"},"steps":[{"do":"check","check":"x"}]}`,
		"unknown-field": `{"name":"unknown-field","rule":"r","break":"no-backoff","registry":{"firstLease":"6s","lease":"6s"},"steps":[],"x":1}`,
		"other-name":    `{"name":"x","rule":"r","break":"no-backoff","registry":{"firstLease":"6s","lease":"6s"},"steps":[]}`,
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}
