package admin

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// Backups through the admin API (issue #12, docs/backup.md): GET
// /admin/api/backup streams a backup of the live store (a full one for an admin,
// a redacted one, ?redacted=1, for an operator too: issue #29); POST
// /admin/api/restore/preview and POST /admin/api/restore (restore.go) replace
// the live store's whole state with a backup file (an admin's session and
// password), made safe with the registry's own lease duration and grace, never a
// client's.
//
// Why a restore needs no pause of the registry: LoadSnapshot is one atomic step
// of the store (bolt: the state is staged in its own bucket and swapped in by one
// write transaction, which bolt serialises with every other write; Redis: staged
// under another name and swapped in by one script), and every guarded write of a registry (a grant, a renewal, a
// reclaim) is one atomic step too that checks, inside it, that the store still
// holds the generation the registry adopted. So each such write runs wholly
// before the load or wholly after it. One before it is replaced with the rest of
// the old state: a lease it granted is covered by the quarantine of every node ID
// free in the backup (until the plan's time + lease duration + grace) and by its
// holder's receipt. One after it finds the new generation, fails its guard, and
// the registry recovers the store as from a reset first (DESIGN §7): every node ID
// quarantined and every watermark floor raised to that recovery's time + lease
// duration + grace, which also covers a lease granted between the plan's time
// and the load, however long the load took. Every replica that can grant has
// adopted a generation, so every one of them meets the new generation before its
// next grant; the probe meets it within seconds without one.

// Defaults of the backup routes' Config fields.
const (
	DefaultMaxRestoreBytes = 1 << 30 // 1 GiB
	DefaultBackupTimeout   = time.Hour
)

// Media types of a backup file.
const (
	BackupContentType   = "application/x-ndjson" // a plain backup: one JSON object a line
	BackupGzipType      = "application/gzip"     // a gzip-compressed backup (?gzip=1)
	BackupFileExtension = ".idkbackup"
)

// streamed is a handler's answer when it wrote the response itself.
type streamed struct{}

// restoreState keeps the restores of one Handler: one runs at a time, and the
// last one is remembered for the store's health.
type restoreState struct {
	run  sync.Mutex
	last atomic.Pointer[lastRestore]

	mu     sync.Mutex
	staged map[string]*stagedRestore // the previews awaiting confirmation, by ID
}

// lastRestore is what the store's health shows of the last restore.
type lastRestore struct {
	At, TakenAt       time.Time
	Actor, SHA256     string
	Bytes             int64
	Store             string // the store the backup was taken from
	From              uint64 // the backup's generation number
	Counts            backup.Counts
	Generation        uint64 // the store's afterwards
	Fence             uint64
	LeaseDuration     time.Duration
	Grace             time.Duration
	Until             time.Time
	Quarantined, Kept backup.NodeRanges
	Live              int
}

// snapshots returns the store the backup routes work on.
func (h *Handler) snapshots() (snapshot.Store, backup.StatusReader, error) {
	ss := h.cfg.Snapshots
	if ss == nil {
		return nil, nil, protocol.Errorf(protocol.CodeNotFound, "this server offers no backups of its store through the admin API")
	}
	sr, ok := ss.(backup.StatusReader)
	if !ok {
		return nil, nil, fmt.Errorf("admin: the snapshot store %T has no Status", ss)
	}
	return ss, sr, nil
}

// backupContext is the context of an export or a restore: the request's values
// without its deadline (Config.Timeout is for short requests) and with
// Config.BackupTimeout instead; the connection's read and write deadlines are
// moved as far.
func (h *Handler) backupContext(w http.ResponseWriter, r *http.Request) (context.Context, context.CancelFunc) {
	d := h.cfg.BackupTimeout
	if d <= 0 {
		d = DefaultBackupTimeout
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(d)) // ErrNotSupported: nothing to move
	_ = rc.SetWriteDeadline(time.Now().Add(d))
	return context.WithTimeout(context.WithoutCancel(r.Context()), d)
}

