package snowflake

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestParseID(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"7", 7},
		{"120610764938543104", 120610764938543104},
		{"9223372036854775807", math.MaxInt64},
		{"007", 7},
		{"0000000000000000000000000009223372036854775807", math.MaxInt64},
		{"000", 0},
		{`"120610764938543104"`, 120610764938543104},
		{` "42"` + "\n", 42},
		{"\t\v\f\r 42 \r\n", 42},
		{`"0"`, 0},
	} {
		got, err := ParseID(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseID(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestParseIDRefuses(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // in the error
	}{
		{"", `"": empty`},
		{" \t\n", `" \t\n": empty`},
		{`""`, `"\"\"": empty`},
		{` "" `, `"\"\"": empty`},
		{`"`, "unmatched double quote"},
		{`"12`, "unmatched double quote"},
		{`12"`, "unmatched double quote"},
		{`"12"3"`, `'"' is not a decimal digit`},
		{"-1", "a sign is not allowed"},
		{"-0", "a sign is not allowed"},
		{"+1", "a sign is not allowed"},
		{`"+1"`, "a sign is not allowed"},
		{"1-", `'-' is not a decimal digit`},
		{"12a", `'a' is not a decimal digit`},
		{"0x10", `'x' is not a decimal digit`},
		{"1e3", `'e' is not a decimal digit`},
		{"1.0", `'.' is not a decimal digit`},
		{"1_000", `'_' is not a decimal digit`},
		{"1 2", `' ' is not a decimal digit`},
		{`" 12"`, `' ' is not a decimal digit`},
		{`"12 "`, `' ' is not a decimal digit`},
		{"'12'", `'\'' is not a decimal digit`},
		{"12\x00", `'\x00' is not a decimal digit`},
		{"\u00a012", `'\u00a0' is not a decimal digit`}, // no-break space: not ASCII whitespace
		{"١٢٣", `'١' is not a decimal digit`},           // Arabic-Indic digits
		{"１２", `'１' is not a decimal digit`},            // full-width digits
		{"12\xff", "the byte 0xff is not a decimal digit"},
		{"9223372036854775808", "larger than 9223372036854775807"},
		{"18446744073709551616", "larger than 9223372036854775807"},
		{"99999999999999999999999999", "larger than 9223372036854775807"},
		{"99999999999999999999x", "larger than 9223372036854775807"},
	} {
		got, err := ParseID(c.in)
		if err == nil {
			t.Errorf("ParseID(%q) = %d, want an error", c.in, got)
			continue
		}
		if !errors.Is(err, ErrInvalidID) || !strings.HasPrefix(err.Error(), "snowflake: invalid ID ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseID(%q): %v; want ErrInvalidID, %q", c.in, err, c.want)
		}
	}
}

// A huge input is quoted only in part, cut at a character boundary.
func TestParseIDErrorIsShort(t *testing.T) {
	in := strings.Repeat("é", 1<<16)
	_, err := ParseID(in)
	if err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), `"…: `) || strings.Contains(err.Error(), `\x`) {
		t.Fatalf("ParseID(64 KiB of é): %v", err)
	}
}

// FuzzParseID: ParseID never panics; it accepts exactly what a plain reference
// accepts (ASCII-space trimming, one pair of quotes, digits only, strconv.ParseInt
// in range), with the same value; an accepted ID's canonical form
// (strconv.FormatInt) is its digits without leading zeros; a refusal wraps
// ErrInvalidID and its message stays short whatever the input.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"0", "120610764938543104", `"120610764938543104"`, " 42\n", "9223372036854775807",
		"9223372036854775808", "-1", "+1", `"`, `""`, "007", "1 2", "١٢٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseID(s)

		ref := strings.Trim(s, " \t\n\v\f\r")
		if len(ref) >= 2 && ref[0] == '"' && ref[len(ref)-1] == '"' {
			ref = ref[1 : len(ref)-1]
		}
		allDigits := ref != "" && strings.Trim(ref, "0123456789") == ""
		var want int64
		refOK := false
		if allDigits {
			v, perr := strconv.ParseInt(ref, 10, 64)
			want, refOK = v, perr == nil
		}

		if err != nil {
			if refOK {
				t.Fatalf("ParseID(%q) refused %v; the reference reads %d", s, err, want)
			}
			if !errors.Is(err, ErrInvalidID) || !strings.HasPrefix(err.Error(), "snowflake: invalid ID ") {
				t.Fatalf("ParseID(%q): %v does not wrap ErrInvalidID", s, err)
			}
			if len(err.Error()) > 256 {
				t.Fatalf("ParseID(%q): an error of %d bytes", s, len(err.Error()))
			}
			return
		}
		if !refOK || got != want {
			t.Fatalf("ParseID(%q) = %d; the reference accepts %v, reads %d", s, got, refOK, want)
		}
		if got < 0 {
			t.Fatalf("ParseID(%q) = %d, negative", s, got)
		}
		canonical := strings.TrimLeft(ref, "0")
		if canonical == "" {
			canonical = "0"
		}
		if back := strconv.FormatInt(got, 10); back != canonical {
			t.Fatalf("ParseID(%q) = %d, formats back as %q, want %q", s, got, back, canonical)
		}
		if again, err := ParseID(strconv.FormatInt(got, 10)); err != nil || again != got {
			t.Fatalf("ParseID(FormatInt(%d)) = %d, %v", got, again, err)
		}
	})
}
