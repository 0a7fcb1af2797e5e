package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The hidden --unsafe-short-leases of backup import (the chaos suite's scenario
// restore-old-backup imports into servers that run leases of seconds): a lease
// duration of seconds is refused without it and taken with it, per call, and the
// flag stays out of the usage.
func TestBackupImportShortLeases(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := "bolt:" + filepath.Join(dir, "src.db")
	initInProcess(t, src)
	file := filepath.Join(dir, "b.idk")
	if code, out, stderr := runInProcess(ctx, []string{"backup", "export", "--store", src, "--out", file}, nil); code != exitOK {
		t.Fatalf("export: %d\n%s\n%s", code, out, stderr)
	}
	dst := "bolt:" + filepath.Join(dir, "dst.db")
	short := []string{"backup", "import", "--store", dst, "--in", file, "--lease-duration", "3s", "--cleanup-grace", "1s"}
	if code, _, stderr := runInProcess(ctx, short, nil); code != exitUsage || !strings.Contains(stderr, "lease-duration = 3s is outside its range") {
		t.Fatalf("without the flag: %d %s", code, stderr)
	}
	start := time.Now()
	code, out, stderr := runInProcess(ctx, append(short[:len(short):len(short)], "--unsafe-short-leases"), nil)
	m := regexp.MustCompile(`quarantined until (\S+);`).FindStringSubmatch(out)
	if code != exitOK || m == nil || !strings.Contains(out, "--lease-duration 3s --cleanup-grace 1s") ||
		!strings.Contains(stderr, "for fault-injection tests only") {
		t.Fatalf("with the flag: %d\n%s\n%s", code, out, stderr)
	}
	if until, err := time.Parse(time.RFC3339, m[1]); err != nil || until.Before(start.Add(3*time.Second)) || until.After(start.Add(time.Minute)) {
		t.Fatalf("quarantined until %s, want about %v", m[1], start.Add(4*time.Second))
	}
	// The option was per call: the next import without the flag is refused again.
	if code, _, _ := runInProcess(ctx, short, nil); code != exitUsage {
		t.Fatalf("a later import without the flag: %d", code)
	}
	if code, _, _ := runInProcess(ctx, []string{"backup", "import", "--store", dst, "--in", file, "--unsafe-short-leases", "--lease-duration", "500ms"}, nil); code != exitUsage {
		t.Fatalf("a lease of 500ms with the flag: %d", code)
	}
	_, _, usage := runInProcess(ctx, []string{"backup", "import", "-h"}, nil)
	if strings.Contains(usage, "unsafe") || !strings.Contains(usage, "lease-duration") {
		t.Fatalf("backup import -h shows the hidden flag, or no flags:\n%s", usage)
	}
}
