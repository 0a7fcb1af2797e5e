package backup

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// cronParser parses the schedules: 5 fields and the descriptors, no seconds.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule parses a backup schedule as --backup-schedule, the admin web and
// the store (idkeeper.BackupSchedule.Spec) write it, after trimming spaces: a
// cron expression of 5 fields (minute hour day-of-month month day-of-week),
// evaluated in UTC, a descriptor (@yearly, @monthly, @weekly, @daily, @hourly,
// @every 6h), or idkeeper.BackupScheduleOff, which is a nil Schedule. It returns
// the trimmed text too, the form that is stored. Errors: an INVALID_REQUEST
// *idkeeper.Error naming "schedule", whose message starts with the text quoted
// and says what is wanted, for an empty text, a time zone (the schedule is
// always UTC), a text that does not parse, or a schedule that does not fire after
// now.
func ParseSchedule(spec string, now time.Time) (Schedule, string, error) {
	s := strings.TrimSpace(spec)
	invalid := func(format string, args ...any) error {
		return &idkeeper.Error{Code: protocol.CodeInvalidRequest, Field: "schedule",
			Message: fmt.Sprintf("%q", spec) + fmt.Sprintf(format, args...)}
	}
	switch {
	case s == idkeeper.BackupScheduleOff:
		return nil, s, nil
	case s == "":
		return nil, s, invalid(": empty; want a cron expression in UTC, a descriptor such as @daily, or %q", idkeeper.BackupScheduleOff)
	case len(s) > idkeeper.MaxBackupScheduleLen:
		return nil, s, invalid(": over %d bytes", idkeeper.MaxBackupScheduleLen)
	case strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ="):
		return nil, s, invalid(": the schedule is always in UTC; drop the time zone and give the UTC times")
	}
	if _, ok := idkeeper.CleanText(s, idkeeper.MaxBackupScheduleLen); !ok {
		return nil, s, invalid(": not text; want a cron expression of 5 fields in UTC")
	}
	sched, err := cronParser.Parse(s)
	if err != nil {
		return nil, s, invalid(": %v; want a cron expression of 5 fields in UTC (minute hour day-of-month "+
			`month day-of-week, e.g. "0 3 * * *" for 03:00 every day) or @yearly, @monthly, @weekly, @daily, @hourly, @every 6h, `+
			"or %q", err, idkeeper.BackupScheduleOff)
	}
	if sched.Next(now.UTC()).IsZero() {
		return nil, s, invalid(" never fires: no such date in the next five years")
	}
	return sched, s, nil
}

// NextTimes returns the next n times of sched strictly after now, in UTC, fewer
// when it runs out; none for a nil sched.
func NextTimes(sched Schedule, now time.Time, n int) []time.Time {
	var out []time.Time
	if sched == nil {
		return out
	}
	t := now.UTC()
	for range n {
		if t = sched.Next(t); t.IsZero() {
			break
		}
		out = append(out, t.UTC())
	}
	return out
}
