// Package deploy_test checks the deployment files at the top of the repository:
// docker-compose.yaml, resolved by docker-compose itself with .env.example as its
// .env (no Docker daemon needed), the systemd units in deploy/systemd and the
// Dockerfile. docs/deploy.md describes them.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/gateway"
)

// root is the repository's top directory: this file's directory is deploy/.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("%s is not the repository's top directory: %v", dir, err)
	}
	return dir
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// composeTool is how this machine runs Compose: Debian's docker-compose (v1, in
// Python, or v2) or the docker CLI's compose plugin.
type composeTool struct {
	argv []string
	v1   bool // prints YAML only (no --format json)
}

// findCompose finds Compose, or fails the test saying how to install it: the
// test never skips.
func findCompose(t *testing.T) composeTool {
	t.Helper()
	if path, err := exec.LookPath("docker-compose"); err == nil {
		out, err := exec.Command(path, "version", "--short").Output()
		if err != nil {
			t.Fatalf("%s version --short: %v", path, err)
		}
		v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
		return composeTool{argv: []string{path}, v1: strings.HasPrefix(v, "1.")}
	}
	if path, err := exec.LookPath("docker"); err == nil {
		if exec.Command(path, "compose", "version").Run() == nil {
			return composeTool{argv: []string{path, "compose"}}
		}
	}
	t.Fatal("neither docker-compose nor `docker compose` is installed, and this test validates docker-compose.yaml with it " +
		"(no Docker daemon needed): install the Debian package, as scripts/test does: " +
		"apt-get install --no-install-recommends docker-compose")
	return composeTool{}
}

// service is one service of the resolved Compose configuration, as Compose prints it.
type service struct {
	Image       string         `json:"image"`
	Entrypoint  any            `json:"entrypoint"`
	Command     any            `json:"command"`
	Environment any            `json:"environment"`
	Volumes     []any          `json:"volumes"`
	Ports       []any          `json:"ports"`
	Healthcheck map[string]any `json:"healthcheck"`
	DependsOn   any            `json:"depends_on"`
	Profiles    []string       `json:"profiles"`
	Restart     string         `json:"restart"`
	User        string         `json:"user"`
	Networks    any            `json:"networks"` // a list of names, or a map by name
}

