package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/localstate"
	"github.com/idkeeper/idkeeper/server"
)

// The init guard (issue #30): `idkeeper init --unless-seen PATH …` initialises an
// empty store only when no replica state file at those paths saw a store
// generation of it, so that a deployment can run init on every start (Compose
// does, before its registries) without ever taking an emptied store for a new one
// (DESIGN §7: a store is initialised once; a registry that saw it recovers it when
// it finds it empty).
//
// The rules, for a store that is empty (on an initialised store init changes
// nothing, and the guard reads no file):
//
//   - Every PATH must exist: a missing one may be a state volume that is not
//     mounted, or a typo, and then nothing can be told; init fails and changes
//     nothing. A directory (a replica's state volume; empty for a replica that
//     never ran) stands for every regular file directly in it whose name holds
//     "registry-state" (every name the server gives its state file) or that
//     starts as a state file does; a file is one state file.
//   - A state file that cannot be read, or is damaged, fails closed: it may be
//     the one that saw the store.
//   - A state file saw the store when it records a generation (or a fencing
//     token) and it belongs to this store: it records this store's identity, or
//     none (a file from before issue #29, which may be this store's: fail
//     closed). Any one of them: init does not initialise the store, changes
//     nothing, warns naming the file and exits 0 — the registries that saw the
//     store recover it themselves when they start on it (quarantine, raised
//     watermarks), so a deployment's start (Compose's `up`) goes on and heals
//     instead of stopping at init.
//   - A state file that records another store's identity is no evidence about
//     this one (the rule of statefile.go): it never saw a generation of this
//     store, and DESIGN §7 asks only that a registry that saw one never meets a
//     store initialised anew. The registry holding it refuses it at start
//     (--state-file, "belongs to another store") unless its operator adopts it,
//     and an adopted file that saw another generation is a reset the registry
//     recovers: so it does not stop init, and init says it set it aside.
//   - A state file that saw no generation (the registry waited for init) and a
//     directory without state files do not count: a new deployment.

// registerUnlessSeen defines init's --unless-seen on fs and returns its values.
func registerUnlessSeen(fs *flag.FlagSet) *[]string {
	paths := new([]string)
	fs.Var(listFlag{v: paths, what: "path"}, "unless-seen", "initialise an empty store only if no replica state file here saw it: "+
		"a registry's state volume (DIR) or state file (FILE), which must exist; repeat it for every replica (docs/deploy.md)")
	return paths
}

// guardEmptyStore is the init guard: with no paths it allows everything; else, on
// the store s (opened from the --store value spec) initialised it allows (init
// then changes nothing), and on an empty one it decides by checkUnseen. seen is
// true when init must leave the store alone (a registry saw it); err is a state
// file that could not be judged.
func guardEmptyStore(ctx context.Context, s idkeeper.Store, spec string, paths []string, log *slog.Logger) (seen string, err error) {
	if len(paths) == 0 {
		return "", nil
	}
	st, err := s.Status(ctx)
	if err != nil {
		return "", fmt.Errorf("read the store: %w", err)
	}
	if st.Initialised {
		return "", nil
	}
	return checkUnseen(server.StoreIdentity(s, spec), paths, log)
}

// checkUnseen returns "" when no replica state file at paths saw a generation of
// the store of identity id, by the rules above, and logs what it read; else the
// message that init leaves the store alone, naming the files that saw it (logged
// as a warning too). An error is a path or file it could not judge.
func checkUnseen(id string, paths []string, log *slog.Logger) (string, error) {
	files, err := stateFilesAt(paths)
	if err != nil {
		return "", err
	}
	var saw []string
	for _, path := range files {
		st, store, err := localstate.Read(path)
		if err != nil {
			return "", fmt.Errorf("refusing to initialise the empty store (%s): %v. The replica state file %s (--unless-seen) may be "+
				"the one that saw this store, so nothing was changed (docs/operations.md, \"The replica's own state\")", id, err, path)
		}
		switch {
		case st.Generation.IsZero() && st.MaxToken == 0:
			log.Info("init guard: the replica state file saw no store generation", "stateFile", path)
		case store != "" && store != localstate.Abbrev(id):
			log.Warn("init guard: the replica state file belongs to another store, so it is no evidence about this one; "+
				"its registry refuses it at start unless it is adopted (--adopt-state-file)",
				"stateFile", path, "recorded", store, "store", id, "seen", server.DescribeGeneration(st.Generation))
		default:
			what := server.DescribeGeneration(st.Generation)
			if st.Generation.IsZero() {
				what = fmt.Sprintf("fencing token %d", st.MaxToken)
			}
			if store == "" {
				what += ", and records no store (written before state files did)"
			}
			saw = append(saw, fmt.Sprintf("%s (%s)", path, what))
		}
	}
	if len(saw) > 0 {
		msg := fmt.Sprintf("not initialising the store (%s): it is empty, but a registry of this deployment saw it: the replica "+
			"state file %s. The store was emptied or lost (a Redis that lost its data, a removed volume), it is not new, and "+
			"processes may still mint with its leases: it must never be initialised again. Nothing was changed: a registry "+
			"that saw it recovers it by itself when it starts (quarantine, raised watermarks; DESIGN §7, docs/deploy.md, "+
			"\"When the store was lost\"); only for a deployment that is really new, remove the state volumes too "+
			"(`docker compose down -v`)", id, strings.Join(saw, "; "))
		log.Warn(msg)
		return msg, nil
	}
	log.Info("init guard: no replica state file saw this store: a new deployment", "store", id, "stateFiles", len(files), "paths", len(paths))
	return "", nil
}

// stateFilesAt lists the state files the --unless-seen paths stand for, by the
// rules above, or fails naming the path it cannot read.
func stateFilesAt(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("init --unless-seen %s: %w; without it init cannot tell whether a registry saw the store "+
				"(a state volume not mounted, or a typo?), so nothing was changed", p, err)
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("init --unless-seen %s: %w; nothing was changed", p, err)
		}
		for _, e := range entries {
			path := filepath.Join(p, e.Name())
			if strings.Contains(e.Name(), server.StateFileName) {
				files = append(files, path)
				continue
			}
			if !e.Type().IsRegular() {
				continue
			}
			state, err := startsAsStateFile(path)
			if err != nil {
				return nil, fmt.Errorf("init --unless-seen %s: %w; it may be a replica state file, so nothing was changed", p, err)
			}
			if state {
				files = append(files, path)
			}
		}
	}
	return files, nil
}

// startsAsStateFile reports whether the regular file at path begins as a replica
// state file does.
func startsAsStateFile(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	b := make([]byte, localstate.MagicLen)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	return localstate.LooksLikeStateFile(b[:n]), nil
}
