package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper/internal/plural"
	"github.com/idkeeper/idkeeper/server"
	"github.com/idkeeper/idkeeper/snapshot"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/shortlease"
)

const backupUsage = `Usage:
  idkeeper backup export --out FILE [--store … | --server URL]
  idkeeper backup import --in FILE [--lease-duration 48h] [--cleanup-grace 10m] [--store … | --server URL]

export writes the store's whole durable state — node IDs with their leases,
watermarks and quarantines, the fencing counter, API keys (hashes only), users
(password hashes only), the IP allow-list and the audit log — to FILE, a
versioned, store-neutral file (docs/backup.md). It writes FILE.tmp, syncs it to
disk and renames it: FILE is never a half-written file. A FILE ending in .gz is
compressed.

import replaces the store's whole durable state with FILE's, all or nothing: a
damaged, truncated or newer-format file is refused and nothing is written (the
file is checked whole before the store is touched). The restored state is made
safe: every node ID free in the backup stays quarantined until import time +
lease duration + grace, every watermark is raised to that time, leases in the
backup keep their expiry and their holders renew them with their receipts, the
fencing counter resumes above every token the backup or the store knew, and the
store gets a new generation, so every server that ran on it treats the import as
a store reset. --lease-duration and --cleanup-grace must be the servers' (the
same flags, or IDKEEPER_LEASE_DURATION and IDKEEPER_CLEANUP_GRACE): they bound how
long a process that got a node ID after the backup was taken may still mint.

Where: --store works offline on a store (bolt:PATH, redis://…): stop the
servers first (a bolt file held by a running server is locked). export --server
URL works through a running registry server's admin API (GET /admin/api/backup:
a full backup) with an admin API key from IDKEEPER_ADMIN_API_KEY,
IDKEEPER_ADMIN_API_KEY_FILE or --admin-api-key-file; --server-ca-file trusts the
CA of an https:// server; it checks the downloaded file whole before it renames
it. import --server is refused: a restore through a server takes an admin's
login and password (the admin web's Backups page). A redacted backup (an
operator's) is refused by import: it holds no password or key hash. Give --store
or --server.
`

// runBackup is the backup command: export, import.
func runBackup(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	sub, rest, done, err := subcommand("backup", backupUsage, []string{"export", "import"}, args, stdout, stderr)
	if done || err != nil {
		return err
	}
	if sub == "export" {
		return runBackupExport(ctx, rest, env, stdout, stderr)
	}
	return runBackupImport(ctx, rest, env, stdout, stderr)
}

// openSnapshotStore opens the store of sf for a backup command.
func openSnapshotStore(ctx context.Context, sf *keyStoreFlags, sub string, stderr io.Writer) (idkeeper.Store, snapshot.Store, error) {
	s, err := sf.open(ctx, stderr)
	if errors.Is(err, bolt.ErrLocked) {
		return nil, nil, fmt.Errorf("%w; to run backup %s while the server runs, give --server URL and an admin API key "+
			"(see backup -h), or stop the server first", err, sub)
	}
	if err != nil {
		return nil, nil, err
	}
	ss, ok := s.(snapshot.Store)
	if !ok {
		s.Close()
		return nil, nil, fmt.Errorf("the store %s cannot be backed up (%T has no snapshots)", server.RedactURL(sf.store), s)
	}
	return s, ss, nil
}

func runBackupExport(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	fs := newFlagSet("backup export", stderr)
	var kf keyFlags
	kf.register(fs)
	sf := &kf.keyStoreFlags
	var out string
	fs.StringVar(&out, "out", "", "the backup file to write (required); FILE.gz is compressed")
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if out == "" {
		return usagef("backup export: --out FILE is required")
	}
	if kf.server != "" {
		return exportViaServer(ctx, &kf, out, stdout, stderr)
	}
	s, ss, err := openSnapshotStore(ctx, sf, "export", stderr)
	if err != nil {
		return err
	}
	defer s.Close()

	tmp := out + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("backup export: %w", err)
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	var w io.Writer = bw
	var zw *gzip.Writer
	if strings.HasSuffix(out, ".gz") {
		zw = gzip.NewWriter(bw)
		w = zw
	}
	p := newProgress(stderr, "export")
	sum, err := backup.Export(ctx, ss, w, backup.Source{Store: server.StoreKind(sf.store), TakenAt: time.Now()}, backup.WithProgress(p.update))
	p.done()
	if err == nil && zw != nil {
		err = zw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("backup export: %w (nothing written to %s)", err, out)
	}
	syncDir(filepath.Dir(out))
	size := sum.Bytes
	if st, err := os.Stat(out); err == nil {
		size = st.Size()
	}
	m := sum.Header.Meta
	fmt.Fprintf(stdout, "exported %s\n  from %s, generation #%d (%s), fencing counter %d\n  to %s: %d bytes (content %d bytes, sha256 %s)\n",
		sum.Counts, server.StoreKind(sf.store), m.Generation.Number, m.Generation.Origin, m.Fence, out, size, sum.Bytes, sum.SHA256)
	return nil
}

// syncDir makes a rename in dir durable; a failure only costs that guarantee.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