// exportBackup streams a backup of the live store (backup.Export): one
// consistent view, every record checked as an import will check it. A full
// backup is an admin's (403 FORBIDDEN for anyone else); ?redacted=1 makes it
// redacted (backup.Source.Redacted: no key hash, password hash or webhook URL;
// it never restores), named …-redacted.idkbackup, for an operator too. The file is
// named idkeeper-GENERATION-TIME.idkbackup in Content-Disposition. ?gzip=1 makes
// the file itself gzip-compressed (application/gzip, name ….idkbackup.gz);
// without it the file is plain (application/x-ndjson) and travels gzip-encoded
// (Content-Encoding: gzip) when the client accepts it. A failure before the
// first byte is a problem+json answer; after it, the connection is cut, so the
// client never takes a file without its trailer for a whole one.
func (h *Handler) exportBackup(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	ss, sr, err := h.snapshots()
	if err != nil {
		return nil, err
	}
	fileGzip, redacted := false, false
	for name, vs := range r.URL.Query() {
		if name != "gzip" && name != "redacted" || len(vs) != 1 {
			return nil, protocol.Invalidf(name, "GET %sbackup takes the query parameters gzip=1 and redacted=1", APIPrefix)
		}
		v, err := strconv.ParseBool(vs[0])
		if err != nil {
			return nil, protocol.Invalidf(name, "%s=%q: want 1 or 0", name, vs[0])
		}
		if name == "gzip" {
			fileGzip = v
		} else {
			redacted = v
		}
	}
	if !redacted && !p.role.AtLeast(account.RoleAdmin) {
		return nil, protocol.Errorf(protocol.CodeForbidden, "a full backup holds every password hash, API key hash and "+
			"webhook URL: only an admin downloads one; %s has the role %s: ask for a redacted one (GET %sbackup?redacted=1)",
			p.actor, p.role, APIPrefix)
	}
	ctx, cancel := h.backupContext(w, r)
	defer cancel()
	st, err := sr.Status(ctx)
	switch {
	case err != nil:
		return nil, storeErr(err)
	case !st.Initialised:
		return nil, idkeeper.ErrNotInitialised
	}
	now := h.reg.Now()
	kind := ""
	if redacted {
		kind = "-redacted"
	}
	name := fmt.Sprintf("idkeeper-%d-%s%s%s", st.Generation.Number, now.UTC().Format("20060102T150405Z"), kind, BackupFileExtension)
	ctype, encode := BackupContentType, !fileGzip && acceptsGzip(r)
	if fileGzip {
		ctype, name = BackupGzipType, name+".gz"
	}
	out := &lazyWriter{w: w, start: func() {
		hd := w.Header()
		hd.Set("Content-Type", ctype)
		hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
		hd.Set("Cache-Control", "no-store")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Add("Vary", "Accept-Encoding")
		if encode {
			hd.Set("Content-Encoding", "gzip")
		}
		w.WriteHeader(http.StatusOK)
	}}
	var dst io.Writer = out
	var zw *gzip.Writer
	if fileGzip || encode {
		zw = gzip.NewWriter(out)
		dst = zw
	}
	sum, err := backup.Export(ctx, ss, dst, backup.Source{Store: h.snapshotKind(), TakenAt: now, Redacted: redacted})
	if err == nil && zw != nil {
		err = zw.Close()
	}
	if err != nil && !out.started {
		var e *idkeeper.Error
		if errors.As(err, &e) {
			return nil, e
		}
		return nil, idkeeper.Unavailable(fmt.Errorf("export the store: %w", err))
	}
	if err != nil {
		h.log.Error("backup export failed after its first bytes: the connection is cut", "actor", p.actor, "err", err)
		panic(http.ErrAbortHandler)
	}
	h.log.Info("backup exported through the admin API", "actor", p.actor, "file", name, "redacted", redacted, "records", sum.Counts.Records(),
		"bytes", sum.Bytes, "sha256", sum.SHA256)
	return streamed{}, nil
}

func (h *Handler) snapshotKind() string {
	if h.cfg.SnapshotKind == "" {
		return "store"
	}
	return h.cfg.SnapshotKind
}

// lazyWriter sends the response's headers at its first Write: until then a
// failure can still be answered as problem+json.
type lazyWriter struct {
	w       io.Writer
	start   func()
	started bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.start()
	}
	return l.w.Write(p)
}

// checkBackupType accepts a restore's body as a file: no Content-Type, or
// application/octet-stream, application/x-ndjson, application/gzip.
func checkBackupType(ct string) error {
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case err != nil:
	case mt == "application/octet-stream", mt == BackupContentType, mt == BackupGzipType, mt == "application/x-gzip":
		return nil
	}
	return protocol.Errorf(protocol.CodeUnsupportedMediaType, "Content-Type %q: send the backup file as it is, "+
		"as application/octet-stream", ct)
}

