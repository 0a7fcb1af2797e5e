package password

import (
	_ "embed"
	"strings"
	"sync"
)

// commonList is common.txt: the 3,410 passwords of John the Ripper's
// password.lst (public domain; the file's header says where it comes from),
// lower-cased, one a line, most common first. Lines that start with "#!" are
// comments.
//
//go:embed common.txt
var commonList string

// commonSet is commonList as a set, built at the first IsCommon.
var commonSet = sync.OnceValue(func() map[string]struct{} {
	set := make(map[string]struct{}, 3500)
	for line := range strings.Lines(commonList) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" || strings.HasPrefix(line, "#!") {
			continue
		}
		set[line] = struct{}{}
	}
	return set
})

// CommonCount is how many passwords IsCommon knows.
func CommonCount() int { return len(commonSet()) }

// padding is what people append to a common password to pass a length rule:
// digits, ASCII punctuation and spaces.
const padding = "0123456789 !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// IsCommon reports whether pw is one of the common passwords shipped in the
// binary (ASVS 5.0 V6.2.12), compared without regard to case, or one of those
// with letters in it followed only by digits, punctuation and spaces
// ("Password2024!", "qwerty123456"): what people append to meet a length rule.
// Such a password is among the first an attacker tries.
func IsCommon(pw string) bool {
	if len(pw) > MaxLen {
		return false
	}
	set := commonSet()
	lower := strings.ToLower(pw)
	if _, ok := set[lower]; ok {
		return true
	}
	// Every split into a stem and a tail of padding. The stem needs a letter:
	// else every string of digits and dots (an address, a date) would be "1"
	// or "12" padded.
	for i := len(lower) - 1; i > 0 && strings.IndexByte(padding, lower[i]) >= 0; i-- {
		if _, ok := set[lower[:i]]; ok && hasLetter(lower[:i]) {
			return true
		}
	}
	return false
}

func hasLetter(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r >= 'a' && r <= 'z' }) >= 0
}

// IsCommon is the package's IsCommon: it lets account.Service refuse common
// passwords wherever a password is set.
func (Hasher) IsCommon(pw string) bool { return IsCommon(pw) }
