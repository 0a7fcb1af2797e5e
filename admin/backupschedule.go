package admin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/internal/jsonbody"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The backup schedule (issue #30, docs/backup.md "The schedule"): one record in
// the store (idkeeper.BackupScheduleStore) that every replica started with
// --backup-dir follows, one of them taking each scheduled backup under the job
// lock. An operator sees it (as the backup folder); only an admin changes it, as
// only an admin makes or deletes a backup: turning the schedule off is as grave.
// Every change is audited with the old and the new schedule.

// nextRunsShown is how many next times the API and the page show.
const nextRunsShown = 5

var scheduleMembers = wire.Members(wire.BackupScheduleRequest{})

// scheduleOff is the error of the schedule routes on a store that keeps none.
var scheduleOff = protocol.Errorf(protocol.CodeNotFound,
	"this store keeps no backup schedule: the schedule is --backup-schedule of each replica")

// scheduleStore is the store's BackupScheduleStore; nil when it keeps none.
func (h *Handler) scheduleStore() idkeeper.BackupScheduleStore {
	bs, _ := h.cfg.Store.(idkeeper.BackupScheduleStore)
	return bs
}

// scheduleView is the stored schedule as the API and the page show it.
type scheduleView struct {
	idkeeper.BackupSchedule
	Next     []time.Time // the next times, UTC; none when off
	Invalid  string      // why the stored text is no schedule (not written here); "" when it is one
	RunsHere bool        // this replica has --backup-dir
	Replica  string      // this replica's job lock owner
}

// Text is the schedule as the form shows it: "off" when off.
func (v scheduleView) Text() string {
	if v.Off() {
		return idkeeper.BackupScheduleOff
	}
	return v.Spec
}

// readSchedule reads the stored schedule and its next times.
func (h *Handler) readSchedule(ctx context.Context) (scheduleView, error) {
	bs := h.scheduleStore()
	if bs == nil {
		return scheduleView{}, scheduleOff
	}
	rec, err := bs.BackupSchedule(ctx)
	if err != nil {
		return scheduleView{}, storeErr(err)
	}
	v := scheduleView{BackupSchedule: rec, RunsHere: h.cfg.Backups != nil, Replica: h.reg.Config().Owner}
	if !rec.Off() {
		sched, _, err := backup.ParseSchedule(rec.Spec, h.reg.Now())
		if err != nil {
			_, v.Invalid = errorText(err)
		}
		v.Next = backup.NextTimes(sched, h.reg.Now(), nextRunsShown)
	}
	return v, nil
}

func (v scheduleView) wire() wire.BackupSchedule {
	out := wire.BackupSchedule{Schedule: v.Text(), Version: v.Version, UpdatedBy: v.UpdatedBy, UpdatedAt: optTime(v.UpdatedAt),
		NextRuns: make([]string, len(v.Next)), RunsHere: v.RunsHere, Replica: v.Replica}
	for i, t := range v.Next {
		out.NextRuns[i] = wire.FormatTime(t)
	}
	return out
}

// getSchedule answers the stored schedule, its Version also as the ETag.
// Errors: 404 on a store that keeps none.
func (h *Handler) getSchedule(w http.ResponseWriter, r *http.Request, _ *principal) (any, error) {
	v, err := h.readSchedule(r.Context())
	if err != nil {
		return nil, err
	}
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(v.Version, 10)))
	return v.wire(), nil
}

