package snowflake

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLayoutString(t *testing.T) {
	if got := DefaultLayout.String(); got != "41/12/10@2026-01-01T00:00:00.000Z" {
		t.Errorf("DefaultLayout.String() = %q", got)
	}
	if got := DefaultLayout.Widths(); got != "41/12/10" {
		t.Errorf("DefaultLayout.Widths() = %q", got)
	}
	l := Layout{Epoch: time.Date(2019, 12, 31, 23, 0, 0, 250e6, time.FixedZone("x", -3600)), TimestampBits: 39, NodeBits: 16, SequenceBits: 8}
	if got := l.String(); got != "39/16/8@2020-01-01T00:00:00.250Z" {
		t.Errorf("String() = %q", got)
	}
}

func TestParseLayout(t *testing.T) {
	for _, c := range []struct {
		widths, epoch string
		want          Layout
	}{
		{"41/12/10", "2026-01-01", DefaultLayout},
		{"41/12/10", "2026-01-01T00:00:00Z", DefaultLayout},
		{"41/12/10", "2026-01-01T00:00:00.000Z", DefaultLayout},
		{"41/12/10", "2026-01-01T02:00:00+02:00", DefaultLayout},
		{"41/12/10", "2025-12-31T23:30:00-00:30", DefaultLayout},
		{"041/012/010", "2026-01-01T00:00:00.000000000Z", DefaultLayout}, // leading zeros mean nothing
		{" 41/12/10\n", "\t2026-01-01 ", DefaultLayout},
		{"41/10/12", "2026-01-01", Layout{Epoch: DefaultEpoch, TimestampBits: 41, NodeBits: 10, SequenceBits: 12}},
		{"42/11/10", "2026-01-01", Layout{Epoch: DefaultEpoch, TimestampBits: 42, NodeBits: 11, SequenceBits: 10}},
		{"39/16/8", "2026-01-01", Layout{Epoch: DefaultEpoch, TimestampBits: 39, NodeBits: 16, SequenceBits: 8}},
		{"61/1/1", "2026-01-01", Layout{Epoch: DefaultEpoch, TimestampBits: 61, NodeBits: 1, SequenceBits: 1}},
		{"30/32/1", "2026-01-01", Layout{Epoch: DefaultEpoch, TimestampBits: 30, NodeBits: 32, SequenceBits: 1}},
		{"30/1/32", "2026-01-01", Layout{Epoch: DefaultEpoch, TimestampBits: 30, NodeBits: 1, SequenceBits: 32}},
		{"41/12/10", "2026-01-01T00:00:00.123Z", Layout{Epoch: DefaultEpoch.Add(123 * time.Millisecond), TimestampBits: 41, NodeBits: 12, SequenceBits: 10}},
		{"41/12/10", "2026-01-01T00:00:00.5Z", Layout{Epoch: DefaultEpoch.Add(500 * time.Millisecond), TimestampBits: 41, NodeBits: 12, SequenceBits: 10}},
		{"41/12/10", "1969-12-31T23:59:59.999Z", Layout{Epoch: time.UnixMilli(-1).UTC(), TimestampBits: 41, NodeBits: 12, SequenceBits: 10}},
		{"41/12/10", "0001-01-01T00:00:00.001Z", Layout{Epoch: time.Time{}.Add(time.Millisecond), TimestampBits: 41, NodeBits: 12, SequenceBits: 10}},
		{"41/12/10", "9999-12-31", Layout{Epoch: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), TimestampBits: 41, NodeBits: 12, SequenceBits: 10}},
	} {
		got, err := ParseLayout(c.widths, c.epoch)
		if err != nil || got != c.want {
			t.Errorf("ParseLayout(%q, %q) = %v, %v; want %v", c.widths, c.epoch, got, err, c.want)
		}
	}
}

