package harness

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
	"github.com/idkeeper/idkeeper/internal/shortlease"
)

// LiveRegistry is a real registry (package server over a bbolt file) served on
// loopback in this process, with the scenario's short leases. Kill stops it (its
// HTTP server, the registry and the store); Restart serves the same file again.
type LiveRegistry struct {
	dir    string
	cfg    idkeeper.Config
	APIKey string
	URL    string
	tb     *procTB
}

// StartRegistry starts a registry whose bbolt file lives in dir.
func StartRegistry(dir string, r Registry) (*LiveRegistry, error) {
	cfg := idkeeper.Config{
		FirstLease:      time.Duration(r.FirstLease),
		LeaseDuration:   time.Duration(r.Lease),
		Grace:           idkeeper.NoGrace,
		CleanupInterval: time.Hour,
	}
	shortlease.Allow(&cfg)
	lr := &LiveRegistry{dir: dir, cfg: cfg}
	return lr, lr.start(false)
}

func (lr *LiveRegistry) start(again bool) error {
	tb := &procTB{dir: lr.dir}
	// registrytest reports a failure with Fatal, which procTB turns into a panic
	// of errFatal: recovered here, its message in tb.err.
	func() {
		defer func() {
			if r := recover(); r != nil && r != errFatal {
				panic(r)
			}
		}()
		o := registrytest.Options{Config: lr.cfg}
		if again {
			st, err := bolt.Open(filepath.Join(lr.dir, "idk.db"), bolt.Options{})
			if err != nil {
				tb.err = err
				return
			}
			o.Store, o.NoInit = st, true
		}
		srv := registrytest.Start(tb, o)
		lr.URL, lr.APIKey = srv.URL, srv.APIKey
	}()
	if tb.err != nil {
		tb.cleanup()
		return tb.err
	}
	lr.tb = tb
	return nil
}

// Kill stops the registry.
func (lr *LiveRegistry) Kill() {
	if lr.tb != nil {
		lr.tb.cleanup()
		lr.tb = nil
	}
}

// Restart starts the registry again on the same store, at a new URL.
func (lr *LiveRegistry) Restart() error {
	lr.Kill()
	return lr.start(true)
}

// procTB is the registrytest.TB of a registry that outlives no test: its bolt
// file goes where the harness says (so that a restart finds it) and its cleanups
// run at Kill.
type procTB struct {
	dir      string
	err      error
	cleanups []func()
}

var errFatal = errors.New("registrytest failed")

func (t *procTB) Helper()         {}
func (t *procTB) TempDir() string { return t.dir }
func (t *procTB) Cleanup(f func()) {
	t.cleanups = append(t.cleanups, f)
}
func (t *procTB) Fatal(args ...any) {
	t.err = fmt.Errorf("registry: %s", fmt.Sprint(args...))
	panic(errFatal)
}

func (t *procTB) cleanup() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
	t.cleanups = nil
}
