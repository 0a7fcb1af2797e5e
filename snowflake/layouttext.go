package snowflake

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MinLifetimeYears is how many years ahead of now a new layout's range must reach
// (ValidateNew): a deployment outlives its first plans, and a layout never changes
// under running clients.
const MinLifetimeYears = 10

// TimeFormat is the layout of every time IdKeeper writes: RFC 3339 to the
// millisecond, "Z" for UTC, e.g. "2026-01-01T00:00:00.000Z". It is the epoch's form
// in Layout.String and, through internal/wire (wire.TimeFormat, wire.FormatTime),
// the form of every time of the HTTP APIs, backups, alerts and the command line.
// It is defined here, at the bottom of the import graph, so that it is defined
// once.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// dateFormat is the date form of an epoch: midnight UTC of that day.
const dateFormat = "2006-01-02"

// Widths is the text of the layout's widths in bits, timestamp/node/sequence, as
// ParseLayout reads them: "41/12/10" for DefaultLayout.
func (l Layout) Widths() string {
	return strconv.Itoa(l.TimestampBits) + "/" + strconv.Itoa(l.NodeBits) + "/" + strconv.Itoa(l.SequenceBits)
}

// String is the canonical text of the layout: its Widths, "@", and its epoch in RFC
// 3339, UTC, to the millisecond: "41/12/10@2026-01-01T00:00:00.000Z" for
// DefaultLayout. For every valid layout l, ParseLayout reads the two halves back
// (w, e, _ := strings.Cut(l.String(), "@"); ParseLayout(w, e)) to a layout with the
// same widths and the same epoch instant (in UTC, so == holds when l.Epoch is in UTC
// and carries no monotonic reading, as DefaultLayout's and ParseLayout's do).
func (l Layout) String() string {
	return l.Widths() + "@" + l.Epoch.UTC().Format(TimeFormat)
}

// ParseLayout reads a layout from the text of its widths and of its epoch, as the
// --layout and --epoch flags give them, and checks it with Validate.
//
// widths is the three widths in bits, timestamp/node/sequence, in decimal ASCII
// digits separated by "/": "41/12/10" (DefaultLayout), "41/10/12" (4,096 IDs per
// millisecond, 1,024 node IDs). epoch is read by ParseEpoch: "2026-01-01" or
// "2026-01-01T00:00:00Z". ASCII whitespace around either is ignored; the epoch is
// returned in UTC.
//
// Errors wrap ErrInvalidLayout and quote the offending text (at most its first 32
// bytes), or name the layout read (String) with what is wrong with it. ParseLayout
// checks nothing that depends on the time of day: a layout chosen for a new
// deployment is also checked with ValidateNew.
func ParseLayout(widths, epoch string) (Layout, error) {
	tb, nb, sb, err := parseWidths(widths)
	if err != nil {
		return Layout{}, err
	}
	e, err := ParseEpoch(epoch)
	if err != nil {
		return Layout{}, err
	}
	l := Layout{Epoch: e, TimestampBits: tb, NodeBits: nb, SequenceBits: sb}
	if reason := l.invalid(); reason != "" {
		return Layout{}, fmt.Errorf("%w %s: %s", ErrInvalidLayout, l, reason)
	}
	return l, nil
}

// ParseEpoch reads a layout's epoch: a date, "2026-01-01", meaning midnight UTC of
// that day; or an RFC 3339 time with at most millisecond precision,
// "2026-01-01T00:00:00Z", "2026-01-01T00:00:00.250Z", "2026-01-01T02:00:00+02:00"
// (two digits for each field but the year's four, an upper-case T and Z, a fraction
// of 1 to 9 digits after a '.', an offset of ±hh:mm below ±24:00). ASCII whitespace
// around it is ignored. It returns the time in UTC. It refuses, wrapping
// ErrInvalidLayout and quoting the input: anything else, and a time finer than the
// millisecond (IDs count whole milliseconds from the epoch).
func ParseEpoch(s string) (time.Time, error) {
	t := trimASCIISpace(s)
	if t == "" {
		return time.Time{}, fmt.Errorf("%w: epoch %s: empty; give a date (2026-01-01) or an RFC 3339 time (2026-01-01T00:00:00Z)",
			ErrInvalidLayout, quoteInput(s))
	}
	var (
		e   time.Time
		err error
	)
	if len(t) == len(dateFormat) {
		e, err = time.Parse(dateFormat, t)
	} else {
		e, err = time.Parse(time.RFC3339Nano, t)
	}
	if err != nil || (len(t) != len(dateFormat) && !strictRFC3339(t)) {
		return time.Time{}, fmt.Errorf("%w: epoch %s is neither a date (2026-01-01) nor an RFC 3339 time (2026-01-01T00:00:00Z)",
			ErrInvalidLayout, quoteInput(t))
	}
	if e.Nanosecond()%int(time.Millisecond) != 0 {
		return time.Time{}, fmt.Errorf("%w: epoch %s is not a whole millisecond", ErrInvalidLayout, quoteInput(t))
	}
	return e.UTC(), nil
}

