package admin

import (
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"time"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The restore pages (issue #29; admin): the Backups page's upload form sends the
// file (multipart, field "file") to POST /admin/restore, which previews it
// through the API's handler (previewRestore) and shows what the restore would
// replace and quarantine; its confirmation form (the preview's ID and checksum,
// and the admin's password) goes to POST /admin/restore/confirm, which applies
// it through restoreBackup. The restore ends every session, this one too: the
// browser is sent to the login page with what was done.

// restorePreviewView is the data of the preview page.
type restorePreviewView struct {
	P           wire.RestorePreview
	Until       time.Time // the quarantine's end, about
	ExpiresAt   time.Time
	TakenAt     time.Time
	Lease       time.Duration
	Grace       time.Duration
	MaxPassword int
}

func (h *Handler) renderRestorePreview(w http.ResponseWriter, r *http.Request, p *principal, status int, errMsg string,
	pv wire.RestorePreview) {
	v := h.baseView(w, r, p, "Restore a backup", "backups")
	rv := restorePreviewView{P: pv, MaxPassword: account.MaxPasswordLen,
		Lease: time.Duration(pv.LeaseDurationMs) * time.Millisecond, Grace: time.Duration(pv.GraceMs) * time.Millisecond}
	rv.Until, _ = wire.ParseTime(pv.QuarantineEnd)
	rv.ExpiresAt, _ = wire.ParseTime(pv.ExpiresAt)
	rv.TakenAt, _ = wire.ParseTime(pv.Backup.TakenAt)
	v.Error, v.P = errMsg, rv
	h.render(w, r, status, "restore", v)
}

// restoreUploadPost previews the uploaded file: the first part of the
// multipart form must be the file, streamed to the API's handler as its body.
func (h *Handler) restoreUploadPost(w http.ResponseWriter, r *http.Request, p *principal) {
	fail := func(err error) {
		status, msg := errorText(err)
		h.renderBackups(w, r, p, status, "The backup cannot be restored: "+msg)
	}
	mr, err := r.MultipartReader()
	if err != nil {
		fail(protocol.Invalidf("file", "send the backup file as the form's file (multipart/form-data)"))
		return
	}
	var part *multipart.Part
	for {
		part, err = mr.NextPart()
		if err != nil || part.FormName() == "file" {
			break
		}
	}
	if errors.Is(err, io.EOF) || err == nil && part.FileName() == "" {
		fail(protocol.Invalidf("file", "choose the backup file to restore"))
		return
	} else if err != nil {
		fail(protocol.Invalidf("file", "the form could not be read: %v", err))
		return
	}
	r2 := r.Clone(r.Context())
	r2.Body, r2.ContentLength = io.NopCloser(part), -1
	r2.Header.Set("Content-Type", "application/octet-stream")
	out, err := h.previewRestore(w, r2, p)
	if err != nil {
		fail(err)
		return
	}
	pv, ok := out.(wire.RestorePreview)
	if !ok {
		h.pageError(w, r, p, fmt.Errorf("admin: previewRestore answered %T", out))
		return
	}
	h.renderRestorePreview(w, r, p, http.StatusOK, "", pv)
}

// restoreConfirmPost applies the preview of the form with the password given.
func (h *Handler) restoreConfirmPost(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, p, err)
		return
	}
	f := r.PostForm
	req := wire.RestoreConfirm{Preview: f.Get("preview"), SHA256: f.Get("sha256"), Password: f.Get("password")}
	out, err := h.callAPI(w, r, p, h.restoreBackup, req)
	if err != nil {
		status, msg := errorText(err)
		if pv, ok := h.restores.peek(req.Preview, p.user.Name, h.reg.Now()); ok {
			h.renderRestorePreview(w, r, p, status, "The store was not restored: "+msg, pv)
			return
		}
		h.renderBackups(w, r, p, status, "The store was not restored: "+msg)
		return
	}
	msg := "The store was restored from the backup: log in again."
	if res, ok := out.(*wire.Restore); ok {
		msg = fmt.Sprintf("The store was restored from the backup (SHA-256 %.12s…): %d node IDs are quarantined until %s. "+
			"Every session ended: log in again.", res.SHA256, res.Quarantined.Count, res.QuarantineEnd)
	}
	h.clearCookie(w)
	h.redirect(w, r, loginPath, msg)
}

// peek returns the preview id of user, if it is still kept at now.
func (rs *restoreState) peek(id, user string, now time.Time) (wire.RestorePreview, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	s, ok := rs.staged[id]
	if !ok || s.user != user || !now.Before(s.expires) {
		return wire.RestorePreview{}, false
	}
	return s.preview, true
}
