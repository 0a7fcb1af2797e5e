package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/localstate"
)

// A replica state file belongs to one store (issue #29): it records the store's
// identity (idkeeper.IdentifiedStore), and a file of another store is never taken
// for evidence that this one was reset. docs/operations.md ("The replica's own
// state") is the operator's account of these rules.

// defaultStateFile is where a server keeps its replica state when --state-file is
// not given: for the embedded store beside the bolt file and named after it
// (data/b.db: data/b.db.registry-state); for a shared store ./data/registry-state-
// and 12 hex digits of the SHA-256 of the store's identity, so that two stores
// never share a default file.
func defaultStateFile(spec, identity string) string {
	if path, ok := strings.CutPrefix(spec, "bolt:"); ok && path != "" {
		return path + "." + StateFileName
	}
	sum := sha256.Sum256([]byte(identity))
	return filepath.Join("data", StateFileName+"-"+hex.EncodeToString(sum[:6]))
}

// legacyStateFile is the default of the versions before issue #29, one file per
// folder: registry-state beside the bolt file, else ./data/registry-state.
func legacyStateFile(spec string) string {
	if path, ok := strings.CutPrefix(spec, "bolt:"); ok && path != "" {
		return filepath.Join(filepath.Dir(path), StateFileName)
	}
	return filepath.Join("data", StateFileName)
}

// stateFileOptions are what openReplicaState needs besides the store.
type stateFileOptions struct {
	Spec  string // the --store value
	Path  string // --state-file; empty: defaultStateFile, after migrating the legacy default
	Adopt bool   // --adopt-state-file: the file is this store's whatever it records
	Log   *slog.Logger
}