// strictRFC3339 reports whether t has the shape of an RFC 3339 time, which
// time.Parse does not check on its own (it takes a one-digit hour, a fraction after
// a ',', an offset's minutes of 60): "2006-01-02T15:04:05", then a '.' and 1 to 9
// digits optionally, then "Z" or ±hh:mm with hh below 24 and mm below 60.
func strictRFC3339(t string) bool {
	const shape = "dddd-dd-ddTdd:dd:dd"
	if len(t) < len(shape)+1 {
		return false
	}
	for i := range len(shape) {
		if c := t[i]; shape[i] == 'd' && (c < '0' || c > '9') || shape[i] != 'd' && c != shape[i] {
			return false
		}
	}
	rest := t[len(shape):]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && n <= 9 && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 1 {
			return false
		}
		rest = rest[n:]
	}
	if rest == "Z" {
		return true
	}
	return len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':' &&
		isDigits(rest[1:3]) && isDigits(rest[4:6]) && rest[1:3] < "24" && rest[4:6] < "60"
}

// isDigits reports whether s is ASCII digits only.
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// maxWidthDigits bounds the digits of one width: a valid width has at most two, and
// a bound keeps a long run of digits from overflowing.
const maxWidthDigits = 4

// parseWidths reads "41/12/10": three decimal widths, timestamp/node/sequence.
func parseWidths(s string) (tb, nb, sb int, err error) {
	t := trimASCIISpace(s)
	fields := strings.Split(t, "/")
	if len(fields) != 3 {
		return 0, 0, 0, fmt.Errorf("%w %s: want three widths in bits, timestamp/node/sequence, as 41/12/10",
			ErrInvalidLayout, quoteInput(t))
	}
	var w [3]int
	for i, f := range fields {
		name := [3]string{"timestamp", "node", "sequence"}[i]
		if f == "" {
			return 0, 0, 0, fmt.Errorf("%w %s: the %s width is empty; want timestamp/node/sequence bits, as 41/12/10",
				ErrInvalidLayout, quoteInput(t), name)
		}
		for j := 0; j < len(f); j++ {
			if c := f[j]; c < '0' || c > '9' {
				return 0, 0, 0, fmt.Errorf("%w %s: the %s width %s is not a decimal number of bits",
					ErrInvalidLayout, quoteInput(t), name, quoteInput(f))
			}
		}
		if digits := strings.TrimLeft(f, "0"); len(digits) > maxWidthDigits {
			return 0, 0, 0, fmt.Errorf("%w %s: the %s width %s is far more than 63 bits",
				ErrInvalidLayout, quoteInput(t), name, quoteInput(f))
		}
		w[i], _ = strconv.Atoi(f) // at most maxWidthDigits significant digits
	}
	return w[0], w[1], w[2], nil
}

// ValidateNew checks a layout being chosen now, for a new deployment or a new pool:
// Validate's rules, and
//   - the epoch is not after now: no ID could be minted before it (an epoch equal to
//     now is accepted);
//   - the layout's range ends (End) at least MinLifetimeYears calendar years after
//     now (exactly that is accepted): 39 timestamp bits last about 17.4 years, 41
//     about 69.7, 42 about 139.
//
// Errors wrap ErrInvalidLayout and name the offending value. A layout that has been
// in service is checked with Validate only: it never changes under running clients,
// and nearing its end is for monitoring to report, not a reason to stop.
func (l Layout) ValidateNew(now time.Time) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if l.Epoch.After(now) {
		return fmt.Errorf("%w %s: the epoch %s is after now (%s): no ID can be minted before it",
			ErrInvalidLayout, l, l.Epoch.UTC().Format(TimeFormat), now.UTC().Format(TimeFormat))
	}
	if least := now.UTC().AddDate(MinLifetimeYears, 0, 0); l.End().Before(least) {
		return fmt.Errorf("%w %s: its range ends at %s, less than %d years after now (%s); "+
			"give more timestamp bits or a later epoch",
			ErrInvalidLayout, l, l.End().Format(TimeFormat), MinLifetimeYears, now.UTC().Format(TimeFormat))
	}
	return nil
}
