package admin

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/internal/jsonbody"
	"github.com/idkeeper/idkeeper/internal/shortlease"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// A restore in two steps (issue #29, docs/backup.md "Restore through the
// server"). A restore replaces every account, password hash, key and the audit
// log, and quarantines node IDs for a lease and a grace: no session alone, and
// no key whatever its role, may start one. POST /admin/api/restore/preview takes
// the file from an admin's session, checks it whole, keeps it on this server
// (RestorePreviewTTL) and answers what a restore would replace and quarantine;
// nothing is written. POST /admin/api/restore then applies that preview, and
// only it — named by its ID and its file's checksum, so no other file can be
// swapped in — when the same admin gives their password again
// (Accounts.ConfirmPassword, under the login throttle). Both steps are audited
// (backup.restore.preview, backup.restore; a refused confirmation
// backup.restore.refused). A preview is this server's: behind a load balancer,
// the confirmation must reach the same replica (or preview again there).

// RestorePreviewTTL is how long a preview may be confirmed.
const RestorePreviewTTL = 15 * time.Minute

// The audit actions of a restore's steps, besides audit.BackupRestore.
const (
	AuditRestorePreview = "backup.restore.preview"
	AuditRestoreRefused = "backup.restore.refused"
)

var restoreConfirmMembers = wire.Members(wire.RestoreConfirm{})

// stagedRestore is one preview awaiting its confirmation: the checked file,
// spooled on this server, and what it was previewed as.
type stagedRestore struct {
	user     string // the admin who previewed it
	path     string
	expires  time.Time
	sum      backup.Summary
	replaces backup.Contents // the live store's at the preview
	preview  wire.RestorePreview
}

// drop removes the spooled file.
func (s *stagedRestore) drop() { _ = os.Remove(s.path) }

// sweep drops the previews expired at now; the caller holds mu.
func (rs *restoreState) sweep(now time.Time) {
	for id, s := range rs.staged {
		if !now.Before(s.expires) {
			s.drop()
			delete(rs.staged, id)
		}
	}
}

// stage keeps s as id, in place of any earlier preview of the same user. Its file
// is removed once it expires by clock, even if nothing else comes to sweep.
func (rs *restoreState) stage(id string, s *stagedRestore, now time.Time, clock func() time.Time) {
	time.AfterFunc(RestorePreviewTTL+time.Second, func() {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		rs.sweep(clock())
	})
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.sweep(now)
	if rs.staged == nil {
		rs.staged = map[string]*stagedRestore{}
	}
	for old, o := range rs.staged {
		if o.user == s.user {
			o.drop()
			delete(rs.staged, old)
		}
	}
	rs.staged[id] = s
}

// take returns the preview id of user at now and, when sum is its checksum,
// takes it out (a preview is confirmed once). Errors: NOT_FOUND for an unknown,
// expired or another user's preview; CONFLICT for another checksum.
func (rs *restoreState) take(id, user, sum string, now time.Time) (*stagedRestore, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.sweep(now)
	s, ok := rs.staged[id]
	if !ok || s.user != user {
		return nil, protocol.Errorf(protocol.CodeNotFound, "there is no restore preview %q of %s on this server (previews "+
			"last %s and are kept by the server that made them): preview the backup again", id, user, RestorePreviewTTL)
	}
	if sum != s.sum.SHA256 {
		return nil, protocol.Errorf(protocol.CodeConflict, "the preview %s is of the backup with sha256 %s, not %q: "+
			"nothing was written; preview the file you mean to restore", id, s.sum.SHA256, sum)
	}
	delete(rs.staged, id)
	return s, nil
}