// openReplicaState opens the replica state file of store and makes sure it belongs
// to it. A new file is claimed for the store; a file that records the store is
// used as it is; a file that records another store is refused unless it saw the
// store's current generation (the same store under another address), and a file
// written before identities were recorded is adopted when it saw no generation or
// the current one. Refused: a *ConfigError naming --state-file and both stores,
// after which neither the store nor the file has changed. --adopt-state-file
// adopts any of them. Without --state-file the legacy default (legacyStateFile) is
// first moved to the new default by the same rules, when that does not exist yet;
// one in use by another process, or that records another store, is left alone.
func openReplicaState(ctx context.Context, store idkeeper.Store, o stateFileOptions) (*localstate.File, error) {
	id := StoreIdentity(store, o.Spec)
	path := o.Path
	if path == "" {
		path = defaultStateFile(o.Spec, id)
		if err := migrateLegacyState(ctx, store, id, path, legacyStateFile(o.Spec), o); err != nil {
			return nil, err
		}
	}
	f, err := localstate.Open(path)
	if err != nil {
		return nil, err
	}
	if err := claimState(ctx, f, store, id, o); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// claimState decides whether f belongs to the store of identity id (as
// openReplicaState says) and records it; the error is the refusal.
func claimState(ctx context.Context, f *localstate.File, store idkeeper.Store, id string, o stateFileOptions) error {
	if f.Created() {
		return f.Claim(ctx, id)
	}
	if f.BelongsTo(id) {
		return nil
	}
	seen, current, err := generations(ctx, f, store)
	if err != nil {
		return err
	}
	sameGeneration := !seen.IsZero() && seen.ID == current.ID
	switch {
	case f.Store() == "" && (seen.IsZero() || sameGeneration):
		o.Log.Info("the replica state file was written before it recorded its store; it saw no other generation "+
			"than this store's, so it is this store's from now on", "stateFile", f.Path(), "store", id)
	case f.Store() != "" && sameGeneration:
		o.Log.Warn("the replica state file recorded another store identity, but it saw this store's current generation: "+
			"the same store under another address; it records the new one from now on",
			"stateFile", f.Path(), "recorded", f.Store(), "store", id, "generation", current.ID)
	case o.Adopt:
		o.Log.Warn("--adopt-state-file: the replica state file is taken for this store's; a generation it saw "+
			"that the store no longer has is a reset, recovered as such",
			"stateFile", f.Path(), "recorded", f.Store(), "store", id, "seen", seen.ID, "current", current.ID)
	default:
		return refuseState(f.Path(), f.Store(), seen, id, current, o)
	}
	return f.Claim(ctx, id)
}

// generations returns the generation the state file saw and the store's current
// one (zero when it has none).
func generations(ctx context.Context, f *localstate.File, store idkeeper.Store) (seen, current idkeeper.Generation, err error) {
	st, err := f.Load(ctx)
	if err != nil {
		return seen, current, err
	}
	ss, err := store.Status(ctx)
	if err != nil {
		return seen, current, fmt.Errorf("read the store to tell whether the state file %s belongs to it: %w", f.Path(), err)
	}
	return st.Generation, ss.Generation, nil
}

// migrateLegacyState moves the legacy default state file to path (the new
// default) when path does not exist and the legacy file belongs to the store, by
// openReplicaState's rules.
func migrateLegacyState(ctx context.Context, store idkeeper.Store, id, path, legacy string, o stateFileOptions) error {
	if filepath.Clean(legacy) == filepath.Clean(path) {
		return nil
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil // it exists, or Open reports why it cannot be read
	}
	if _, err := os.Stat(legacy); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	old, err := localstate.Open(legacy)
	if errors.Is(err, localstate.ErrLocked) {
		o.Log.Info("the shared state file of earlier versions is in use by another process, so it is another store's; "+
			"this replica keeps its own", "legacyStateFile", legacy, "stateFile", path)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w; it is the default state file of earlier versions, which this store may have used: "+
			"start with --state-file %s to begin a new state file for it instead", err, path)
	}
	defer old.Close()
	if old.Store() != "" && !old.BelongsTo(id) {
		o.Log.Info("the shared state file of earlier versions belongs to another store; this replica keeps its own",
			"legacyStateFile", legacy, "recorded", old.Store(), "stateFile", path)
		return nil
	}
	if err := claimState(ctx, old, store, id, o); err != nil {
		return err
	}
	if err := os.Rename(legacy, path); err != nil {
		return fmt.Errorf("move the state file %s to %s: %w", legacy, path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	o.Log.Info("moved this store's replica state file to its own default path", "from", legacy, "to", path)
	return nil
}

// refuseState is the refusal of a state file that is not proved to be the store's.
func refuseState(path, recorded string, seen idkeeper.Generation, id string, current idkeeper.Generation, o stateFileOptions) error {
	fresh := defaultStateFile(o.Spec, id)
	if filepath.Clean(fresh) == filepath.Clean(path) {
		fresh = path + ".new"
	}
	if recorded == "" {
		return configErrorf("refusing to start: the state file %s (--state-file) was written before IdKeeper recorded which store "+
			"a state file belongs to, and it saw %s where this server's store %s has %s. It may be the state of another "+
			"store that shared its folder, or the evidence that this store was wiped or rolled back since; nothing was "+
			"changed. If it is another store's, leave it to that store and start this one with --state-file %s (a new "+
			"state file); if it is this store's, start with --state-file %s --adopt-state-file, and the reset is detected "+
			"and recovered (docs/operations.md, \"The replica's own state\")",
			path, DescribeGeneration(seen), id, DescribeGeneration(current), fresh, path)
	}
	return configErrorf("refusing to start: the state file %s (--state-file) belongs to another store: it records %s (it saw %s), "+
		"and this server's store is %s (which has %s). It is no evidence about this store, and nothing was changed. "+
		"Give this store its own state file with --state-file (e.g. %s); only if it is this store's state under an old "+
		"address, start with --state-file %s --adopt-state-file (docs/operations.md, \"The replica's own state\")",
		path, recorded, DescribeGeneration(seen), id, DescribeGeneration(current), fresh, path)
}

func DescribeGeneration(g idkeeper.Generation) string {
	if g.IsZero() {
		return "no generation"
	}
	return fmt.Sprintf("generation %d (%s, origin %s)", g.Number, g.ID, g.Origin)
}
