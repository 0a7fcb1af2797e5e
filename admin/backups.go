package admin

import (
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The backup folder (issue #12, docs/backup.md "Scheduled and manual backups"):
// the backups the server's backup job (Config.Backups) writes on its schedule
// and on demand, listed, downloaded and deleted. Every route takes the role
// operator or above, the download too: a backup holds the API keys' and the
// users' password hashes and the whole audit log.

// backupsOff is the error of a route of the folder on a server without one.
var backupsOff = protocol.Errorf(protocol.CodeNotFound,
	"backups are not enabled on this server: start it with --backup-dir DIR (docs/backup.md)")

// backupFileJSON is e as the API shows it.
func backupFileJSON(e backup.Entry) wire.BackupFile {
	return wire.BackupFile{Name: e.Name, Bytes: e.Size, TakenAt: wire.FormatTime(e.TakenAt), Generation: e.Generation,
		Compressed: e.Compressed, SHA256: e.SHA256, Records: e.Records}
}

// backupFailure is the error of a failed backup as the API and the page show
// it: an *idkeeper.Error as it is (CONFLICT, STORE_NOT_INITIALISED, …); a
// failure of the folder INTERNAL with the system's reason ("no space left on
// device"), never the path; anything else, from the store, STORE_UNAVAILABLE.
func backupFailure(err error) error {
	var (
		e  *idkeeper.Error
		pe *fs.PathError
		le *os.LinkError
	)
	switch {
	case errors.As(err, &e):
		return err
	case errors.As(err, &pe):
		return &idkeeper.Error{Code: protocol.CodeInternal, Message: "the backup could not be written into the backup folder: " +
			pe.Err.Error(), Err: err}
	case errors.As(err, &le):
		return &idkeeper.Error{Code: protocol.CodeInternal, Message: "the backup could not be written into the backup folder: " +
			le.Err.Error(), Err: err}
	}
	return idkeeper.Unavailable(fmt.Errorf("the backup failed: %w", err))
}

// listBackups answers the folder: its settings, the job's last run, and its
// backups, newest first; enabled false without a folder.
func (h *Handler) listBackups(_ http.ResponseWriter, _ *http.Request, _ *principal) (any, error) {
	j := h.cfg.Backups
	if j == nil {
		return wire.Backups{Backups: []wire.BackupFile{}}, nil
	}
	es, err := j.Folder().List()
	if err != nil {
		return nil, err
	}
	st := j.Status()
	out := wire.Backups{Enabled: true, Dir: st.Dir, Schedule: st.Spec, NextRun: optTime(st.Next), Keep: st.Keep,
		MaxAgeMs: st.MaxAge.Milliseconds(), Compressed: st.Gzip, LastSuccess: optTime(st.LastGood),
		Backups: make([]wire.BackupFile, len(es))}
	for i, e := range es {
		out.Backups[i] = backupFileJSON(e)
	}
	if r := st.Last; r != nil {
		lr := &wire.BackupRun{Actor: r.Actor, Started: wire.FormatTime(r.Started), DurationMs: r.Duration.Milliseconds(),
			OK: r.OK(), Pruned: r.Pruned}
		if lr.Pruned == nil {
			lr.Pruned = []string{}
		}
		if r.OK() {
			f := backupFileJSON(r.Entry)
			lr.Backup = &f
		} else {
			_, lr.Error = errorText(backupFailure(r.Err))
		}
		out.LastRun = lr
	}
	return out, nil
}

// createBackup writes a backup now (backup.Job.Now: under the job lock, the
// retention applied after it, audited as backup.create with the caller) and
// answers 201 with it. It runs under Config.BackupTimeout, not the short request
// timeout. Errors: 404 without a folder; 409 CONFLICT while another backup runs
// or within a minute of a scheduled one on another replica; the store's.
func (h *Handler) createBackup(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	j := h.cfg.Backups
	if j == nil {
		return nil, backupsOff
	}
	ctx, cancel := h.backupContext(w, r)
	defer cancel()
	run, err := j.Now(ctx, p.actor)
	if err != nil {
		return nil, backupFailure(err)
	}
	return created{location: APIPrefix + "backups/" + url.PathEscape(run.Entry.Name), body: backupFileJSON(run.Entry)}, nil
}

// downloadBackup sends the backup file as it is (Range and HEAD work), as an
// attachment named after it: application/gzip for a .gz, application/x-ndjson
// otherwise. Errors: 404 for a name that is not a backup of the folder.
func (h *Handler) downloadBackup(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	j := h.cfg.Backups
	if j == nil {
		return nil, backupsOff
	}
	f, e, err := j.Folder().Open(r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	_, cancel := h.backupContext(w, r) // a large file over a slow link outlasts the usual write timeout
	defer cancel()
	hd := w.Header()
	hd.Set("Content-Type", BackupContentType)
	if e.Compressed {
		hd.Set("Content-Type", BackupGzipType)
	}
	hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": e.Name}))
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	if r.Method == http.MethodGet {
		h.log.Info("backup downloaded through the admin API", "name", e.Name, "bytes", e.Size, "actor", p.actor,
			"remoteIp", p.remote)
	}
	http.ServeContent(w, r, "", e.TakenAt, f)
	return streamed{}, nil
}

// deleteBackup deletes the backup (audited as backup.delete) and answers 204.
// Errors: 404 for a name that is not a backup of the folder.
func (h *Handler) deleteBackup(_ http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	j := h.cfg.Backups
	if j == nil {
		return nil, backupsOff
	}
	if _, err := j.Delete(r.Context(), r.PathValue("name"), p.actor); err != nil {
		return nil, err
	}
	return noContent{}, nil
}

// backupLock is how long a backup create holds its Idempotency-Key (or the
// Backups form its token): past the longest backup (Config.BackupTimeout), so
// that a retry while it runs gets 409 IDEMPOTENCY_REQUEST_IN_PROGRESS, never a
// second backup or the job lock's CONFLICT stored as the key's answer.
func (h *Handler) backupLock() time.Duration {
	d := h.cfg.BackupTimeout
	if d <= 0 {
		d = DefaultBackupTimeout
	}
	return d + time.Minute
}