// ifMatch reads the Version of an If-Match header ("3", or a quoted or weak
// ETag of it); ok false when there is none.
func ifMatch(r *http.Request) (uint64, bool, error) {
	raw := strings.TrimSpace(r.Header.Get("If-Match"))
	if raw == "" {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(strings.Trim(strings.TrimPrefix(raw, "W/"), `"`), 10, 64)
	if err != nil {
		return 0, false, protocol.Invalidf("If-Match", "If-Match must be the schedule's version as GET answers it (its ETag)")
	}
	return v, true, nil
}

// putSchedule replaces the stored schedule with the body's "schedule" when the
// stored Version is the body's "version" (or If-Match's), audits the change as
// backup.schedule with the old and the new text, and answers the schedule as
// stored; this replica's job follows at once, the others at their next wake
// (within a minute). The same text as stored is no change: nothing written, no
// entry. Errors, with nothing written: 400 INVALID_REQUEST naming "schedule"
// (not a schedule: backup.ParseSchedule) or "version" (missing, or disagreeing
// with If-Match); 409 CONFLICT when the stored Version is another (read it
// again); 404 on a store that keeps none; the store's.
func (h *Handler) putSchedule(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	bs := h.scheduleStore()
	if bs == nil {
		return nil, scheduleOff
	}
	body, err := jsonbody.Read(w, r, h.cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	m, err := jsonbody.Decode(body, scheduleMembers)
	if err != nil {
		return nil, err
	}
	text, err := m.String("", "schedule")
	if err != nil {
		return nil, err
	}
	if _, ok := m["schedule"]; !ok {
		return nil, protocol.Invalidf("schedule", "schedule is required: a cron expression in UTC, a descriptor such as @daily, or %q",
			idkeeper.BackupScheduleOff)
	}
	n, inBody, err := m.Int("", "version", 0, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	hv, inHeader, err := ifMatch(r)
	switch {
	case err != nil:
		return nil, err
	case inBody && inHeader && uint64(n) != hv:
		return nil, protocol.Invalidf("version", "version %d and If-Match %d disagree", n, hv)
	case !inBody && !inHeader:
		return nil, protocol.Invalidf("version", "version is required: the version of the schedule you read (GET %sbackups/schedule), "+
			"in the body or as If-Match", APIPrefix)
	case inHeader:
		n = int64(hv)
	}
	_, spec, err := backup.ParseSchedule(text, h.reg.Now())
	if err != nil {
		return nil, err
	}
	cur, err := bs.BackupSchedule(r.Context())
	if err != nil {
		return nil, storeErr(err)
	}
	if cur.Version != uint64(n) {
		return nil, scheduleConflict(cur)
	}
	old := scheduleView{BackupSchedule: cur}.Text()
	if old != spec {
		next := idkeeper.BackupSchedule{Spec: spec, UpdatedBy: p.actor, UpdatedAt: h.reg.Now(), Version: cur.Version}
		if err := bs.PutBackupSchedule(r.Context(), next); errors.Is(err, idkeeper.ErrConflict) {
			if cur, err = bs.BackupSchedule(r.Context()); err != nil {
				return nil, storeErr(err)
			}
			return nil, scheduleConflict(cur)
		} else if err != nil {
			return nil, storeErr(err)
		}
		from := strconv.Quote(old)
		if cur.Version == 0 {
			from = "none (off)"
		}
		h.log.Info("backup schedule changed through the admin API", "from", old, "to", spec, "by", p.actor, "remoteIp", p.remote)
		h.audit(r.Context(), audit.Entry{Actor: p.actor, Action: audit.BackupSchedule, Target: "backup-schedule",
			Detail: fmt.Sprintf("%s → %q", from, spec)})
		if j := h.cfg.Backups; j != nil {
			j.Refresh(r.Context())
		}
	}
	return h.getSchedule(w, r, p)
}

// scheduleConflict is the 409 of a change over a Version that is not cur's.
func scheduleConflict(cur idkeeper.BackupSchedule) error {
	return protocol.Errorf(protocol.CodeConflict, "the backup schedule was changed since you read it (now version %d, %q by %s): "+
		"read it again and make your change over that", cur.Version, scheduleView{BackupSchedule: cur}.Text(), cur.UpdatedBy)
}

// backupSchedulePost changes the schedule from the Backups page's form (fields
// schedule and version) through the API.
func (h *Handler) backupSchedulePost(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := h.parseForm(w, r); err != nil {
		h.pageError(w, r, p, err)
		return
	}
	req := map[string]any{"schedule": r.PostForm.Get("schedule")}
	if v, err := strconv.ParseUint(r.PostForm.Get("version"), 10, 64); err == nil {
		req["version"] = v
	}
	out, err := h.callAPI(w, r, p, h.putSchedule, req)
	if err != nil {
		status, msg := errorText(err)
		h.renderBackups(w, r, p, status, "The schedule was not changed: "+msg)
		return
	}
	msg := "The backup schedule was saved."
	if s, ok := out.(wire.BackupSchedule); ok {
		if s.Schedule == idkeeper.BackupScheduleOff {
			msg = "Scheduled backups are off: manual backups only."
		} else if len(s.NextRuns) > 0 {
			next := s.NextRuns[0]
			if t, err := time.Parse(wire.TimeFormat, next); err == nil {
				next = t.Format(timeFormat)
			}
			msg = fmt.Sprintf("The backup schedule is now %s (UTC); the next backup is due %s.", s.Schedule, next)
		}
	}
	h.redirect(w, r, "/admin/backups", msg)
}
