package idkeeper

import (
	"strings"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper/protocol"
)

// CleanText trims s and reports whether it is printable UTF-8 of at most max bytes,
// without a character of Unicode categories Cc, Cf, Zl or Zp (as Requester.Validate):
// the rule for notes and descriptions typed by operators.
func CleanText(s string, max int) (string, bool) {
	s = strings.TrimSpace(s)
	return s, len(s) <= max && utf8.ValidString(s) && !strings.ContainsFunc(s, notText)
}

// textOnly is s with invalid UTF-8 and every character that is not text (notText)
// replaced by '?': for what a browser sends (its User-Agent), kept and shown as is.
func textOnly(s string) string { return protocol.TextOnly(s) }
