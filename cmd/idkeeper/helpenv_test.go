package main

// Issue #30: help and usage errors — every environment-only setting in its
// command's help, a usage error in one line with the hint, init -h with a flag
// table, the --store help naming etcd, dev telling how to reset a lost admin
// password.

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// helpOf returns what `idkeeper PATH… -h` prints, checking it exits 0.
func helpOf(t *testing.T, path ...string) string {
	t.Helper()
	code, out, stderr := runInProcess(context.Background(), append(slices.Clone(path), "-h"), nil)
	if code != exitOK {
		t.Fatalf("idkeeper %s -h: exit %d\n%s", strings.Join(path, " "), code, stderr)
	}
	return out + stderr
}

// envRecorder is a lookupEnv over a map that records every name looked up.
type envRecorder struct {
	mu     sync.Mutex
	vals   map[string]string
	looked map[string]bool
}

func (r *envRecorder) lookup(k string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.looked[k] = true
	v, ok := r.vals[k]
	return v, ok
}

// startRecorded runs the command line until its log says it serves (marker),
// then stops it, and returns every environment variable it looked up.
func startRecorded(t *testing.T, args []string, vals map[string]string, marker string) map[string]bool {
	t.Helper()
	rec := &envRecorder{vals: vals, looked: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, rec.lookup, io.Discard, &stderr) }()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(stderr.String(), marker) {
		select {
		case code := <-done:
			t.Fatalf("%q exited %d before %q:\n%s", args, code, marker, stderr.String())
		case <-deadline:
			t.Fatalf("%q: no %q in 30 s:\n%s", args, marker, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	<-done
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.looked
}

// helpNames reports whether help lists the variable name: as a flag's
// ([NAME]), an environment-only setting's, or, for OTEL_…, the OTEL_* line.
func helpNames(help, name string) bool {
	if strings.HasPrefix(name, "OTEL_") {
		return strings.Contains(help, "\n  OTEL_* ")
	}
	return regexp.MustCompile(`(^|[\s\[,])` + regexp.QuoteMeta(name) + `($|[\s\],])`).MatchString(help)
}

// TestHelpListsEnvironmentOnlySettings: every variable server and dev look up
// while they start and serve (recorded through their lookupEnv), and every
// variable of the operations guide's "Settings only in the environment" table, is
// in the -h of each command that reads it.
func TestHelpListsEnvironmentOnlySettings(t *testing.T) {
	dir := t.TempDir()
	store := "bolt:" + filepath.Join(dir, "idkeeper.db")
	initInProcess(t, store)
	serverEnv := map[string]string{BootstrapKeyEnv: bootstrapKey, AdminKeyEnv: adminKey, "OTEL_SDK_DISABLED": "true"}
	looked := map[string]map[string]bool{
		"server": startRecorded(t, []string{"server", "--listen", "127.0.0.1:0", "--store", store}, serverEnv, `msg=listening`),
		"dev": startRecorded(t, []string{"dev", "--listen", "127.0.0.1:0", "--gateway-listen", "127.0.0.1:0", "--data", filepath.Join(dir, "dev")},
			nil, "gateway ready: issuing IDs"),
	}
	for cmd, names := range looked {
		help := helpOf(t, cmd)
		for _, want := range []string{BootstrapKeyEnv, ReceiptSecretEnv, "OTEL_SDK_DISABLED"} {
			if !names[want] {
				t.Errorf("%s looked up no %s: the recorder misses lookups", cmd, want)
			}
		}
		hidden := map[string]bool{}
		for f := range hiddenFlags {
			hidden[envName(f)] = true // test-only: hidden from -h on purpose
		}
		for name := range names {
			if !hidden[name] && !helpNames(help, name) {
				t.Errorf("%s reads %s from the environment, but its -h does not name it", cmd, name)
			}
		}
	}

	// The guide's table: each variable in the -h of each command it names.
	ref, ok := section(readLines(t, operationsDoc), secEnvOnly)
	if !ok {
		t.Fatalf("%s has no section %q", operationsDoc, secEnvOnly)
	}
	command := regexp.MustCompile("`([a-z][a-z-]*)`")
	var prev []string
	checked := 0
	for _, cells := range ref.rows() {
		if len(cells) < 2 {
			continue
		}
		cmds := prev
		if !strings.HasPrefix(cells[1], "the same") {
			cmds = nil
			for _, m := range command.FindAllStringSubmatch(cells[1], -1) {
				cmds = append(cmds, m[1])
			}
		}
		prev = cmds
		for _, v := range envToken.FindAllString(cells[0], -1) {
			for _, c := range cmds {
				for _, dc := range docCommands {
					if dc.path[0] != c {
						continue
					}
					checked++
					if help := helpOf(t, dc.path...); !helpNames(help, v) {
						t.Errorf("the guide says %s reads %s, but `idkeeper %s -h` does not name it", c, v, strings.Join(dc.path, " "))
					}
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d variables checked from the table %q: is it parsed?", checked, secEnvOnly)
	}
}

// TestUsageErrorIsOneLine: a mistyped flag, a bad value, a missing value or a
// bad environment value prints one line, naming the flag as the help spells it
// (--name) or the variable, with "run 'idkeeper CMD -h' for help": not the usage.
func TestUsageErrorIsOneLine(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		env  map[string]string
		cmd  string // as the hint names it
		want string
	}{
		{[]string{"server", "--lisen", ":1"}, nil, "server", "unknown flag --lisen"},
		{[]string{"server", "-lisen", ":1"}, nil, "server", "unknown flag --lisen"},
		{[]string{"server", "--nodes", "abc"}, nil, "server", `invalid value "abc" for --nodes`},
		{[]string{"server", "--accept-lost-writes-on-redis-restart=maybe"}, nil, "server", `invalid value "maybe" for --accept-lost-writes-on-redis-restart`},
		{[]string{"server"}, map[string]string{"IDKEEPER_NODES": "abc"}, "server", `invalid value "abc" for IDKEEPER_NODES`},
		{[]string{"server", "extra"}, nil, "server", `unexpected arguments ["extra"]`},
		{[]string{"gateway", "--listen"}, nil, "gateway", "--listen needs a value"},
		{[]string{"gateway", "--no-such-flag"}, nil, "gateway", "unknown flag --no-such-flag"},
		{[]string{"dev", "--gateway-node-ids", "x"}, nil, "dev", `invalid value "x" for --gateway-node-ids`},
		{[]string{"init", "--nodez", "8"}, nil, "init", "unknown flag --nodez"},
		{[]string{"apikey", "create", "--descripton", "x"}, nil, "apikey create", "unknown flag --descripton"},
		{[]string{"backup", "export", "--outt", "x"}, nil, "backup export", "unknown flag --outt"},
		{[]string{"users", "list", "--format"}, nil, "users list", "--format needs a value"},
		{[]string{"clock-agent", "--no-such-flag"}, nil, "clock-agent", "unknown flag --no-such-flag"},
		{[]string{"decode", "--json=maybe", "1"}, nil, "decode", `invalid value "maybe" for --json`},
	} {
		code, _, stderr := runInProcess(ctx, c.args, c.env)
		hint := "(run 'idkeeper " + c.cmd + " -h' for help)"
		if code != exitUsage || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) || !strings.HasSuffix(stderr, hint+"\n") {
			t.Errorf("%q %v: exit %d, stderr %q; want %d and one line with %q and %q", c.args, c.env, code, stderr, exitUsage, c.want, hint)
		}
		if regexp.MustCompile(`(^|\s)-[a-z]`).MatchString(strings.TrimSuffix(stderr, hint+"\n")) {
			t.Errorf("%q: stderr %q spells a flag -name; the help spells --name", c.args, stderr)
		}
	}
	// probe exits 1 (Docker reserves 2), in one line too.
	code, _, stderr := runInProcess(ctx, []string{"probe", "--timeot", "1s", "http://127.0.0.1:1/"}, nil)
	if code != exitFail || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "unknown flag --timeot (run 'idkeeper probe -h' for help)") {
		t.Errorf("probe --timeot: exit %d, stderr %q", code, stderr)
	}
}

// TestInitHelpHasFlagTable: init -h is in the format of every command's: its
// text, then the flag table with each flag's variable and default.
func TestInitHelpHasFlagTable(t *testing.T) {
	for _, args := range [][]string{{"init", "-h"}, {"init", "--help"}, {"init", "help"}} {
		code, out, stderr := runInProcess(context.Background(), args, nil)
		help := out + stderr
		if code != exitOK || !strings.HasPrefix(help, "Usage: idkeeper init") {
			t.Fatalf("%q: exit %d, %q", args, code, help)
		}
		for _, want := range []string{
			"\nFlags (each also from the environment variable shown):\n",
			"\n  --store  [IDKEEPER_STORE] (default " + DefaultStore + ")\n",
			"\n  --nodes  [IDKEEPER_NODES] (default 4096)\n",
			"\n  --layout  [IDKEEPER_LAYOUT] (default 41/12/10)\n",
			"\n  --log-format  [IDKEEPER_LOG_FORMAT] (default text)\n",
		} {
			if !strings.Contains(help, want) {
				t.Errorf("%q does not show %q:\n%s", args, want, help)
			}
		}
	}
	// The same line format as the server's.
	if !strings.Contains(helpOf(t, "server"), "\nFlags (each also from the environment variable shown):\n  --") {
		t.Error("server -h has another format")
	}
}

// TestStoreHelpNamesEtcd: the --store help of every command that takes one lists
// etcd beside bolt and Redis.
func TestStoreHelpNamesEtcd(t *testing.T) {
	for _, path := range [][]string{{"server"}, {"init"}, {"apikey", "list"}, {"users", "list"}, {"audit", "verify"}, {"backup", "export"}} {
		help := helpOf(t, path...)
		i := strings.Index(help, "\n  --store  [")
		if i < 0 {
			t.Fatalf("%q: no --store in\n%s", path, help)
		}
		line, _, _ := strings.Cut(help[i+1:], "\n  --")
		for _, want := range []string{"bolt:", "redis://", "etcd://"} {
			if !strings.Contains(line, want) {
				t.Errorf("%q --store help %q lacks %s", path, line, want)
			}
		}
	}
}

// TestDevTellsHowToResetTheAdminPassword: dev's banner and -h give the command
// that resets a lost admin password, and that command, as printed, works on the
// store (dev stopped).
func TestDevTellsHowToResetTheAdminPassword(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "idkeeper.db")
	var banner bytes.Buffer
	if err := devBanner.Execute(&banner, devInfo{Store: path, AdminUser: DefaultAdminUser}); err != nil {
		t.Fatal(err)
	}
	want := "idkeeper users reset-password " + DefaultAdminUser + " --store bolt:" + path
	i := strings.Index(banner.String(), want)
	if i < 0 {
		t.Fatalf("the dev banner does not say %q:\n%s", want, banner.String())
	}
	if help := helpOf(t, "dev"); !strings.Contains(help, "idkeeper users reset-password "+DefaultAdminUser+" --store bolt:DATA/idkeeper.db") {
		t.Errorf("dev -h does not tell how to reset the admin password:\n%s", help)
	}
	store := "bolt:" + path
	initInProcess(t, store)
	withStdin(t, "the first admin's password\n")
	if code, _, stderr := runInProcess(context.Background(), []string{"users", "add", DefaultAdminUser, "--role", "admin", "--store", store}, nil); code != exitOK {
		t.Fatalf("users add: exit %d %s", code, stderr)
	}
	withStdin(t, "a brand new password\n")
	args := strings.Fields(strings.TrimPrefix(want, "idkeeper "))
	if code, out, stderr := runInProcess(context.Background(), args, nil); code != exitOK || !strings.Contains(out, "password reset") {
		t.Fatalf("the banner's command %q: exit %d, %s %s", want, code, out, stderr)
	}
	_ = os.Remove(path)
}