func TestParseLayoutRefuses(t *testing.T) {
	for _, c := range []struct {
		widths, epoch string
		want          string // in the error
	}{
		// The widths' text.
		{"", "2026-01-01", `"": want three widths in bits, timestamp/node/sequence`},
		{"41/12", "2026-01-01", `"41/12": want three widths`},
		{"41/12/10/0", "2026-01-01", `"41/12/10/0": want three widths`},
		{"41-12-10", "2026-01-01", `"41-12-10": want three widths`},
		{"41,12,10", "2026-01-01", `"41,12,10": want three widths`},
		{"41//10", "2026-01-01", `"41//10": the node width is empty`},
		{"/12/10", "2026-01-01", `the timestamp width is empty`},
		{"41/12/", "2026-01-01", `the sequence width is empty`},
		{"41/12/+10", "2026-01-01", `the sequence width "+10" is not a decimal number of bits`},
		{"41/-1/23", "2026-01-01", `the node width "-1" is not a decimal number`},
		{"41/ 12/10", "2026-01-01", `the node width " 12" is not a decimal number`},
		{"41/12/1e1", "2026-01-01", `the sequence width "1e1" is not a decimal number`},
		{"41/12/0x1", "2026-01-01", `the sequence width "0x1"`},
		{"41/١٢/10", "2026-01-01", `the node width "١٢" is not a decimal number`},
		{"99999/1/1", "2026-01-01", `the timestamp width "99999" is far more than 63 bits`},
		{"1/1/" + strings.Repeat("9", 100), "2026-01-01", `the sequence width "99999999999999999999999999999999"… is far more`},
		// The rules of Validate, naming the layout read.
		{"0/53/10", "2026-01-01", "0/53/10@2026-01-01T00:00:00.000Z: every width must be positive (timestamp 0, node 53, sequence 10)"},
		{"41/0/22", "2026-01-01", "every width must be positive (timestamp 41, node 0, sequence 22)"},
		{"41/22/0", "2026-01-01", "every width must be positive (timestamp 41, node 22, sequence 0)"},
		{"0/0/0", "2026-01-01", "every width must be positive"},
		{"41/11/10", "2026-01-01", "41/11/10@2026-01-01T00:00:00.000Z: widths add up to 62, want 63"},
		{"42/12/10", "2026-01-01", "42/12/10@2026-01-01T00:00:00.000Z: widths add up to 64, want 63"},
		{"9999/9999/9999", "2026-01-01", "widths add up to 29997, want 63"},
		{"20/33/10", "2026-01-01", "20/33/10@2026-01-01T00:00:00.000Z: node and sequence widths must be at most 32 bits (node 33, sequence 10)"},
		{"20/10/33", "2026-01-01", "node and sequence widths must be at most 32 bits (node 10, sequence 33)"},
		{"41/12/10", "0001-01-01", "epoch is not set (the zero time"},
		// The epoch's text.
		{"41/12/10", "", `epoch "": empty`},
		{"41/12/10", " \n", `epoch " \n": empty`},
		{"41/12/10", "2026-1-1", `epoch "2026-1-1" is neither a date (2026-01-01) nor an RFC 3339 time`},
		{"41/12/10", "2026-02-30", `epoch "2026-02-30" is neither`},
		{"41/12/10", "2026/01/01", `epoch "2026/01/01" is neither`},
		{"41/12/10", "01-01-2026", `epoch "01-01-2026" is neither`},
		{"41/12/10", "2026-01-01T00:00:00", `epoch "2026-01-01T00:00:00" is neither`}, // no offset
		{"41/12/10", "2026-01-01 00:00:00Z", `is neither`},
		{"41/12/10", "2026-01-01t00:00:00z", `is neither`},
		{"41/12/10", "2026-01-01T24:00:00Z", `is neither`},
		{"41/12/10", "2026-01-01T00:00:00,5Z", `epoch "2026-01-01T00:00:00,5Z" is neither`},
		{"41/12/10", "2026-01-01T00:00:00+00:60", `epoch "2026-01-01T00:00:00+00:60" is neither`},
		{"41/12/10", "2026-01-01T00:00:00+0000", `is neither`},
		{"41/12/10", "2026-01-01T0:00:00Z", `is neither`}, // a one-digit hour
		{"41/12/10", "2026-01-01T00:00:00.Z", `is neither`},
		{"41/12/10", "2026-01-01T00:00:00.0000000000Z", `is neither`}, // 10 fraction digits
		{"41/12/10", "2026-01-01T00:00:00+24:00", `is neither`},
		{"41/12/10", "1767225600000", `epoch "1767225600000" is neither`}, // Unix milliseconds
		{"41/12/10", "+2026-01-01", `is neither`},
		{"41/12/10", "2026-01-01T00:00:00.0001Z", `epoch "2026-01-01T00:00:00.0001Z" is not a whole millisecond`},
		{"41/12/10", "2026-01-01T00:00:00.123456Z", `is not a whole millisecond`},
		{"41/12/10", "2026-01-01T00:00:00.000000001Z", `is not a whole millisecond`},
		{"41/12/10", strings.Repeat("2026", 100), `epoch "20262026202620262026202620262026"…`},
	} {
		got, err := ParseLayout(c.widths, c.epoch)
		if err == nil {
			t.Errorf("ParseLayout(%q, %q) = %v, want an error", c.widths, c.epoch, got)
			continue
		}
		if !errors.Is(err, ErrInvalidLayout) || !strings.HasPrefix(err.Error(), "snowflake: invalid layout") ||
			!strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseLayout(%q, %q): %v; want ErrInvalidLayout, %q", c.widths, c.epoch, err, c.want)
		}
	}
}

