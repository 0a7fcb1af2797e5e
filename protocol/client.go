package protocol

import (
	"sort"
	"strings"
	"unicode/utf8"
)

// Bounds of the ClientInfo a client reports with Alloc, in bytes.
const (
	MaxHostLen       = 253
	MaxLabels        = 16
	MaxLabelKeyLen   = 63
	MaxLabelValueLen = 256
)

// ClientInfo is what a client reports about itself with Alloc (DESIGN §3 leaves
// it out of the Requester): its host name and free labels such as service and
// version. It is kept in the lease history only, to answer "which process
// minted this ID"; nothing is decided on it.
type ClientInfo struct {
	Host   string            // at most MaxHostLen bytes of printable UTF-8
	Labels map[string]string // at most MaxLabels; keys 1..MaxLabelKeyLen of [A-Za-z0-9_.-/], values printable UTF-8
}

// Validate returns an INVALID_REQUEST Error naming the first bad field of c: the
// bounds above, and text as Requester.Validate has it (no character of Unicode
// categories Cc, Cf, Zl or Zp).
func (c ClientInfo) Validate() error { return c.validate(NotText) }

// ValidateStored is Validate with the rule of records written before issue #29
// (C0 controls and DEL refused only), for records read back from a store or a backup.
func (c ClientInfo) ValidateStored() error { return c.validate(isControl) }

func (c ClientInfo) validate(bad func(rune) bool) error {
	printable := func(s string) bool { return utf8.ValidString(s) && !strings.ContainsFunc(s, bad) }
	if len(c.Host) > MaxHostLen || !printable(c.Host) {
		return Invalidf("client.host", "client.host has at most %d bytes of printable UTF-8", MaxHostLen)
	}
	if len(c.Labels) > MaxLabels {
		return Invalidf("client.labels", "at most %d client labels, got %d", MaxLabels, len(c.Labels))
	}
	for _, k := range c.LabelKeys() {
		if k == "" || len(k) > MaxLabelKeyLen || strings.ContainsFunc(k, notLabelKey) {
			return Invalidf("client.labels", "a client label name has 1 to %d characters of A-Z a-z 0-9 _ . - /: %q", MaxLabelKeyLen, k)
		}
		if v := c.Labels[k]; len(v) > MaxLabelValueLen || !printable(v) {
			return Invalidf("client.labels", "the value of client label %q has at most %d bytes of printable UTF-8", k, MaxLabelValueLen)
		}
	}
	return nil
}

// LabelKeys returns the label names, sorted.
func (c ClientInfo) LabelKeys() []string {
	keys := make([]string, 0, len(c.Labels))
	for k := range c.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// IsZero reports whether c holds nothing.
func (c ClientInfo) IsZero() bool { return c.Host == "" && len(c.Labels) == 0 }

func notLabelKey(r rune) bool {
	return notBase64URL(r) && r != '.' && r != '/'
}