func runBackupImport(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	fs := newFlagSet("backup import", stderr)
	var kf keyFlags
	kf.register(fs)
	sf := &kf.keyStoreFlags
	var in string
	var lease, grace time.Duration
	fs.StringVar(&in, "in", "", "the backup file to import (required)")
	fs.DurationVar(&lease, "lease-duration", idkeeper.DefaultLeaseDuration, "the servers' --lease-duration: the quarantine lasts it + grace")
	fs.DurationVar(&grace, "cleanup-grace", idkeeper.DefaultGrace, "the servers' --cleanup-grace")
	// Hidden, test only: the fault-injection suite imports into servers that run
	// with --unsafe-short-leases (internal/harness/chaos, scenario restore-old-backup).
	var unsafe unsafeFlags
	unsafe.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if in == "" {
		return usagef("backup import: --in FILE is required")
	}
	var opts []backup.Option
	if unsafe.shortLeases {
		opts = append(opts, shortlease.ImportOption().(backup.Option))
		fmt.Fprintln(stderr, "--unsafe-short-leases is set: lease durations of seconds are allowed; for fault-injection tests only")
	}
	if err := checkImportDurations(lease, grace, unsafe.shortLeases); err != nil {
		return err
	}
	f, err := os.Open(in)
	if err != nil {
		return fmt.Errorf("backup import: %w", err)
	}
	defer f.Close()
	// The whole file is checked before the store is opened: a damaged one never
	// gets near it (and the load is all or nothing anyway).
	p := newProgress(stderr, "check")
	checked, err := backup.Verify(bufio.NewReaderSize(f, 256<<10), backup.WithProgress(p.update))
	p.done()
	if err == nil {
		err = backup.CheckRestorable(checked.Header) // a redacted backup never opens the store
	}
	if err != nil {
		return fmt.Errorf("backup import: %s refused: %w; nothing was written", in, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("backup import: %w", err)
	}
	if kf.server != "" {
		if kf.storeFlag.argv || kf.storeFlag.file != "" {
			return usagef("give --store or --server, not both")
		}
		return errImportViaServer
	}
	// A restore may go to a new bolt file (a move from Redis to bolt): the
	// import writes a whole state there, not an empty store to wait on.
	sf.create = true
	s, ss, err := openSnapshotStore(ctx, sf, "import", stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	plan, err := backup.PlanFor(ctx, s, time.Now(), lease, grace, opts...)
	if err != nil {
		return fmt.Errorf("backup import: %w; nothing was written", err)
	}
	p = newProgress(stderr, "import")
	sum, err := backup.Import(ctx, ss, bufio.NewReaderSize(f, 256<<10), plan, append(opts, backup.WithProgress(p.update))...)
	p.done()
	if err != nil {
		return fmt.Errorf("backup import: %s: %w; nothing was written", in, err)
	}
	h := sum.Header
	fmt.Fprintf(stdout, "imported %s\n  from %s (taken %s on %s, generation #%d)\n  the store's generation is now #%d (recovered), its fencing counter %d\n",
		sum.Counts, in, h.TakenAt.Format(time.RFC3339), h.Store, h.Meta.Generation.Number, sum.Generation.Number, sum.Fence)
	until := sum.Until.UTC().Format(time.RFC3339)
	if n := sum.Quarantined.Count(); n > 0 {
		fmt.Fprintf(stdout, "node IDs %s quarantined until %s", shortRanges(sum.Quarantined), until)
	} else {
		fmt.Fprintf(stdout, "no free node IDs to quarantine")
	}
	fmt.Fprintf(stdout, "; %s kept for their holders", plural.N(sum.Kept.Count(), "lease", "leases"))
	if sum.Kept.Count() > 0 {
		fmt.Fprintf(stdout, " (node IDs %s, %d not yet expired; each quarantined until %s when freed)", shortRanges(sum.Kept), sum.Live, until)
	}
	fmt.Fprintf(stdout, "\nstart the servers with --lease-duration %v --cleanup-grace %v, the values this import assumed\n", lease, grace)
	return nil
}

// checkImportDurations refuses a lease duration or grace no server can have;
// short: a server with --unsafe-short-leases (leases down to 1 s).
func checkImportDurations(lease, grace time.Duration, short bool) error {
	minLease := idkeeper.MinFirstLease
	if short {
		minLease = time.Second
	}
	if lease < minLease || lease > idkeeper.MaxLeaseDuration {
		return usageError{&idkeeper.RangeError{Setting: "lease-duration", Value: lease.String(), Min: minLease.String(), Max: idkeeper.MaxLeaseDuration.String()}}
	}
	if grace < 0 || grace > idkeeper.MaxGrace {
		return usageError{&idkeeper.RangeError{Setting: "cleanup-grace", Value: grace.String(), Min: "0s", Max: idkeeper.MaxGrace.String()}}
	}
	return nil
}

// shortRanges is rs, at most 12 ranges of it and how many more.
func shortRanges(rs backup.NodeRanges) string {
	const most = 12
	if len(rs) <= most {
		return rs.String()
	}
	return fmt.Sprintf("%s,… (%d more ranges)", rs[:most], len(rs)-most)
}

// progress prints "verb: N records" over itself on a terminal, at most ten times
// a second; it prints nothing when the output is no terminal.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	verb    string
	last    time.Time
	n       int
	printed bool
}

func newProgress(w io.Writer, verb string) *progress {
	f, ok := w.(*os.File)
	if !ok {
		return &progress{}
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return &progress{}
	}
	return &progress{w: w, verb: verb}
}

func (p *progress) update(n int) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n = n
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond {
		p.last = now
		fmt.Fprintf(p.w, "\r%s: %s", p.verb, plural.N(n, "record", "records"))
		p.printed = true
	}
}

func (p *progress) done() {
	if p.w == nil || !p.printed {
		return
	}
	fmt.Fprintf(p.w, "\r%s: %s\n", p.verb, plural.N(p.n, "record", "records"))
}