func restoreTooLarge(limit int64) error {
	return protocol.Errorf(protocol.CodeBodyTooLarge, "the backup is larger than this server's limit of %d bytes; "+
		"nothing was written", limit)
}

// limitedBody notes when the request body went over its limit.
type limitedBody struct {
	r    io.Reader
	over bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		b.over = true
	}
	return n, err
}

// spoolWriter tells the failures of the spool from those of the request body.
type spoolWriter struct{ w io.Writer }

func (s spoolWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		err = spoolError{err}
	}
	return n, err
}

type spoolError struct{ err error }

func (e spoolError) Error() string { return "spool the backup: " + e.err.Error() }
func (e spoolError) Unwrap() error { return e.err }

// restoreRefused is the answer to a restore that failed with err: nothing was
// written.
func restoreRefused(err error, limit int64) error {
	var (
		fe  *backup.FormatError
		mbe *http.MaxBytesError
		se  spoolError
		e   *idkeeper.Error
	)
	switch {
	case errors.As(err, &mbe):
		return restoreTooLarge(limit)
	case errors.As(err, &se):
		return idkeeper.Unavailable(err)
	case errors.As(err, &fe):
		return protocol.Invalidf("body", "the backup was refused: %v; nothing was written", fe)
	case errors.As(err, &e):
		return e
	case errors.Is(err, context.DeadlineExceeded):
		return idkeeper.Unavailable(fmt.Errorf("the restore took too long; nothing was written: %w", err))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, http.ErrBodyReadAfterClose):
		return protocol.Invalidf("body", "the request body could not be read whole: %v; nothing was written", err)
	}
	var rd interface{ Timeout() bool }
	if errors.As(err, &rd) && rd.Timeout() {
		return protocol.Invalidf("body", "the request body could not be read in time: %v; nothing was written", err)
	}
	return idkeeper.Unavailable(fmt.Errorf("restore the backup (nothing was written): %w", err))
}

// wire is the restore as the API shows it.
func (lr *lastRestore) wire() *wire.Restore {
	c := lr.Counts
	return &wire.Restore{At: wire.FormatTime(lr.At), Actor: lr.Actor, SHA256: lr.SHA256, Bytes: lr.Bytes,
		Backup:     wire.RestoreBackup{TakenAt: wire.FormatTime(lr.TakenAt), Store: lr.Store, Generation: lr.From},
		Records:    wire.RestoreRecords{Nodes: c.Nodes, Leases: c.Leases, Keys: c.Keys, Users: c.Users, Allow: c.Allow, Audit: c.Audit},
		Generation: lr.Generation, FencingCounter: lr.Fence, LeaseDurationMs: lr.LeaseDuration.Milliseconds(),
		GraceMs: lr.Grace.Milliseconds(), QuarantineEnd: wire.FormatTime(lr.Until),
		Quarantined: nodesWire(lr.Quarantined), Kept: nodesWire(lr.Kept), Live: lr.Live}
}

func nodesWire(rs backup.NodeRanges) wire.RestoreNodes {
	if len(rs) == 0 {
		return wire.RestoreNodes{}
	}
	return wire.RestoreNodes{Nodes: rs.String(), Count: rs.Count()}
}

// detail is the restore as the audit log's entry tells it (cut at
// audit.MaxTextLen).
func (lr *lastRestore) detail() string {
	return fmt.Sprintf("restored %s (sha256 %s, taken %s on %s, generation #%d): the store's generation is now #%d; "+
		"node IDs %s quarantined until %s; %d leases kept (node IDs %s)", lr.Counts, lr.SHA256,
		wire.FormatTime(lr.TakenAt), lr.Store, lr.From, lr.Generation, shortRanges(lr.Quarantined), wire.FormatTime(lr.Until),
		lr.Kept.Count(), shortRanges(lr.Kept))
}

// QuarantinedShort and KeptShort are the node IDs for the store page.
func (lr *lastRestore) QuarantinedShort() string { return shortRanges(lr.Quarantined) }
func (lr *lastRestore) KeptShort() string        { return shortRanges(lr.Kept) }

// shortRanges is rs as ranges, the first 12 of them and how many more; "none"
// when empty.
func shortRanges(rs backup.NodeRanges) string {
	const most = 12
	if len(rs) <= most {
		return rs.String()
	}
	return fmt.Sprintf("%s,… (%d more ranges)", rs[:most], len(rs)-most)
}
