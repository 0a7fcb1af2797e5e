package idkeeper_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
)

// boltFiles opens bbolt files in one test directory on one fake clock.
type boltFiles struct {
	t   *testing.T
	dir string
	clk *fakeclock.Clock
	n   int
}

func newBoltFiles(t *testing.T, clk *fakeclock.Clock) *boltFiles {
	return &boltFiles{t: t, dir: t.TempDir(), clk: clk}
}

// open opens a new file, filled with content when it is not nil (an older copy).
func (b *boltFiles) open(content []byte) (*bolt.Store, string) {
	b.t.Helper()
	b.n++
	path := filepath.Join(b.dir, "idk"+string(rune('a'+b.n))+".db")
	if content != nil {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			b.t.Fatal(err)
		}
	}
	s, err := bolt.Open(path, bolt.Options{Clock: b.clk.Now})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { s.Close() })
	return s, path
}

// copyOf reads a bolt file: every write was committed and fsynced, and none runs
// while the test reads it, so the bytes are a consistent copy.
func (b *boltFiles) copyOf(path string) []byte {
	b.t.Helper()
	c, err := os.ReadFile(path)
	if err != nil {
		b.t.Fatal(err)
	}
	return c
}
