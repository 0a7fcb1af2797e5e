package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/bolt"
)

// Issue #29: backup import refuses a redacted backup (an operator's: no
// password or key hash) with a clear message, and never opens the store.
func TestBackupImportRefusesRedacted(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "idkeeper.db")
	initInProcess(t, "bolt:"+path)
	s, err := bolt.Open(path, bolt.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, err = backup.Export(ctx, s, &buf, backup.Source{Store: "bolt", TakenAt: time.Now(), Redacted: true})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "redacted.idkbackup")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshotOf(t, path)
	code, _, stderr := runInProcess(ctx, []string{"backup", "import", "--store", "bolt:" + path, "--in", file}, nil)
	if code != exitFail || !strings.Contains(stderr, "redacted") || !strings.Contains(stderr, "never restored") ||
		!strings.Contains(stderr, "nothing was written") {
		t.Fatalf("import of a redacted backup: %d %s", code, stderr)
	}
	if snapshotOf(t, path) != before {
		t.Fatal("a refused import changed the store")
	}
}