// networks are the names of the networks the service is on; none given: default.
func (s service) networks() []string {
	var out []string
	switch n := s.Networks.(type) {
	case []any:
		for _, v := range n {
			out = append(out, fmt.Sprint(v))
		}
	case map[string]any:
		for k := range n {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		out = []string{"default"}
	}
	slices.Sort(out)
	return out
}

type composeConfig struct {
	Services map[string]service `json:"services"`
	Volumes  map[string]any     `json:"volumes"`
	Networks map[string]struct {
		IPAM struct {
			Config []struct {
				Subnet string `json:"subnet"`
			} `json:"config"`
		} `json:"ipam"`
	} `json:"networks"`
}

// config runs `compose config` on a copy of docker-compose.yaml with a copy of
// .env.example as its .env, in an environment that holds nothing else (so that
// the machine's variables cannot stand in for a setting .env.example lacks), and
// returns the configuration Compose resolved.
func config(t *testing.T, tool composeTool, profiles ...string) composeConfig {
	t.Helper()
	src, dir := root(t), t.TempDir()
	for from, to := range map[string]string{"docker-compose.yaml": "docker-compose.yaml", ".env.example": ".env",
		"Dockerfile": "Dockerfile", ".dockerignore": ".dockerignore"} {
		b, err := os.ReadFile(filepath.Join(src, from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := append(slices.Clone(tool.argv[1:]), "--project-directory", dir, "-f", filepath.Join(dir, "docker-compose.yaml"))
	for _, p := range profiles {
		args = append(args, "--profile", p)
	}
	args = append(args, "config")
	if !tool.v1 {
		args = append(args, "--format", "json")
	}
	cmd := exec.Command(tool.argv[0], args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "DOCKER_CONFIG=" + filepath.Join(dir, ".docker")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	began := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", tool.argv[0], strings.Join(args, " "), err, stderr.String())
	}
	t.Logf("%s config (profiles %q): %s", strings.Join(tool.argv, " "), profiles, time.Since(began).Round(time.Millisecond))
	if tool.v1 {
		// docker-compose v1 prints YAML only; its own YAML library (python3-yaml, a
		// dependency of the package) turns it into JSON.
		conv := exec.Command("python3", "-c", "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)")
		conv.Stdin = bytes.NewReader(out)
		conv.Stderr = &stderr
		if out, err = conv.Output(); err != nil {
			t.Fatalf("converting docker-compose's YAML to JSON with python3-yaml (a dependency of docker-compose v1): %v\n%s", err, stderr.String())
		}
	}
	var c composeConfig
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("compose config printed what is not a configuration: %v\n%s", err, out)
	}
	return c
}

// words is a command or entrypoint as a list: Compose prints a list; a string is
// split at blanks.
func words(v any) []string {
	switch v := v.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		out := make([]string, len(v))
		for i, w := range v {
			out[i] = fmt.Sprint(w)
		}
		return out
	}
	return nil
}

// argv is what the container runs: entrypoint, then command.
func (s service) argv() []string { return append(words(s.Entrypoint), words(s.Command)...) }

// flag returns the value of --name in the command (--name VALUE or --name=VALUE),
// its first when it is repeated.
func (s service) flag(name string) (string, bool) {
	if v := s.flags(name); len(v) > 0 {
		return v[0], true
	}
	return "", false
}

// flags returns every value of --name in the command, in order.
func (s service) flags(name string) []string {
	var out []string
	cmd := words(s.Command)
	for i, w := range cmd {
		if w == "--"+name && i+1 < len(cmd) {
			out = append(out, cmd[i+1])
		}
		if v, ok := strings.CutPrefix(w, "--"+name+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// env returns the service's environment as a map.
func (s service) env() map[string]string {
	out := map[string]string{}
	switch e := s.Environment.(type) {
	case map[string]any:
		for k, v := range e {
			if v != nil {
				out[k] = fmt.Sprint(v)
			} else {
				out[k] = ""
			}
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(fmt.Sprint(kv), "=")
			out[k] = v
		}
	}
	return out
}

// mount is one volume of a service.
type mount struct {
	source, target, kind string
	readOnly             bool
}

func (s service) mounts() []mount {
	var out []mount
	for _, v := range s.Volumes {
		switch v := v.(type) {
		case string: // v1: SOURCE:TARGET[:MODE]
			parts := strings.Split(v, ":")
			if len(parts) >= 2 {
				kind := "volume"
				if strings.HasPrefix(parts[0], "/") || strings.HasPrefix(parts[0], ".") {
					kind = "bind"
				}
				ro := len(parts) > 2 && slices.Contains(strings.Split(parts[2], ","), "ro")
				out = append(out, mount{source: parts[0], target: parts[1], kind: kind, readOnly: ro})
			}
		case map[string]any:
			out = append(out, mount{source: fmt.Sprint(v["source"]), target: fmt.Sprint(v["target"]), kind: fmt.Sprint(v["type"]),
				readOnly: v["read_only"] == true})
		}
	}
	return out
}

// mountOf returns the volume mounted at path or above it.
func (s service) mountOf(path string) (mount, bool) {
	for _, m := range s.mounts() {
		if path == m.target || strings.HasPrefix(path, strings.TrimSuffix(m.target, "/")+"/") {
			return m, true
		}
	}
	return mount{}, false
}

// dependsOn returns the services it waits for, with the condition.
func (s service) dependsOn() map[string]string {
	out := map[string]string{}
	switch d := s.DependsOn.(type) {
	case []any:
		for _, name := range d {
			out[fmt.Sprint(name)] = "service_started"
		}
	case map[string]any:
		for name, v := range d {
			cond := "service_started"
			if m, ok := v.(map[string]any); ok && m["condition"] != nil {
				cond = fmt.Sprint(m["condition"])
			}
			out[name] = cond
		}
	}
	return out
}

// healthTest is the health check's command, "" without one.
func (s service) healthTest() string {
	if s.Healthcheck == nil || s.Healthcheck["disable"] == true {
		return ""
	}
	switch t := s.Healthcheck["test"].(type) {
	case string:
		return t
	case []any:
		return strings.Join(words(t), " ")
	}
	return ""
}

// runsInit tells whether the service initialises the store.
func (s service) runsInit() bool {
	for _, w := range s.argv() {
		if w == "init" {
			return true
		}
	}
	return false
}

// TestCompose validates docker-compose.yaml with .env.example and checks what the
// stack promises: Redis that keeps every acknowledged write and has a password,
// two registries with a state volume each, the clock agent and health checks,
// the gateway after healthy registries, and the guarded `init` on every `up`
// before the registries (issue #30).
func TestCompose(t *testing.T) {
	tool := findCompose(t)
	c := config(t, tool)
	svc := func(t *testing.T, name string) service {
		t.Helper()
		s, ok := c.Services[name]
		if !ok {
			t.Fatalf("docker-compose.yaml has no service %q; it has %v", name, keys(c.Services))
		}
		return s
	}
	for _, name := range []string{"redis", "clock-agent", "registry-1", "registry-2", "gateway"} {
		svc(t, name)
	}

	redis := svc(t, "redis")
	redisPassword := redis.env()["REDIS_PASSWORD"]
	t.Run("redis", func(t *testing.T) {
		cmd := strings.Join(redis.argv(), " ")
		for _, want := range []string{"redis-server", "--appendonly yes", "--appendfsync always", "--maxmemory-policy noeviction", "--requirepass"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("redis runs %q: want %q in it", cmd, want)
			}
		}
		if len(redisPassword) < 16 {
			t.Errorf("redis's REDIS_PASSWORD is %q: want a password (from .env) of 16 characters or more", redisPassword)
		}
		if m, ok := redis.mountOf("/data"); !ok || m.kind != "volume" {
			t.Errorf("redis keeps /data on %+v: want a named volume", m)
		}
		if redis.healthTest() == "" {
			t.Error("redis has no health check")
		}
	})

	agent := svc(t, "clock-agent")
	agentListen, _ := agent.flag("listen")
	t.Run("clock-agent", func(t *testing.T) {
		if a := agent.argv(); len(a) == 0 || a[0] != "clock-agent" {
			t.Errorf("clock-agent runs %q: want `idkeeper clock-agent …`", a)
		}
		if agentListen == "" {
			t.Error("clock-agent has no --listen")
		}
		file, ok := agent.flag("secret-file")
		if !ok {
			t.Fatal("clock-agent has no --secret-file")
		}
		if _, ok := agent.mountOf(file); !ok {
			t.Errorf("clock-agent's --secret-file %s is on no volume: %+v", file, agent.mounts())
		}
		if ntp := agent.env()["IDKEEPER_NTP_SERVER"]; ntp == "" {
			t.Error("clock-agent has no NTP server (IDKEEPER_NTP_SERVER), which --source ntp reads")
		}
		// The source is .env's CLOCK_SOURCE: kernel (the host's chrony, ntpd or
		// timesyncd) as .env.example has it, or ntp.
		if src, ok := agent.flag("source"); !ok || src != "kernel" {
			t.Errorf("clock-agent's --source is %q: want ${CLOCK_SOURCE}, kernel in .env.example", src)
		}
		// The health check is a TCKCLK 2 exchange under the agent's own secret
		// (issue #30), not a connect: an agent answering synced=0 is unhealthy.
		_, port, _ := strings.Cut(agentListen, ":")
		h := words(agent.Healthcheck["test"])
		if !slices.Contains(h, "probe") || !slices.Contains(h, "tckclk://127.0.0.1:"+port) {
			t.Errorf("clock-agent's health check is %q: want `idkeeper probe --secret-file … tckclk://127.0.0.1:%s`", h, port)
		}
		if i := slices.Index(h, "--secret-file"); i < 0 || i+1 >= len(h) || h[i+1] != file {
			t.Errorf("clock-agent's health check %q does not read the agent's --secret-file %s", h, file)
		}
		// The agent serves its own network's subnet, which only the registries
		// share with it (issue #29), and loopback's 127.0.0.1 for its health
		// check: nothing else.
		allow := agent.flags("allow")
		if len(allow) == 0 {
			t.Fatal("clock-agent has no --allow: it listens beyond loopback, so it would not start")
		}
		nets := agent.networks()
		if len(nets) != 1 || nets[0] == "default" {
			t.Fatalf("clock-agent is on the networks %q: want one of its own, shared with the registries only", nets)
		}
		n := c.Networks[nets[0]]
		if len(n.IPAM.Config) != 1 {
			t.Fatalf("clock-agent's network %s has the subnets %+v: want one", nets[0], n.IPAM.Config)
		}
		probeSource := false
		for _, a := range allow {
			for v := range strings.SplitSeq(a, ",") {
				p, err := netip.ParsePrefix(v)
				switch {
				case v == n.IPAM.Config[0].Subnet:
				case err == nil && p == netip.MustParsePrefix("127.0.0.1/32"):
					probeSource = true
				default:
					t.Errorf("clock-agent allows %q: want only its network's subnet %s and 127.0.0.1/32", v, n.IPAM.Config[0].Subnet)
				}
			}
		}
		if !probeSource {
			t.Errorf("clock-agent allows %q: without 127.0.0.1/32 it closes its own health check's connection unanswered", allow)
		}
		for name, s := range c.Services {
			on := slices.Contains(s.networks(), nets[0])
			if want := name == "clock-agent" || name == "registry-1" || name == "registry-2"; on != want {
				t.Errorf("%s is on the network %s: %v, want %v", name, nets[0], on, want)
			}
		}
	})

	r1, r2 := svc(t, "registry-1"), svc(t, "registry-2")
	var stateVolumes []string
	for _, name := range []string{"registry-1", "registry-2"} {
		s := svc(t, name)
		t.Run(name, func(t *testing.T) {
			env := s.env()
			if a := s.argv(); len(a) == 0 || a[0] != "server" {
				t.Errorf("%s runs %q: want `idkeeper server …`", name, a)
			}
			if h := s.healthTest(); !strings.Contains(h, "probe") || !strings.Contains(h, "/readyz") {
				t.Errorf("%s's health check is %q: want `idkeeper probe …/readyz`", name, h)
			}
			// A registry whose clock check failed exits (status 75) for a fresh
			// process: Compose must start one, and never stop trying.
			if !slices.Contains([]string{"unless-stopped", "always", "on-failure"}, s.Restart) {
				t.Errorf("%s restarts %q: want unless-stopped (or always, or on-failure without a retry limit)", name, s.Restart)
			}
			// The store on Redis, its password from the environment, not argv.
			store := env["IDKEEPER_STORE"]
			u, err := url.Parse(store)
			if err != nil || u.Scheme != "redis" || u.Hostname() != "redis" {
				t.Errorf("%s's IDKEEPER_STORE %q: want redis://:PASSWORD@redis:6379/0", name, store)
			} else if pw, _ := u.User.Password(); pw != redisPassword {
				t.Errorf("%s's store URL has the password %q, redis has %q", name, pw, redisPassword)
			}
			if _, ok := s.flag("store"); ok {
				t.Errorf("%s gives --store on the command line: its password would show in ps", name)
			}
			// Its own state file on its own volume.
			state := env["IDKEEPER_STATE_FILE"]
			m, ok := s.mountOf(state)
			if state == "" || !ok || m.kind != "volume" {
				t.Errorf("%s's state file %q is on %+v: want a named volume of its own", name, state, m)
			}
			stateVolumes = append(stateVolumes, m.source)
			// The clock agent.
			if a, ok := s.flag("clock-agent"); !ok || !strings.HasPrefix(a, "clock-agent:") {
				t.Errorf("%s's --clock-agent is %q: want clock-agent:PORT", name, a)
			} else if _, port, _ := strings.Cut(agentListen, ":"); !strings.HasSuffix(a, ":"+port) {
				t.Errorf("%s's --clock-agent %s: the agent listens on %s", name, a, agentListen)
			}
			if d := s.dependsOn(); d["redis"] != "service_healthy" || d["clock-agent"] != "service_healthy" {
				t.Errorf("%s depends on %v: want redis and clock-agent healthy first", name, d)
			}
			for _, k := range []string{"IDKEEPER_CLOCK_SECRET", "IDKEEPER_RECEIPT_SECRET"} {
				if len(env[k]) < 32 {
					t.Errorf("%s's %s has %d bytes: want 32 or more", name, k, len(env[k]))
				}
			}
			for _, k := range []string{"IDKEEPER_ADMIN_PASSWORD", "IDKEEPER_BOOTSTRAP_API_KEY"} {
				if env[k] == "" {
					t.Errorf("%s has no %s", name, k)
				}
			}
			if env["IDKEEPER_CLOCK_SECRET"] == env["IDKEEPER_RECEIPT_SECRET"] || env["IDKEEPER_CLOCK_SECRET"] == redisPassword {
				t.Errorf("%s's clock secret is another credential too: keep it apart (docs/clock.md)", name)
			}
		})
	}
	t.Run("registries", func(t *testing.T) {
		if len(stateVolumes) == 2 && stateVolumes[0] == stateVolumes[1] {
			t.Errorf("both registries keep their state on the volume %q: each needs its own", stateVolumes[0])
		}
		if a, b := r1.env()["IDKEEPER_RECEIPT_SECRET"], r2.env()["IDKEEPER_RECEIPT_SECRET"]; a != b {
			t.Error("the registries have different receipt secrets: receipts would verify on the replica that signed them only")
		}
		if a, b := r1.env()["IDKEEPER_CLOCK_SECRET"], r2.env()["IDKEEPER_CLOCK_SECRET"]; a != b {
			t.Error("the registries have different clock secrets")
		}
	})

	t.Run("gateway", func(t *testing.T) {
		g := svc(t, "gateway")
		if a := g.argv(); len(a) == 0 || a[0] != "gateway" {
			t.Errorf("gateway runs %q: want `idkeeper gateway …`", a)
		}
		d := g.dependsOn()
		for _, r := range []string{"registry-1", "registry-2"} {
			if d[r] != "service_healthy" {
				t.Errorf("gateway depends on %v: want %s healthy first", d, r)
			}
		}
		// The gateway fails over between the registries: it is given every one.
		server, _ := g.flag("server")
		seen := map[string]bool{}
		for _, s := range strings.Split(server, ",") {
			if u, err := url.Parse(s); err != nil || c.Services[u.Hostname()].Image == "" {
				t.Errorf("gateway's --server %q: %q is not the URL of a registry service", server, s)
			} else {
				seen[u.Hostname()] = true
			}
		}
		if !seen["registry-1"] || !seen["registry-2"] {
			t.Errorf("gateway's --server %q: want both registries, to fail over between them", server)
		}
		env := g.env()
		if idem := env["IDKEEPER_IDEMPOTENCY_STORE"]; !strings.HasPrefix(idem, "redis://") {
			t.Errorf("gateway's IDKEEPER_IDEMPOTENCY_STORE %q: want the Idempotency-Key records in Redis", idem)
		}
		if k := env["IDKEEPER_API_KEY"]; k == "" || k != r1.env()["IDKEEPER_BOOTSTRAP_API_KEY"] {
			t.Errorf("gateway's IDKEEPER_API_KEY is not the registries' bootstrap key, which they store at start")
		}
		if h := g.healthTest(); !strings.Contains(h, "probe") {
			t.Errorf("gateway's health check is %q: want `idkeeper probe …`", h)
		}
		// Consumer keys, so that the stack does not serve IDs to anyone by
		// default (issue #30): .env.example holds a working placeholder.
		keys, err := gateway.ParseConsumerKeys(env["IDKEEPER_CONSUMER_KEYS"], "IDKEEPER_CONSUMER_KEYS")
		if err != nil || keys.Len() == 0 {
			t.Errorf("gateway's IDKEEPER_CONSUMER_KEYS %q: want at least one key (%v)", env["IDKEEPER_CONSUMER_KEYS"], err)
		}
		if k := env["IDKEEPER_CONSUMER_KEYS"]; k == env["IDKEEPER_API_KEY"] || k == redisPassword {
			t.Error("gateway's consumer key is another credential too")
		}
	})

	// Every `docker compose up` runs the job init before the registries (issue
	// #30): it initialises the store only when no registry's state volume shows
	// that one saw it, so it reads every registry's state volume, read-only, and no
	// other service initialises anything.
	t.Run("init on up", func(t *testing.T) {
		s := svc(t, "init")
		if a := s.argv(); len(a) == 0 || a[0] != "init" {
			t.Fatalf("service init runs %q: want `idkeeper init --unless-seen …`", a)
		}
		if len(s.Profiles) != 0 {
			t.Errorf("service init has the profiles %q: want none, so that every `up` runs it", s.Profiles)
		}
		if s.Restart != "" && s.Restart != "no" {
			t.Errorf("service init restarts %q: a job restarts never", s.Restart)
		}
		if a, b := s.env()["IDKEEPER_STORE"], r1.env()["IDKEEPER_STORE"]; a != b {
			t.Errorf("init initialises %q, the registries serve %q", a, b)
		}
		if _, ok := s.flag("store"); ok {
			t.Error("init gives --store on the command line: its password would show in ps")
		}
		if s.dependsOn()["redis"] != "service_healthy" {
			t.Errorf("init depends on %v: want redis healthy first", s.dependsOn())
		}
		seen := s.flags("unless-seen")
		for _, p := range seen {
			if m, ok := s.mountOf(p); !ok || m.kind != "volume" || !m.readOnly {
				t.Errorf("init's --unless-seen %s is on %+v: want a registry's state volume, mounted read-only", p, m)
			}
		}
		for _, m := range s.mounts() {
			if !m.readOnly {
				t.Errorf("init mounts %s at %s writable: it only reads", m.source, m.target)
			}
		}
		registries := 0
		for name, r := range c.Services {
			if a := r.argv(); len(a) == 0 || a[0] != "server" {
				if name != "init" && r.runsInit() {
					t.Errorf("service %s runs %q: only the guarded job init initialises the store", name, a)
				}
				continue
			}
			registries++
			if d := r.dependsOn(); d["init"] != "service_completed_successfully" {
				t.Errorf("%s depends on %v: want init completed successfully first", name, d)
			}
			state, ok := r.mountOf(r.env()["IDKEEPER_STATE_FILE"])
			if !ok {
				continue // the registry's own subtest reports it
			}
			read := false
			for _, p := range seen {
				if m, _ := s.mountOf(p); m.source == state.source && m.target == p {
					read = true
				}
			}
			if !read {
				t.Errorf("init does not read %s's state volume %s: --unless-seen %q, mounts %+v", name, state.source, seen, s.mounts())
			}
		}
		if registries != 2 {
			t.Errorf("%d services run the registry server, want 2", registries)
		}
	})
	t.Run("one image", func(t *testing.T) {
		for _, name := range []string{"clock-agent", "registry-1", "registry-2", "gateway"} {
			if img := c.Services[name].Image; img != r1.Image {
				t.Errorf("%s runs the image %q, registry-1 %q", name, img, r1.Image)
			}
		}
	})
}

// TestEnvExample: every variable docker-compose.yaml reads is set in .env.example,
// and .env (the copy with the real secrets) is kept out of git and of the image.
func TestEnvExample(t *testing.T) {
	compose, example := readFile(t, "docker-compose.yaml"), readFile(t, ".env.example")
	set := map[string]bool{}
	for line := range strings.Lines(example) {
		line = strings.TrimSpace(line)
		if k, _, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			set[k] = true
		}
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(compose, -1) {
		if !set[m[1]] {
			t.Errorf("docker-compose.yaml reads ${%s}, which .env.example does not set", m[1])
		}
	}
	if !hasLine(readFile(t, ".gitignore"), "/.env", ".env") {
		t.Error(".gitignore does not ignore .env")
	}
	if !hasLine(readFile(t, ".dockerignore"), ".env") {
		t.Error(".dockerignore does not keep .env out of the image's build context")
	}
}

func hasLine(text string, want ...string) bool {
	for line := range strings.Lines(text) {
		if slices.Contains(want, strings.TrimSpace(line)) {
			return true
		}
	}
	return false
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