// lowerHex reports whether s is n lower-case hex digits.
func lowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, r := range s {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

// spoolBackup checks the backup in r's body whole while it spools it to a
// temporary file of Config.RestoreDir, and returns the file (at its start), its
// summary and its contents. A damaged, truncated, newer-format, foreign or
// redacted file (400 INVALID_REQUEST) or one over Config.MaxRestoreBytes (413
// BODY_TOO_LARGE) leaves no file. The caller closes and removes the file.
func (h *Handler) spoolBackup(w http.ResponseWriter, r *http.Request) (*os.File, backup.Summary, backup.Contents, error) {
	var none backup.Summary
	if err := checkBackupType(r.Header.Get("Content-Type")); err != nil {
		return nil, none, backup.Contents{}, err
	}
	limit := h.cfg.MaxRestoreBytes
	if limit <= 0 {
		limit = DefaultMaxRestoreBytes
	}
	if r.ContentLength > limit {
		return nil, none, backup.Contents{}, restoreTooLarge(limit)
	}
	f, err := os.CreateTemp(h.cfg.RestoreDir, "idkeeper-restore-*"+BackupFileExtension)
	if err != nil {
		return nil, none, backup.Contents{}, idkeeper.Unavailable(fmt.Errorf("spool the backup: %w", err))
	}
	fail := func(err error) (*os.File, backup.Summary, backup.Contents, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, none, backup.Contents{}, err
	}
	spool := bufio.NewWriterSize(f, 256<<10)
	body := &limitedBody{r: http.MaxBytesReader(w, r.Body, limit)}
	sum, contents, err := backup.Inspect(io.TeeReader(body, spoolWriter{spool}))
	if err == nil {
		// Anything after the end would have failed the check; drain what a
		// compressed stream may leave unread, so the spool is the whole body.
		_, err = io.Copy(spoolWriter{spool}, body)
	}
	if err == nil {
		if err = spool.Flush(); err != nil {
			err = spoolError{err}
		}
	}
	if err == nil {
		err = backup.CheckRestorable(sum.Header)
	}
	switch {
	case err != nil && body.over:
		// Whatever the check made of the cut-off body.
		return fail(restoreTooLarge(limit))
	case err != nil:
		return fail(restoreRefused(err, limit))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(idkeeper.Unavailable(fmt.Errorf("spool the backup: %w", err)))
	}
	return f, sum, contents, nil
}

// previewRestore checks the backup in the request body (the file as it is,
// plain or gzip-compressed; no JSON), keeps it on this server for
// RestorePreviewTTL in place of the caller's earlier preview, and answers what a
// restore of it would replace and quarantine (wire.RestorePreview); it writes
// nothing to the store; a store never initialised has nothing to replace.
// Errors: spoolBackup's; the store's when the live store cannot be read.
func (h *Handler) previewRestore(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	ss, _, err := h.snapshots()
	if err != nil {
		return nil, err
	}
	ctx, cancel := h.backupContext(w, r)
	defer cancel()
	f, sum, with, err := h.spoolBackup(w, r)
	if err != nil {
		return nil, err
	}
	f.Close()
	keep := false
	defer func() {
		if !keep {
			os.Remove(f.Name())
		}
	}()
	live, err := backup.Tally(ctx, ss)
	if protocol.ErrorCode(err) == protocol.CodeStoreNotInitialised {
		live, err = backup.Contents{}, nil // nothing to replace: a restore initialises it
	}
	if err != nil {
		return nil, storeErr(err)
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	id := hex.EncodeToString(b[:])
	now := h.reg.Now()
	cfg := h.reg.Config()
	until := protocol.Millis(now).Add(cfg.LeaseDuration + cfg.Grace)
	hd := sum.Header
	pv := wire.RestorePreview{Preview: id, SHA256: sum.SHA256, Bytes: sum.Bytes, ExpiresAt: wire.FormatTime(now.Add(RestorePreviewTTL)),
		Actor:    p.actor,
		Backup:   wire.RestoreBackup{TakenAt: wire.FormatTime(hd.TakenAt), Store: hd.Store, Generation: hd.Meta.Generation.Number},
		Replaces: contentsWire(live), With: contentsWire(with), LeaseDurationMs: cfg.LeaseDuration.Milliseconds(),
		GraceMs: cfg.Grace.Milliseconds(), QuarantineEnd: wire.FormatTime(until),
		Quarantined: nodesWire(with.Free), Kept: nodesWire(with.Leased)}
	h.restores.stage(id, &stagedRestore{user: p.user.Name, path: f.Name(), expires: now.Add(RestorePreviewTTL), sum: sum,
		replaces: live, preview: pv}, now, h.reg.Now)
	keep = true
	h.log.Info("restore previewed through the admin API", "actor", p.actor, "preview", id, "sha256", sum.SHA256,
		"quarantined", with.Free.Count())
	h.audit(ctx, audit.Entry{Actor: p.actor, Action: AuditRestorePreview, Target: "store",
		Detail: fmt.Sprintf("previewed %s (sha256 %s, taken %s on %s): would replace %s; would quarantine %d node IDs until "+
			"about %s", with.Counts, sum.SHA256, wire.FormatTime(hd.TakenAt), hd.Store, contentsText(live), with.Free.Count(),
			wire.FormatTime(until))})
	return pv, nil
}

func contentsWire(c backup.Contents) wire.RestoreContents {
	return wire.RestoreContents{RestoreRecords: wire.RestoreRecords{Nodes: c.Nodes, Leases: c.Leases, Keys: c.Keys,
		Users: c.Users, Allow: c.Allow, Audit: c.Audit}, History: c.History, Webhooks: c.Webhooks}
}

// contentsText is what a restore replaces, as the audit log tells it.
func contentsText(c backup.Contents) string {
	return fmt.Sprintf("%d users (%d with a webhook), %d API keys, %d leases, %d allow-list entries, %d audit entries, "+
		"%d lease history records", c.Users, c.Webhooks, c.Keys, c.Leases, c.Allow, c.Audit, c.History)
}

// restoreBackup applies a preview (previewRestore) of the caller's: the body is
// JSON (wire.RestoreConfirm) naming the preview, its file's checksum and the
// caller's password. It replaces the live store's whole state with the previewed
// file, made safe by backup.PlanFor with the registry's lease duration and
// grace: every node ID free in the backup quarantined until now + lease duration
// + grace, every watermark floor raised to it, leases kept for their holders'
// receipts, the fencing counter above every token known, a new generation. The
// load itself is all or nothing. Errors, each writing nothing: 400
// INVALID_REQUEST naming "password" (missing, wrong, throttled: counted as a
// failed login of the account, audited as backup.restore.refused); 404 for an
// unknown or expired preview, or another admin's; 409 CONFLICT for another
// checksum (the preview stays) or while another restore runs on this server. It
// answers the summary (wire.Restore), remembers it for the store's health, and
// audits it as backup.restore, with what it replaced. The sessions of the admin
// web end with the load (log in again); the registry meets the new generation at
// its next guarded call, or its probe, and recovers as from a reset (see the
// comment at the top of backup.go).
func (h *Handler) restoreBackup(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	ss, sr, err := h.snapshots()
	if err != nil {
		return nil, err
	}
	body, err := jsonbody.Read(w, r, h.cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	m, err := jsonbody.Decode(body, restoreConfirmMembers)
	if err != nil {
		return nil, err
	}
	var req wire.RestoreConfirm
	for _, f := range []struct {
		name string
		dst  *string
	}{{"preview", &req.Preview}, {"sha256", &req.SHA256}, {"password", &req.Password}} {
		if *f.dst, err = m.String("", f.name); err != nil {
			return nil, err
		}
	}
	switch {
	case req.Preview == "" || req.SHA256 == "":
		return nil, protocol.Invalidf("preview", "a restore applies a preview: POST %srestore/preview with the backup file "+
			"first, then send its preview and sha256 with your password", APIPrefix)
	case !lowerHex(req.Preview, 32):
		return nil, protocol.Invalidf("preview", "preview is the ID a restore preview answered: 32 lower-case hex digits")
	case !lowerHex(req.SHA256, 64):
		return nil, protocol.Invalidf("sha256", "sha256 is the previewed file's checksum: 64 lower-case hex digits")
	}
	if err := h.acct.ConfirmPassword(r.Context(), *p.user, "password", req.Password, account.RoleAdmin); err != nil {
		if protocol.ErrorCode(err) == protocol.CodeInvalidRequest && req.Password != "" {
			h.log.Warn("restore refused: the password given to confirm it is wrong or throttled", "actor", p.actor,
				"preview", req.Preview, "remoteIp", p.remote)
			h.audit(r.Context(), audit.Entry{Actor: p.actor, Action: AuditRestoreRefused, Target: "store",
				Detail: "preview " + req.Preview + ": the password given to confirm it is wrong or throttled; nothing was written"})
		}
		return nil, err
	}
	now := h.reg.Now()
	if !h.restores.run.TryLock() {
		return nil, protocol.Errorf(protocol.CodeConflict, "another restore runs on this server; wait for its answer")
	}
	defer h.restores.run.Unlock()
	staged, err := h.restores.take(req.Preview, p.user.Name, req.SHA256, now)
	if err != nil {
		return nil, err
	}
	defer staged.drop()
	ctx, cancel := h.backupContext(w, r)
	defer cancel()
	f, err := os.Open(staged.path)
	if err != nil {
		return nil, idkeeper.Unavailable(fmt.Errorf("open the previewed backup: %w", err))
	}
	defer f.Close()

	// The plan is taken at the confirmation, just before the load: its
	// quarantine starts as late as it can.
	cfg := h.reg.Config()
	var opts []backup.Option
	if cfg.LeaseDuration < idkeeper.MinFirstLease {
		// A registry allowed leases of seconds (internal/shortlease: the
		// fault-injection suite): its own values are still the plan's.
		opts = append(opts, shortlease.ImportOption().(backup.Option))
	}
	plan, err := backup.PlanFor(ctx, sr, h.reg.Now(), cfg.LeaseDuration, cfg.Grace, opts...)
	if err != nil {
		return nil, idkeeper.Unavailable(err)
	}
	sum, err := backup.Import(ctx, ss, bufio.NewReaderSize(f, 256<<10), plan, opts...)
	if err != nil {
		h.log.Error("restore through the admin API failed; the store was left as it was", "actor", p.actor, "err", err)
		return nil, restoreRefused(err, 0)
	}
	lr := &lastRestore{At: plan.Now, TakenAt: sum.Header.TakenAt, Actor: p.actor, SHA256: sum.SHA256, Bytes: sum.Bytes,
		Store: sum.Header.Store, From: sum.Header.Meta.Generation.Number, Counts: sum.Counts, Generation: sum.Generation.Number,
		Fence: sum.Fence, LeaseDuration: plan.LeaseDuration, Grace: plan.Grace, Until: sum.Until,
		Quarantined: sum.Quarantined, Kept: sum.Kept, Live: sum.Live}
	if staged.sum.SHA256 != sum.SHA256 {
		h.log.Error("the restored backup's checksum differs from the previewed upload's", "previewed", staged.sum.SHA256,
			"loaded", sum.SHA256)
	}
	h.restores.last.Store(lr)
	h.log.Warn("store restored from a backup through the admin API: node IDs free in the backup are quarantined until "+
		sum.Until.UTC().Format(time.RFC3339), "actor", p.actor, "preview", req.Preview, "sha256", sum.SHA256,
		"generation", sum.Generation.Number, "quarantined", sum.Quarantined.Count(), "kept", sum.Kept.Count())
	h.audit(ctx, audit.Entry{Actor: p.actor, Action: audit.BackupRestore, Target: "store",
		Detail: fmt.Sprintf("confirmed with the password (preview %s); %d node IDs quarantined until %s; replaced %s; %s",
			req.Preview, sum.Quarantined.Count(), wire.FormatTime(sum.Until), contentsText(staged.replaces), lr.detail())})
	if err := h.allow.Refresh(ctx); err != nil {
		h.log.Warn("read the restored IP allow-list", "err", err)
	}
	return lr.wire(), nil
}
