package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/localstate"
	"github.com/idkeeper/idkeeper/server"
)

// guardedInit runs `idkeeper init --store store --unless-seen P …` in process.
func guardedInit(t *testing.T, store string, env map[string]string, paths ...string) (code int, stdout, stderr string) {
	t.Helper()
	args := []string{"init", "--store", store}
	for _, p := range paths {
		args = append(args, "--unless-seen", p)
	}
	return runInProcess(context.Background(), args, env)
}

// specStatus reads the store at spec (bolt or Redis) as the commands open it.
func specStatus(t *testing.T, spec string) idkeeper.StoreStatus {
	t.Helper()
	s, err := server.OpenStore(context.Background(), spec, server.StoreOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// refusedEmptied checks that init left an emptied store alone: exit 0 (the
// deployment's start goes on, and its registries recover the store), naming the
// state file, what happened and where to read on, on stdout and as a warning; the
// store still empty.
func refusedEmptied(t *testing.T, spec, stateFile string, code int, stdout, stderr string) {
	t.Helper()
	for _, want := range []string{"not initialising the store", "it is empty, but a registry of this deployment saw it",
		stateFile, "emptied or lost", "never be initialised again", "DESIGN §7", "docs/deploy.md", "Nothing was changed",
		"recovers it by itself"} {
		if !strings.Contains(stderr, want) || !strings.Contains(stdout, want) {
			t.Errorf("the warning does not say %q:\nstdout: %s\nstderr: %s", want, stdout, stderr)
		}
	}
	if !strings.Contains(stderr, "level=WARN") {
		t.Errorf("not logged as a warning:\n%s", stderr)
	}
	if code != exitOK || !strings.HasPrefix(stdout, "not initialising the store") {
		t.Errorf("exit %d, stdout %q: want exit 0 and nothing initialised", code, stdout)
	}
	if st := specStatus(t, spec); st.Initialised {
		t.Errorf("the refused init initialised the store: %+v", st.Generation)
	}
}

// Issue #30, on bolt: a new deployment (empty state volumes) is initialised; on
// every later start the store is initialised already and nothing changes, the
// registry's state file notwithstanding; once the store is emptied, the state file
// that saw it stops init (while a registry holds it open, too), changes neither it
// nor the store, and the registry recovers the store by itself, after which init
// passes again.
func TestInitUnlessSeenBolt(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "idkeeper.db")
	spec := "bolt:" + db
	v1, v2 := filepath.Join(dir, "registry-1"), filepath.Join(dir, "registry-2")
	for _, d := range []string{v1, v2} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := guardedInit(t, spec, nil, v1, v2)
	if code != exitOK || !strings.Contains(stdout, "initialised "+spec+": generation 1") ||
		!strings.Contains(stderr, "no replica state file saw this store: a new deployment") {
		t.Fatalf("a new deployment: exit %d\n%s%s", code, stdout, stderr)
	}
	first := specStatus(t, spec).Generation

	state := filepath.Join(v1, server.StateFileName)
	runBolt(t, db, "--state-file", state)
	code, stdout, stderr = guardedInit(t, spec, nil, v1, v2)
	if code != exitOK || !strings.Contains(stdout, "is initialised already") || specStatus(t, spec).Generation != first {
		t.Fatalf("the next start: exit %d\n%s%s", code, stdout, stderr)
	}

	// Emptied: the bolt file is gone.
	if err := os.Remove(db); err != nil {
		t.Fatal(err)
	}
	held, err := localstate.Open(state) // as a registry that runs holds it
	if err != nil {
		t.Fatal(err)
	}
	before := snapshotFiles(t, state)
	code, stdout, stderr = guardedInit(t, spec, nil, v1, v2)
	refusedEmptied(t, spec, state, code, stdout, stderr)
	if !strings.Contains(stderr, "generation 1 ("+first.ID+", origin fresh)") {
		t.Errorf("the refusal does not name the generation the file saw:\n%s", stderr)
	}
	held.Close()
	if after := snapshotFiles(t, state); !bytes.Equal(before[0], after[0]) {
		t.Fatal("the refused init changed the state file")
	}

	// The registry that saw the store recovers it on its own.
	n, logs := quarantined(t, "--store", spec, "--state-file", state)
	if n != 4096 || !strings.Contains(logs, "store reset detected") {
		t.Fatalf("the registry on the emptied store: %v node IDs quarantined, want 4096:\n%s", n, logs)
	}
	code, stdout, stderr = guardedInit(t, spec, nil, v1, v2)
	if code != exitOK || !strings.Contains(stdout, "is initialised already") || !strings.Contains(stdout, "origin recovered") {
		t.Fatalf("after the recovery: exit %d\n%s%s", code, stdout, stderr)
	}
}

// Issue #30, on Redis as Compose runs it: two registries' state volumes; a new
// deployment is initialised, the registries run on it; Redis restarts without its
// data and init leaves it alone, naming the volume's file; a file of another Redis does
// not count, and a legacy file (no store recorded) that saw a generation does.
func TestInitUnlessSeenRedis(t *testing.T) {
	t.Run("emptied", func(t *testing.T) {
		const pw = "init-guard-redis-password"
		rs := redistest.Start(t, redistest.WithPassword(pw)) // no AOF: a restart loses everything
		v1, v2 := t.TempDir(), t.TempDir()
		if code, stdout, stderr := guardedInit(t, rs.URL(), nil, v1, v2); code != exitOK || !strings.Contains(stdout, "generation 1") {
			t.Fatalf("a new deployment: exit %d\n%s%s", code, stdout, stderr)
		}
		for _, v := range []string{v1, v2} {
			s, _ := startInProcess(t, []string{"--store", rs.URL(), "--state-file", filepath.Join(v, server.StateFileName),
				"--accept-lost-writes-on-redis-restart"}, bootstrapEnv)
			if s.base == "" {
				t.Fatalf("the registry did not start:\n%s", s.logs)
			}
			s.client(bootstrapKey).do("POST", "/v1/leases", stateRequester, 200)
			s.stop()
		}
		if code, stdout, stderr := guardedInit(t, rs.URL(), nil, v1, v2); code != exitOK || !strings.Contains(stdout, "initialised already") {
			t.Fatalf("the next start: exit %d\n%s%s", code, stdout, stderr)
		}
		rs.Restart(t)
		code, stdout, stderr := guardedInit(t, rs.URL(), nil, v1, v2)
		refusedEmptied(t, rs.URL(), filepath.Join(v1, server.StateFileName), code, stdout, stderr)
		if !strings.Contains(stderr, filepath.Join(v2, server.StateFileName)) {
			t.Errorf("the refusal names one of the two files that saw the store:\n%s", stderr)
		}
		if strings.Contains(stdout+stderr, pw) || !strings.Contains(stderr, "(redis://"+rs.Addr()+"/0 prefix ") {
			t.Errorf("the refusal names the store other than by its identity (no password):\n%s", stderr)
		}
	})

	t.Run("a registry that waited for init", func(t *testing.T) {
		rs := redistest.Start(t)
		v := t.TempDir()
		s, _ := startInProcess(t, []string{"--store", rs.URL(), "--state-file", filepath.Join(v, server.StateFileName),
			"--accept-lost-writes-on-redis-restart"}, bootstrapEnv)
		if s.base == "" {
			t.Fatalf("the registry did not start:\n%s", s.logs)
		}
		s.client(bootstrapKey).do("GET", "/readyz", "", 503)
		s.stop()
		code, stdout, stderr := guardedInit(t, rs.URL(), nil, filepath.Join(v, server.StateFileName)) // the FILE form
		if code != exitOK || !strings.Contains(stdout, "generation 1") || !strings.Contains(stderr, "saw no store generation") {
			t.Fatalf("a state file that saw no generation: exit %d\n%s%s", code, stdout, stderr)
		}
	})

	t.Run("another store's file", func(t *testing.T) {
		rs, other := redistest.Start(t), redistest.Start(t)
		initInProcess(t, other.URL())
		v := t.TempDir()
		s, _ := startInProcess(t, []string{"--store", other.URL(), "--state-file", filepath.Join(v, server.StateFileName),
			"--accept-lost-writes-on-redis-restart"}, bootstrapEnv)
		if s.base == "" {
			t.Fatalf("the registry did not start:\n%s", s.logs)
		}
		s.client(bootstrapKey).do("POST", "/v1/leases", stateRequester, 200)
		s.stop()
		code, stdout, stderr := guardedInit(t, rs.URL(), nil, v)
		if code != exitOK || !strings.Contains(stdout, "generation 1") || !strings.Contains(stderr, "belongs to another store") ||
			!strings.Contains(stderr, "redis://"+other.Addr()+"/0") {
			t.Fatalf("another store's file: exit %d, want 0 and a warning naming the other store\n%s%s", code, stdout, stderr)
		}
		// That registry then refuses this store's start with the file (issue #29).
		if _, code := startInProcess(t, []string{"--store", rs.URL(), "--state-file", filepath.Join(v, server.StateFileName),
			"--accept-lost-writes-on-redis-restart"}, bootstrapEnv); code != exitUsage {
			t.Fatalf("a registry on this store with the other's file: exit %d, want %d", code, exitUsage)
		}
	})

	t.Run("a legacy file that saw a generation", func(t *testing.T) {
		rs := redistest.Start(t)
		v := t.TempDir()
		legacy := filepath.Join(v, server.StateFileName)
		writeLegacyState(t, legacy, otherGeneration)
		code, stdout, stderr := guardedInit(t, rs.URL(), nil, v)
		refusedEmptied(t, rs.URL(), legacy, code, stdout, stderr)
		if !strings.Contains(stderr, "records no store") {
			t.Errorf("the refusal does not say the file records no store:\n%s", stderr)
		}
	})
}

// The paths fail closed: a missing one, one that cannot be listed, and a damaged
// state file stop init before the store changes; a state file under a name of its
// own is found by its content, other files are passed over; the environment takes
// a list; an initialised store reads no file.
func TestInitUnlessSeenPaths(t *testing.T) {
	dir := t.TempDir()
	spec := "bolt:" + filepath.Join(dir, "b.db")
	other := "bolt:" + filepath.Join(dir, "a.db")
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	// A real state file of this store that saw its generation, and one damaged.
	initInProcess(t, other)
	saw := filepath.Join(dir, "saw")
	runBolt(t, filepath.Join(dir, "a.db"), "--state-file", saw)
	seenSpec := other
	damaged := filepath.Join(dir, "damaged", server.StateFileName)
	if err := os.MkdirAll(filepath.Dir(damaged), 0o700); err != nil {
		t.Fatal(err)
	}
	b := snapshotFiles(t, saw)[0]
	b[30] ^= 0xff
	b[localstate.SlotSize+30] ^= 0xff
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"missing", []string{empty, filepath.Join(dir, "no-such-volume")}, "init --unless-seen " + filepath.Join(dir, "no-such-volume") + ": stat"},
		{"not a directory", []string{filepath.Join(notADir, "registry-state")}, "not a directory"},
		{"damaged", []string{filepath.Dir(damaged)}, "checksum mismatch"},
		{"not a state file", []string{notADir}, "not a readable state file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := guardedInit(t, spec, nil, c.paths...)
			if code != exitFail || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "nothing was changed") {
				t.Fatalf("exit %d, want %d and %q:\n%s%s", code, exitFail, c.want, stdout, stderr)
			}
			if specStatus(t, spec).Initialised {
				t.Fatal("the store was initialised")
			}
		})
	}
	if os.Geteuid() != 0 { // root lists any directory
		t.Run("unreadable", func(t *testing.T) {
			locked := filepath.Join(dir, "locked")
			if err := os.Mkdir(locked, 0o000); err != nil {
				t.Fatal(err)
			}
			if code, _, stderr := guardedInit(t, spec, nil, locked); code != exitFail || !strings.Contains(stderr, "permission denied") {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
		})
	}

	t.Run("found by its content", func(t *testing.T) {
		v := filepath.Join(dir, "custom")
		if err := os.Mkdir(v, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, content := range map[string][]byte{"notes.txt": []byte("IDK"), "x.db": make([]byte, 4096), "empty": nil} {
			if err := os.WriteFile(filepath.Join(v, name), content, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Mkdir(filepath.Join(v, "backups"), 0o700); err != nil {
			t.Fatal(err)
		}
		// Only unrelated files: a new deployment, for the other store too.
		fresh := "bolt:" + filepath.Join(dir, "fresh.db")
		if code, _, stderr := guardedInit(t, fresh, nil, v); code != exitOK || !strings.Contains(stderr, "stateFiles=0") {
			t.Fatalf("unrelated files: exit %d:\n%s", code, stderr)
		}
		// The state file that saw a.db, under a name of its own: a.db emptied is refused.
		if err := os.WriteFile(filepath.Join(v, "replica.state"), snapshotFiles(t, saw)[0], 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "a.db")); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := guardedInit(t, seenSpec, nil, v)
		refusedEmptied(t, seenSpec, filepath.Join(v, "replica.state"), code, stdout, stderr)
	})

	t.Run("environment", func(t *testing.T) {
		env := map[string]string{"IDKEEPER_UNLESS_SEEN": empty + "," + saw}
		code, stdout, stderr := runInProcess(context.Background(), []string{"init", "--store", seenSpec}, env)
		refusedEmptied(t, seenSpec, saw, code, stdout, stderr)
		env["IDKEEPER_UNLESS_SEEN"] = empty + ","
		if code, _, stderr := runInProcess(context.Background(), []string{"init", "--store", seenSpec}, env); code != exitUsage ||
			!strings.Contains(stderr, "IDKEEPER_UNLESS_SEEN") {
			t.Fatalf("an empty path in the list: exit %d:\n%s", code, stderr)
		}
	})

	t.Run("initialised store", func(t *testing.T) {
		initInProcess(t, spec)
		code, stdout, stderr := guardedInit(t, spec, nil, filepath.Dir(damaged), filepath.Join(dir, "no-such-volume"))
		if code != exitOK || !strings.Contains(stdout, "initialised already") {
			t.Fatalf("exit %d:\n%s%s", code, stdout, stderr)
		}
	})
}
