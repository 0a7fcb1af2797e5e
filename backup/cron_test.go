package backup

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// ParseSchedule takes what the flag always took, and "off"; everything else is
// INVALID_REQUEST naming "schedule", with the text and what is wanted.
func TestParseSchedule(t *testing.T) {
	for _, spec := range []string{"0 3 * * *", "*/15 * * * 1-5", "@daily", "@hourly", "@weekly", "@every 6h", " @every 1s "} {
		sched, text, err := ParseSchedule(spec, t0)
		if err != nil || sched == nil || text != strings.TrimSpace(spec) {
			t.Errorf("ParseSchedule(%q) = %v, %q, %v", spec, sched, text, err)
		}
	}
	if sched, text, err := ParseSchedule(" off ", t0); err != nil || sched != nil || text != idkeeper.BackupScheduleOff {
		t.Errorf(`ParseSchedule(" off ") = %v, %q, %v; want no schedule`, sched, text, err)
	}
	for spec, want := range map[string]string{
		"":                          "empty",
		"61 * * * *":                `"61 * * * *": end of range (61) above maximum (59)`,
		"0 0 3 * * *":               "want a cron expression of 5 fields in UTC",
		"@fortnightly":              "@daily, @hourly, @every 6h",
		"TZ=Europe/Paris 0 3 * * *": "always in UTC",
		"0 0 30 2 *":                "never fires",
		"0 3 * * *\u202e":           "not text",
		strings.Repeat("*", 200):    "over 128 bytes",
	} {
		_, _, err := ParseSchedule(spec, t0)
		var e *idkeeper.Error
		if !errors.As(err, &e) || e.Code != protocol.CodeInvalidRequest || e.Field != "schedule" || !strings.Contains(e.Message, want) {
			t.Errorf("ParseSchedule(%q) = %v, want INVALID_REQUEST on schedule saying %q", spec, err, want)
		}
	}
	sched, _, _ := ParseSchedule("0 3 * * *", t0)
	day := time.Date(t0.Year(), t0.Month(), t0.Day()+1, 3, 0, 0, 0, time.UTC) // t0 is past 03:00
	if got := NextTimes(sched, t0, 3); len(got) != 3 || !got[0].Equal(day) || !got[2].Equal(day.AddDate(0, 0, 2)) {
		t.Errorf("NextTimes = %v", got)
	}
	if got := NextTimes(nil, t0, 3); len(got) != 0 {
		t.Errorf("NextTimes(nil) = %v", got)
	}
}

// A job that reads its schedule from the store follows every change at its
// next wake: a new schedule moves the next run, "off" stops the runs, and a
// schedule put back resumes them; Status and ScheduleChanged say so.
func TestJobFollowsTheStoredSchedule(t *testing.T) {
	var changes []string
	var bs idkeeper.BackupScheduleStore
	e := newJobEnv(t, "", func(c *JobConfig) {
		bs = c.Store.(idkeeper.BackupScheduleStore)
		c.Schedules = bs
		c.ScheduleChanged = func(spec string) { changes = append(changes, spec) }
	})
	ctx := context.Background()
	put := func(spec string) {
		cur, err := bs.BackupSchedule(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec, cur.UpdatedBy = spec, "user:alice"
		if err := bs.PutBackupSchedule(ctx, cur); err != nil {
			t.Fatal(err)
		}
	}
	put("*/15 * * * *")
	stage := 0
	runs := e.run(t, func(runs []Run) bool {
		switch {
		case stage == 0 && len(runs) == 1: // after 12:15
			put("@hourly")
			stage++
		case stage == 1 && len(runs) == 2: // after 13:00
			put(idkeeper.BackupScheduleOff)
			stage++
		case stage == 2 && !e.clk.Now().Before(t0.Add(3*time.Hour)):
			if st := e.job.Status(); st.Spec != "" || !st.Next.IsZero() || st.Version != 3 {
				t.Errorf("Status while off: %+v", st)
			}
			put("30 15 * * *")
			stage++
		}
		return len(runs) == 3
	})
	if got, want := starts(runs), []string{"12:15:00", "13:00:00", "15:30:00"}; !slices.Equal(got, want) {
		t.Fatalf("runs at %v, want %v (the schedule changed after the first, turned off after the second, back on at 15:00)", got, want)
	}
	if want := []string{"*/15 * * * *", "@hourly", "", "30 15 * * *"}; !slices.Equal(changes, want) {
		t.Fatalf("ScheduleChanged told %q, want %q", changes, want)
	}
	if st := e.job.Status(); st.Spec != "30 15 * * *" || st.Version != 4 || !st.Next.Equal(t0.Add(27*time.Hour+30*time.Minute)) {
		t.Fatalf("Status after: %+v", st)
	}
}

// A stored schedule that does not parse (written by something else) means no
// scheduled backups, not a crash; a failed read keeps the schedule in force.
func TestJobStoredScheduleNotOne(t *testing.T) {
	fs := &flakySchedules{s: idkeeper.BackupSchedule{Spec: "@hourly", Version: 1}}
	e := newJobEnv(t, "", func(c *JobConfig) { c.Schedules = fs })
	runs := e.run(t, func(runs []Run) bool {
		if len(runs) == 1 && fs.err == nil {
			fs.err = errors.New("store down")
		}
		if len(runs) == 2 && fs.s.Version == 1 {
			fs.err = nil
			fs.s = idkeeper.BackupSchedule{Spec: "61 * * * *", Version: 2}
		}
		return len(runs) == 2 && !e.clk.Now().Before(t0.Add(6*time.Hour))
	})
	if got, want := starts(runs), []string{"13:00:00", "14:00:00"}; !slices.Equal(got, want) {
		t.Fatalf("runs at %v, want %v (the second with the store down, none after the bad schedule)", got, want)
	}
	if st := e.job.Status(); st.Spec != "" || !st.Next.IsZero() {
		t.Fatalf("Status under a bad stored schedule: %+v", st)
	}
}

type flakySchedules struct {
	s   idkeeper.BackupSchedule
	err error
}

func (f *flakySchedules) BackupSchedule(context.Context) (idkeeper.BackupSchedule, error) {
	return f.s, f.err
}
func (f *flakySchedules) PutBackupSchedule(context.Context, idkeeper.BackupSchedule) error {
	return errors.New("read only")
}
