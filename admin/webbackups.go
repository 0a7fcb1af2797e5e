package admin

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The Backups page (operator and above): the stored backup schedule, which an
// admin changes there (backupschedule.go), the backup folder's retention, its backups with their size and checksum, "Back up now", downloads
// (the API's route, which takes the session too) and deletion after a
// confirmation. Its forms go through the API's handlers (callAPI).

// backupRow is one backup as the page shows it.
type backupRow struct {
	backup.Entry
	Size     string // "1.2 MB"
	ShortSum string // the first 12 hex digits of the checksum
	Href     string // the download
}

func backupRowOf(e backup.Entry) backupRow {
	r := backupRow{Entry: e, Size: humanBytes(e.Size), Href: APIPrefix + "backups/" + url.PathEscape(e.Name)}
	if len(e.SHA256) >= 12 {
		r.ShortSum = e.SHA256[:12]
	}
	return r
}

// backupsView is the data of the Backups page.
type backupsView struct {
	Enabled bool
	Status  backup.Status
	Rows    []backupRow
	ListErr string // the folder could not be read
	LastErr string // why the last run failed
	Took    string // how long the last run took, to the millisecond
	Now     time.Time
	// Schedule is the stored schedule (backupschedule.go); HasSchedule false
	// when the store keeps none, SchedErr when it did not answer.
	Schedule    scheduleView
	HasSchedule bool
	SchedErr    string
}

// humanBytes is n in B, kB, MB or GB (powers of 1000), one decimal from kB up.
func humanBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/unit, 0
	for f >= unit && i < 2 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", f, []string{"kB", "MB", "GB"}[i])
}

func (h *Handler) backupsPage(w http.ResponseWriter, r *http.Request, p *principal) {
	h.renderBackups(w, r, p, http.StatusOK, "")
}

func (h *Handler) renderBackups(w http.ResponseWriter, r *http.Request, p *principal, status int, errMsg string) {
	bv := backupsView{Now: h.reg.Now()}
	if h.scheduleStore() != nil {
		sv, err := h.readSchedule(r.Context())
		if err != nil {
			h.log.Error("read the backup schedule", "err", err)
			_, bv.SchedErr = errorText(err)
		}
		bv.Schedule, bv.HasSchedule = sv, true
	}
	if j := h.cfg.Backups; j != nil {
		bv.Enabled, bv.Status = true, j.Status()
		if last := bv.Status.Last; last != nil {
			bv.Took = shortDuration(last.Duration.Round(time.Millisecond))
			if !last.OK() {
				_, bv.LastErr = errorText(backupFailure(last.Err))
			}
		}
		es, err := j.Folder().List()
		if err != nil {
			h.log.Error("read the backup folder", "dir", j.Folder().Dir, "err", err)
			_, bv.ListErr = errorText(err)
		}
		for _, e := range es {
			bv.Rows = append(bv.Rows, backupRowOf(e))
		}
	}
	v := h.baseView(w, r, p, "Backups", "backups")
	v.Error, v.P = errMsg, bv
	h.render(w, r, status, "backups", v)
}

// backupCreatePost backs up now through the API and says what it wrote.
func (h *Handler) backupCreatePost(w http.ResponseWriter, r *http.Request, p *principal) {
	out, err := h.callAPI(w, r, p, h.createBackup, struct{}{})
	if err != nil {
		status, msg := errorText(err)
		h.renderBackups(w, r, p, status, "The backup failed: "+msg)
		return
	}
	msg := "The backup was written."
	if b, ok := out.(wire.BackupFile); ok {
		msg = fmt.Sprintf("The backup %s was written: %s, SHA-256 %.12s…", b.Name, humanBytes(b.Bytes), b.SHA256)
	}
	h.redirect(w, r, "/admin/backups", msg)
}

// backupDeleteView is the data of the confirmation page.
type backupDeleteView struct {
	Row   backupRow
	Found bool
	Name  string
}

// backupDeleteConfirm asks whether to delete the backup ?name=.
func (h *Handler) backupDeleteConfirm(w http.ResponseWriter, r *http.Request, p *principal) {
	j := h.cfg.Backups
	if j == nil {
		h.pageError(w, r, p, backupsOff)
		return
	}
	name := r.URL.Query().Get("name")
	if !backup.ValidName(name) {
		h.pageError(w, r, p, protocol.Errorf(protocol.CodeNotFound, "There is no backup named %q.", name))
		return
	}
	dv := backupDeleteView{Name: name}
	e, err := j.Folder().Stat(name)
	switch {
	case err == nil:
		dv.Row, dv.Found = backupRowOf(e), true
	case protocol.ErrorCode(err) != protocol.CodeNotFound:
		h.pageError(w, r, p, err)
		return
	}
	v := h.baseView(w, r, p, "Delete a backup", "backups")
	v.P = dv
	h.render(w, r, http.StatusOK, "backupdelete", v)
}

// backupDeletePost deletes the backup of the form through the API.
func (h *Handler) backupDeletePost(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, p, err)
		return
	}
	name := r.PostForm.Get("name")
	if _, err := h.callAPI(w, r, p, h.deleteBackup, struct{}{}, "name", name); err != nil {
		status, msg := errorText(err)
		h.renderBackups(w, r, p, status, "The backup could not be deleted: "+msg)
		return
	}
	h.redirect(w, r, "/admin/backups", fmt.Sprintf("The backup %s was deleted.", name))
}
