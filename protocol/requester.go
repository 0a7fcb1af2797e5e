package protocol

import (
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxMachineIDLen is the longest machine ID a Requester may carry, in bytes.
const MaxMachineIDLen = 256

// MaxInstanceLen is the longest instance a Requester may carry, in bytes.
const MaxInstanceLen = 64

// Requester identifies one client session (DESIGN §3): the machine it runs on, the
// PID and start time of its process, and the session's instance. Machine ID, PID
// and start time alone collide: container images bake one machine ID, every
// container is PID 1, start times share the host's boot time at 10 ms resolution,
// and two sessions of one process share all three. The instance, random per session
// (NewInstance), tells them apart, so the idempotent Alloc never hands one lease to
// two live generators.
type Requester struct {
	MachineID string
	PID       int
	StartedAt time.Time // kept to the millisecond
	// Instance is the session's random instance: base64url characters (A–Z, a–z,
	// 0–9, '-', '_'), at most MaxInstanceLen. Empty for callers that manage their own
	// identity; the client library always sets one.
	Instance string
}

// NewInstance returns a fresh random instance: 128 bits as 22 base64url characters.
func NewInstance() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Validate returns an INVALID_REQUEST Error naming the first bad field: an empty or
// over-long machine ID, one with invalid UTF-8 or a character that is not text
// (Unicode categories Cc, Cf, Zl and Zp: controls, bidi overrides, zero-width
// characters, line and paragraph separators), a PID below 1, a zero start time, or
// an instance that is too long or holds a character outside base64url. It is the
// rule for every requester a caller sends.
func (r Requester) Validate() error { return r.validate(NotText) }

// ValidateStored is Validate with the rule of the records written before issue #29,
// which refused only C0 controls and DEL in a machine ID: for requesters read back
// from a store or a backup, so that a record kept by an older version never makes a
// restore fail.
func (r Requester) ValidateStored() error { return r.validate(isControl) }

func (r Requester) validate(bad func(rune) bool) error {
	switch {
	case r.MachineID == "":
		return Invalidf("requester.machineId", "requester.machineId is required")
	case len(r.MachineID) > MaxMachineIDLen:
		return Invalidf("requester.machineId", "requester.machineId is longer than %d bytes", MaxMachineIDLen)
	case !utf8.ValidString(r.MachineID) || strings.ContainsFunc(r.MachineID, bad):
		return Invalidf("requester.machineId", "requester.machineId must be printable UTF-8, without control, format (bidi, zero-width) or line-separator characters")
	case r.PID < 1:
		return Invalidf("requester.pid", "requester.pid must be at least 1")
	case r.StartedAt.IsZero():
		return Invalidf("requester.startedAt", "requester.startedAt is required")
	case len(r.Instance) > MaxInstanceLen:
		return Invalidf("requester.instance", "requester.instance is longer than %d characters", MaxInstanceLen)
	case strings.ContainsFunc(r.Instance, notBase64URL):
		return Invalidf("requester.instance", "requester.instance must hold base64url characters only (A-Z a-z 0-9 - _)")
	}
	return nil
}

// isControl reports a C0 control or DEL: the rule of records written before issue #29.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// NotText reports a rune that must not appear in text a caller sends: Unicode
// categories Cc (controls, C1 included, e.g. U+0085), Cf (format: bidi overrides
// such as U+202E, zero-width characters such as U+200B), Zl and Zp (U+2028,
// U+2029). Such text would reorder, hide or break lines in pages, the audit log and
// the logs.
func NotText(r rune) bool { return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) }

// TextOnly is s with invalid UTF-8 and every character that is not text (NotText)
// replaced by '?': fit for a page, the audit log or a log line.
func TextOnly(s string) string {
	return strings.Map(func(r rune) rune {
		if NotText(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

func notBase64URL(r rune) bool {
	return !('A' <= r && r <= 'Z' || 'a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-' || r == '_')
}

// Key is the requester's canonical identity, stable across processes and stores:
// "<pid>/<startedAt unix ms>/<instance>/<machine ID>". Two requesters are the same
// session exactly when their keys are equal.
func (r Requester) Key() string {
	return strconv.Itoa(r.PID) + "/" + strconv.FormatInt(r.StartedAt.UnixMilli(), 10) + "/" + r.Instance + "/" + r.MachineID
}

// String is the requester's key.
func (r Requester) String() string { return r.Key() }

// LogValue implements slog.LogValuer: a requester is logged as a group of fields,
// key (Key, as the audit log names it), machineId, pid, startedAt and instance
// (left out when empty), never as one string to pick apart.
func (r Requester) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("key", r.Key()), slog.String("machineId", r.MachineID), slog.Int("pid", r.PID),
		slog.Time("startedAt", r.StartedAt)}
	if r.Instance != "" {
		attrs = append(attrs, slog.String("instance", r.Instance))
	}
	return slog.GroupValue(attrs...)
}