// Every valid layout's String reads back, in its two halves, to the same layout.
func TestLayoutStringRoundTrip(t *testing.T) {
	for _, l := range []Layout{
		DefaultLayout,
		{Epoch: DefaultEpoch, TimestampBits: 41, NodeBits: 10, SequenceBits: 12},
		{Epoch: time.UnixMilli(-1).UTC(), TimestampBits: 61, NodeBits: 1, SequenceBits: 1},
		{Epoch: time.Date(2031, 7, 4, 13, 14, 15, 999e6, time.UTC), TimestampBits: 30, NodeBits: 32, SequenceBits: 1},
		{Epoch: time.Date(2031, 7, 4, 13, 14, 15, 7e6, time.FixedZone("x", 5*3600)), TimestampBits: 39, NodeBits: 16, SequenceBits: 8},
	} {
		w, e, ok := strings.Cut(l.String(), "@")
		back, err := ParseLayout(w, e)
		if !ok || err != nil || back != (Layout{Epoch: l.Epoch.UTC(), TimestampBits: l.TimestampBits, NodeBits: l.NodeBits, SequenceBits: l.SequenceBits}) {
			t.Errorf("ParseLayout(%q, %q) = %v, %v; want %v", w, e, back, err, l)
		}
		if back.String() != l.String() {
			t.Errorf("%v reads back as %v", l, back)
		}
	}
}

// An epoch finer than the millisecond is invalid: EpochMillis would drop the rest.
func TestValidateWholeMillisecond(t *testing.T) {
	l := DefaultLayout
	l.Epoch = l.Epoch.Add(time.Microsecond)
	if err := l.Validate(); !errors.Is(err, ErrInvalidLayout) || !strings.Contains(err.Error(), "epoch 2026-01-01T00:00:00.000001Z is not a whole millisecond") {
		t.Errorf("Validate(epoch + 1µs) = %v", err)
	}
	l.Epoch = time.UnixMilli(-1).Add(-time.Nanosecond) // before 1970: Nanosecond counts up within the second
	if err := l.Validate(); err == nil {
		t.Errorf("Validate(1969-12-31T23:59:59.998999999Z) = nil")
	}
}

