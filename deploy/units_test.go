package deploy_test

import (
	"bufio"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// unit is a systemd unit file: every key's values, in order.
type unit map[string][]string

func parseUnit(t *testing.T, rel string) unit {
	t.Helper()
	u := unit{}
	sc := bufio.NewScanner(strings.NewReader(readFile(t, rel)))
	section := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is no KEY=VALUE", rel, line)
			}
			u[section+"."+k] = append(u[section+"."+k], v)
		}
	}
	return u
}

func (u unit) last(key string) string {
	if v := u[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// TestSystemdUnit checks the registry's unit: hardened, its state in
// StateDirectory, its secrets as credentials read through the *_FILE convention,
// and no automatic init.
func TestSystemdUnit(t *testing.T) {
	for _, rel := range []string{"deploy/systemd/idkeeper.service", "deploy/systemd/idkeeper-clock-agent.service"} {
		t.Run(filepath.Base(rel), func(t *testing.T) {
			u := parseUnit(t, rel)
			for key, want := range map[string]string{
				"Service.DynamicUser":             "yes",
				"Service.NoNewPrivileges":         "yes",
				"Service.ProtectSystem":           "strict",
				"Service.ProtectHome":             "yes",
				"Service.PrivateTmp":              "yes",
				"Service.PrivateDevices":          "yes",
				"Service.RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
				"Service.CapabilityBoundingSet":   "",
				"Install.WantedBy":                "multi-user.target",
			} {
				if got, ok := u[key]; !ok || u.last(key) != want {
					t.Errorf("%s: %s=%q, want %q", rel, key, got, want)
				}
			}
			start := u.last("Service.ExecStart")
			if !strings.HasPrefix(start, "/usr/local/bin/idkeeper ") {
				t.Errorf("%s: ExecStart=%s, want /usr/local/bin/idkeeper …", rel, start)
			}
			for _, k := range []string{"Service.ExecStartPre", "Service.ExecStartPost", "Service.ExecStart"} {
				for _, v := range u[k] {
					if slices.Contains(strings.Fields(v), "init") {
						t.Errorf("%s: %s=%s initialises the store on a start: init is manual (DESIGN §7)", rel, k, v)
					}
				}
			}
			// Every credential loaded is used, from the credentials directory.
			creds := u["Service.LoadCredential"]
			if len(creds) == 0 {
				t.Errorf("%s: no LoadCredential=: secrets come as credentials", rel)
			}
			uses := strings.Join(append(slices.Clone(u["Service.Environment"]), start), "\n")
			for _, c := range creds {
				id, _, _ := strings.Cut(c, ":")
				if !strings.Contains(uses, "%d/"+id) && !strings.Contains(uses, "${CREDENTIALS_DIRECTORY}/"+id) {
					t.Errorf("%s: the credential %s is loaded but not read (%%d/%s)", rel, id, id)
				}
			}
		})
	}
	u := parseUnit(t, "deploy/systemd/idkeeper.service")
	if got := u.last("Service.StateDirectory"); got != "idkeeper" {
		t.Errorf("idkeeper.service: StateDirectory=%q, want idkeeper", got)
	}
	if start := u.last("Service.ExecStart"); !strings.HasPrefix(start, "/usr/local/bin/idkeeper server") {
		t.Errorf("idkeeper.service runs %q: want the server", start)
	}
	// A server whose clock check failed exits with status 75 for a fresh process
	// (docs/clock.md): systemd restarts it, after a pause, and never gives up.
	if r := u.last("Service.Restart"); r != "on-failure" && r != "always" {
		t.Errorf("idkeeper.service: Restart=%q, want on-failure", r)
	}
	if d, err := time.ParseDuration(u.last("Service.RestartSec")); err != nil || d < time.Second {
		t.Errorf("idkeeper.service: RestartSec=%q, want a pause of a second or more", u.last("Service.RestartSec"))
	}
	if l := u.last("Unit.StartLimitIntervalSec"); l != "0" {
		t.Errorf("idkeeper.service: StartLimitIntervalSec=%q, want 0: systemd must never stop restarting a replica", l)
	}
	for _, k := range []string{"Service.RestartPreventExitStatus", "Service.SuccessExitStatus"} {
		for _, v := range u[k] {
			if slices.Contains(strings.Fields(v), "75") || slices.Contains(strings.Fields(v), "TEMPFAIL") {
				t.Errorf("idkeeper.service: %s=%s: status 75 (a failed clock check) must be restarted", k, v)
			}
		}
	}
	env := strings.Join(u["Service.Environment"], "\n")
	for _, want := range []string{"IDKEEPER_STORE=bolt:%S/idkeeper/", "IDKEEPER_BOOTSTRAP_API_KEY_FILE=%d/", "IDKEEPER_ADMIN_PASSWORD_FILE=%d/"} {
		if !strings.Contains(env, want) {
			t.Errorf("idkeeper.service: no Environment=%s…", want)
		}
	}
}

// TestDockerfile checks the image's recipe: a Go build stage, a static binary
// with the version and commit stamped where cmd/idkeeper reads them, and a
// runtime stage that runs as a user other than root.
func TestDockerfile(t *testing.T) {
	df := readFile(t, "Dockerfile")
	var stages [][]string // the instructions of each stage
	for line := range strings.Lines(strings.ReplaceAll(df, "\\\n", " ")) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(strings.ToUpper(line), "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], line)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("the Dockerfile has %d stages: want a build stage and a runtime stage", len(stages))
	}
	build, runtime := strings.Join(stages[0], "\n"), stages[len(stages)-1]
	if !strings.Contains(stages[0][0], "golang:") {
		t.Errorf("the first stage is %q: want a golang builder", stages[0][0])
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "ARG VERSION", "ARG COMMIT",
		"-X main.version=${VERSION}", "-X main.commit=${COMMIT}", "./cmd/idkeeper"} {
		if !strings.Contains(build, want) {
			t.Errorf("the build stage lacks %q", want)
		}
	}
	version := readFile(t, "cmd/idkeeper/version.go")
	if !regexp.MustCompile(`(?m)^\s+version\s+string`).MatchString(version) || !regexp.MustCompile(`(?m)^\s+commit\s+string`).MatchString(version) {
		t.Error("cmd/idkeeper/version.go has no package variables version and commit for the Dockerfile's -X flags")
	}
	if strings.Contains(runtime[0], "golang:") {
		t.Errorf("the runtime stage is %q: want a small image, not the Go toolchain", runtime[0])
	}
	user := ""
	var entrypoint, expose string
	for _, ins := range runtime {
		word, rest, _ := strings.Cut(ins, " ")
		switch strings.ToUpper(word) {
		case "USER":
			user = strings.TrimSpace(rest)
		case "ENTRYPOINT":
			entrypoint = rest
		case "EXPOSE":
			expose += " " + rest
		}
	}
	if name, _, _ := strings.Cut(user, ":"); name == "" || name == "root" || name == "0" {
		t.Errorf("the runtime stage runs as %q: want a user other than root", user)
	}
	if !strings.Contains(entrypoint, "/usr/local/bin/idkeeper") {
		t.Errorf("ENTRYPOINT %s: want /usr/local/bin/idkeeper, which the Compose health checks run", entrypoint)
	}
	for _, port := range []string{"8080", "8081", "4123"} {
		if !slices.Contains(strings.Fields(expose), port) {
			t.Errorf("the image does not EXPOSE %s (EXPOSE%s)", port, expose)
		}
	}
}
