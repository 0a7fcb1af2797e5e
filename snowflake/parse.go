package snowflake

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// ErrInvalidID is wrapped by every error ParseID returns.
var ErrInvalidID = errors.New("snowflake: invalid ID")

// maxQuotedInput bounds how much of a refused input an error repeats, so that a
// huge or hostile input never makes a huge error message.
const maxQuotedInput = 32

// ParseID reads an ID written in decimal, as people and programs pass IDs around:
// ASCII digits only, optionally between double quotes (the JSON string form, in
// which the gateway's format=string answers give IDs), the whole optionally
// surrounded by ASCII whitespace (space, \t, \n, \v, \f, \r). Leading zeros are
// accepted and mean nothing ("007" is 7): the canonical form of an ID, which
// strconv.FormatInt(id, 10) writes, is its digits without leading zeros ("0" for
// zero).
//
// It refuses, with an error that wraps ErrInvalidID and quotes the input (at most
// its first 32 bytes, so that the message stays short whatever the input): an
// empty ID (also "" and blanks), a sign ('-' or '+': an ID is never negative), any
// other character than a digit (whitespace inside the quotes included), an
// unmatched quote, and a value above math.MaxInt64. It checks no layout: every value
// 0..math.MaxInt64 decodes under every valid Layout (the widths add up to 63, so
// the timestamp field never exceeds MaxTimestamp and the time never reaches End).
func ParseID(s string) (int64, error) {
	t := trimASCIISpace(s)
	if t == "" {
		return 0, invalidID(s, "empty")
	}
	digits := t
	if t[0] == '"' || t[len(t)-1] == '"' {
		if len(t) < 2 || t[0] != '"' || t[len(t)-1] != '"' {
			return 0, invalidID(t, "unmatched double quote")
		}
		digits = t[1 : len(t)-1]
		if digits == "" {
			return 0, invalidID(t, "empty")
		}
	}
	if c := digits[0]; c == '-' || c == '+' {
		return 0, invalidID(t, "a sign is not allowed: an ID is written in digits only, and is never negative")
	}
	var n int64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, invalidID(t, describeNonDigit(digits[i:])+" is not a decimal digit")
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			// A later non-digit would be an error too; overflow is the one reported.
			return 0, invalidID(t, "larger than "+strconv.FormatInt(math.MaxInt64, 10))
		}
		n = n*10 + d
	}
	return n, nil
}

// invalidID is the error of ParseID for input, with what is wrong with it.
func invalidID(input, reason string) error {
	return fmt.Errorf("%w %s: %s", ErrInvalidID, quoteInput(input), reason)
}

// quoteInput quotes at most maxQuotedInput bytes of s, cut at a character
// boundary, with "…" after it when s is longer.
func quoteInput(s string) string {
	if len(s) <= maxQuotedInput {
		return strconv.Quote(s)
	}
	cut := maxQuotedInput
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}

// describeNonDigit names the character s starts with: quoted, or its byte when s
// starts with a byte that is not UTF-8.
func describeNonDigit(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("the byte 0x%02x", s[0])
	}
	return strconv.QuoteRune(r)
}

// trimASCIISpace cuts ASCII whitespace (space, \t, \n, \v, \f, \r) from both ends
// of s; other Unicode spaces are left, and refused as non-digits.
func trimASCIISpace(s string) string {
	isSpace := func(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}