func TestValidateNew(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 250e6, time.UTC)
	tenYears := now.AddDate(10, 0, 0) // 2036-12-01T12:00:00.250Z
	with := func(tb, nb, sb int, epoch time.Time) Layout {
		return Layout{Epoch: epoch, TimestampBits: tb, NodeBits: nb, SequenceBits: sb}
	}
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	span39 := ms(1 << 39) // about 17.4 years
	for _, c := range []struct {
		name string
		l    Layout
		now  time.Time
		want string // in the error; "" for valid
	}{
		{"default", DefaultLayout, now, ""},
		{"41/10/12", with(41, 10, 12, DefaultEpoch), now, ""},
		{"42/11/10", with(42, 11, 10, DefaultEpoch), now, ""},
		{"39/16/8 on 2026-01-01", with(39, 16, 8, DefaultEpoch), now, ""},
		// The epoch against now.
		{"epoch == now", with(41, 12, 10, now), now, ""},
		{"epoch 1 ms before now", with(41, 12, 10, now.Add(-ms(1))), now, ""},
		{"epoch 1 ms after now", with(41, 12, 10, now.Add(ms(1))), now,
			"41/12/10@2026-12-01T12:00:00.251Z: the epoch 2026-12-01T12:00:00.251Z is after now (2026-12-01T12:00:00.250Z): no ID can be minted before it"},
		{"epoch in now's millisecond", with(41, 12, 10, now), now.Add(999 * time.Microsecond), ""},
		{"epoch 1 ns after now", with(41, 12, 10, now), now.Add(-time.Nanosecond), "is after now"},
		{"epoch next year", with(41, 12, 10, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)), now, "the epoch 2027-01-01T00:00:00.000Z is after now"},
		// The end of the range against now + 10 years.
		{"end exactly 10 years after now", with(39, 16, 8, tenYears.Add(-span39)), now, ""},
		{"end 1 ms past 10 years", with(39, 16, 8, tenYears.Add(-span39+ms(1))), now, ""},
		{"end 1 ms short of 10 years", with(39, 16, 8, tenYears.Add(-span39-ms(1))), now,
			"its range ends at 2036-12-01T12:00:00.249Z, less than 10 years after now (2026-12-01T12:00:00.250Z); give more timestamp bits or a later epoch"},
		{"end in now's millisecond + 10 years", with(39, 16, 8, tenYears.Add(-span39-ms(1))), now.Add(-time.Millisecond), ""},
		{"38 bits from now", with(38, 15, 10, now), now, "less than 10 years after now"},
		{"39/16/8 on 2019-01-01", with(39, 16, 8, time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC)), now, "its range ends at 2036-06-02T21:56:53.888Z"},
		{"a layout already over", with(30, 23, 10, DefaultEpoch), now, "its range ends at 2026-01-13T"},
		{"leap day: 10 calendar years", with(39, 16, 8, time.Date(2038, 3, 1, 0, 0, 0, 0, time.UTC).Add(-span39)),
			time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC), ""},
		// Validate's rules come first.
		{"widths 0", with(0, 53, 10, DefaultEpoch), now, "every width must be positive (timestamp 0, node 53, sequence 10)"},
		{"sum 62", with(41, 11, 10, DefaultEpoch), now, "widths add up to 62, want 63"},
		{"sum 64", with(42, 12, 10, DefaultEpoch), now, "widths add up to 64, want 63"},
		{"node bits 33", with(20, 33, 10, DefaultEpoch), now, "at most 32 bits (node 33, sequence 10)"},
		{"zero epoch", with(41, 12, 10, time.Time{}), now, "epoch is not set"},
	} {
		err := c.l.ValidateNew(c.now)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: ValidateNew = %v, want nil", c.name, err)
		case c.want != "" && (err == nil || !errors.Is(err, ErrInvalidLayout) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: ValidateNew = %v, want ErrInvalidLayout, %q", c.name, err, c.want)
		}
	}
}

// FuzzParseLayout: ParseLayout never panics; it accepts exactly what a plain
// reference accepts (ASCII-space trimming, three '/'-separated runs of ASCII digits,
// a date or a strict RFC 3339 time of whole milliseconds, a valid layout), with the
// same layout; an accepted layout's String reads back to it; a refusal wraps
// ErrInvalidLayout and stays short; ValidateNew agrees with its two rules.
func FuzzParseLayout(f *testing.F) {
	for _, c := range [][2]string{
		{"41/12/10", "2026-01-01"}, {"41/10/12", "2026-01-01T00:00:00Z"}, {"39/16/8", "2026-01-01T00:00:00.250+02:00"},
		{"42/11/10", "2026-01-01T00:00:00.000Z"}, {"61/1/1", "1969-12-31T23:59:59.999Z"}, {"30/32/1", "9999-12-31"},
		{"41/11/10", "2026-01-01"}, {"42/12/10", "2026-01-01"}, {"20/33/10", "2026-01-01"}, {"0/53/10", "2026-01-01"},
		{"41//10", "2026-01-01"}, {"41/12/+10", "2026-01-01"}, {"99999/1/1", "2026-01-01"}, {"41/12/10", ""},
		{"41/12/10", "2026-01-01T00:00:00.0001Z"}, {"41/12/10", "2026-01-01T00:00:00,5Z"}, {"41/12/10", "2026-01-01T00:00:00+00:60"},
		{"41/12/10", "0001-01-01"}, {" 041/012/010 ", "\t2026-01-01\n"},
	} {
		f.Add(c[0], c[1], DefaultEpoch.UnixMilli())
	}
	f.Fuzz(func(t *testing.T, widths, epoch string, nowMs int64) {
		l, err := ParseLayout(widths, epoch)
		want, refOK := referenceLayout(widths, epoch)
		if err != nil {
			if refOK {
				t.Fatalf("ParseLayout(%q, %q) refused %v; the reference reads %v", widths, epoch, err, want)
			}
			if !errors.Is(err, ErrInvalidLayout) || !strings.HasPrefix(err.Error(), "snowflake: invalid layout") {
				t.Fatalf("ParseLayout(%q, %q): %v does not wrap ErrInvalidLayout", widths, epoch, err)
			}
			if len(err.Error()) > 512 { // two quotes of at most 32 bytes, \xNN escaped
				t.Fatalf("ParseLayout(%q, %q): an error of %d bytes", widths, epoch, len(err.Error()))
			}
			return
		}
		if !refOK || l != want {
			t.Fatalf("ParseLayout(%q, %q) = %v; the reference accepts %v, reads %v", widths, epoch, l, refOK, want)
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLayout(%q, %q) = %v, invalid: %v", widths, epoch, l, err)
		}
		if l.Epoch.Location() != time.UTC {
			t.Fatalf("ParseLayout(%q, %q): epoch in %v", widths, epoch, l.Epoch.Location())
		}
		w, e, _ := strings.Cut(l.String(), "@")
		if back, err := ParseLayout(w, e); err != nil || back != l || w != l.Widths() {
			t.Fatalf("ParseLayout(String() of %v) = %v, %v", l, back, err)
		}
		now := time.UnixMilli(nowMs).Add(time.Duration(uint64(nowMs)%1e6) * time.Nanosecond)
		wantNew := !l.Epoch.After(now) && !l.End().Before(now.UTC().AddDate(MinLifetimeYears, 0, 0))
		if err := l.ValidateNew(now); (err == nil) != wantNew || (err != nil && !errors.Is(err, ErrInvalidLayout)) {
			t.Fatalf("%v.ValidateNew(%v) = %v, want ok=%v", l, now, err, wantNew)
		}
	})
}

// rfc3339Shape is the shape of an RFC 3339 time, which time.Parse does not check
// on its own.
var rfc3339Shape = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$`)

// referenceLayout is ParseLayout written plainly: what it accepts and reads.
func referenceLayout(widths, epoch string) (Layout, bool) {
	const space = " \t\n\v\f\r"
	fields := strings.Split(strings.Trim(widths, space), "/")
	if len(fields) != 3 {
		return Layout{}, false
	}
	var w [3]int
	for i, f := range fields {
		if f == "" || strings.Trim(f, "0123456789") != "" {
			return Layout{}, false
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return Layout{}, false
		}
		w[i] = v
	}
	es := strings.Trim(epoch, space)
	e, err := time.Parse("2006-01-02", es)
	if err != nil || len(es) != 10 {
		e, err = time.Parse(time.RFC3339Nano, es)
		if err != nil || !rfc3339Shape.MatchString(es) {
			return Layout{}, false
		}
	}
	if e.Nanosecond()%1e6 != 0 {
		return Layout{}, false
	}
	l := Layout{Epoch: e.UTC(), TimestampBits: w[0], NodeBits: w[1], SequenceBits: w[2]}
	return l, l.Validate() == nil
}
