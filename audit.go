package idkeeper

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// AuditEntry is one entry of the audit log: who did what, when, from where. The
// log is append-only and tamper-evident: each entry's Hash covers its fields and
// the previous entry's Hash (Prev), so changing, removing or inserting an entry
// breaks every link after it (VerifyAudit).
type AuditEntry struct {
	Seq      uint64    // 1, 2, 3, … in append order
	At       time.Time // to the millisecond
	Actor    string    // "user:NAME", "key:ID", "operator:WHO" (OperatorActor) or "system"
	Action   string    // e.g. "lease.grant", "apikey.create", "user.login" (the Audit* constants)
	Target   string    // what it acted on: "node:17", "key:ab12…", "user:bob", "ip:10.0.0.0/8"
	RemoteIP string    // the actor's address; "" for the system
	Detail   string    // free text, at most MaxAuditTextLen bytes
	Prev     string    // hex SHA-256 Hash of the entry before; "" for the first
	Hash     string    // hex SHA-256 of the fields above (Seal)
}

// auditDomain separates the audit hash from any other SHA-256 use.
const auditDomain = "idkeeper audit v1\x00"

// Digest is the hex SHA-256 of e's fields but Hash, each length-prefixed, so no
// two different entries share an encoding.
func (e AuditEntry) Digest() string {
	h := sha256.New()
	var b [8]byte
	h.Write([]byte(auditDomain))
	binary.BigEndian.PutUint64(b[:], e.Seq)
	h.Write(b[:])
	binary.BigEndian.PutUint64(b[:], uint64(Millis(e.At).UnixMilli()))
	h.Write(b[:])
	for _, s := range []string{e.Actor, e.Action, e.Target, e.RemoteIP, e.Detail, e.Prev} {
		binary.BigEndian.PutUint64(b[:], uint64(len(s)))
		h.Write(b[:])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Seal returns e linked after the entry (seq, hash) — Seq = seq + 1, Prev = hash —
// with At to the millisecond, its text fields cut to their bounds, and Hash set.
func (e AuditEntry) Seal(seq uint64, hash string) AuditEntry {
	e.Seq, e.Prev, e.At = seq+1, hash, Millis(e.At)
	e.Actor = auditText(e.Actor, MaxAuditFieldLen)
	e.Action = auditText(e.Action, MaxAuditFieldLen)
	e.Target = auditText(e.Target, MaxAuditFieldLen)
	e.RemoteIP = auditText(e.RemoteIP, MaxAuditFieldLen)
	e.Detail = auditText(e.Detail, MaxAuditTextLen)
	e.Hash = e.Digest()
	return e
}

// auditText is s as the audit log keeps it: invalid UTF-8 replaced by U+FFFD,
// characters that are not text (notText: a forged line break in a logged user
// name, a bidi override, say) by a space, and cut to at most max bytes.
func auditText(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.ContainsFunc(s, notText) {
		s = strings.Map(func(r rune) rune {
			if notText(r) {
				return ' '
			}
			return r
		}, s)
	}
	return cut(s, max)
}

// cut returns s cut to at most max bytes, at a UTF-8 character boundary.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i]
}

// AuditBreak is the first broken link VerifyAudit found.
type AuditBreak struct {
	Seq    uint64 // the entry at which the chain breaks
	Reason string
}

func (b *AuditBreak) Error() string {
	return fmt.Sprintf("audit log broken at entry %d: %s", b.Seq, b.Reason)
}

// VerifyAudit checks a run of entries in Seq order: each entry's Hash is its
// Digest, and each links to the one before it (Seq + 1, Prev = its Hash). The first
// entry's Prev is trusted (its predecessor may have been pruned) unless its Seq is
// 1, where Prev must be "". headSeq and headHash, the store's AuditHead, must be
// the last entry's, so a truncated tail is found too (pass 0, "" to skip that
// check). It returns nil or the first *AuditBreak.
func VerifyAudit(entries []AuditEntry, headSeq uint64, headHash string) error {
	for i, e := range entries {
		switch {
		case e.Hash != e.Digest():
			return &AuditBreak{e.Seq, "its hash does not match its content"}
		case i == 0 && e.Seq == 1 && e.Prev != "":
			return &AuditBreak{e.Seq, "the first entry links to a predecessor"}
		case i > 0 && e.Seq != entries[i-1].Seq+1:
			return &AuditBreak{e.Seq, fmt.Sprintf("it follows entry %d: entries are missing", entries[i-1].Seq)}
		case i > 0 && e.Prev != entries[i-1].Hash:
			return &AuditBreak{e.Seq, fmt.Sprintf("it does not link to entry %d", entries[i-1].Seq)}
		}
	}
	if headSeq == 0 && headHash == "" {
		return nil
	}
	if len(entries) == 0 {
		return &AuditBreak{headSeq, "the log holds no entry up to its head"}
	}
	last := entries[len(entries)-1]
	if last.Seq != headSeq || last.Hash != headHash {
		return &AuditBreak{last.Seq, fmt.Sprintf("the log's head is entry %d, not this last entry: entries are missing at the end", headSeq)}
	}
	return nil
}

// Audit actions.
const (
	AuditLogin          = "user.login"
	AuditLoginFailed    = "user.login_failed"
	AuditLogout         = "user.logout"
	AuditUserCreate     = "user.create"
	AuditUserUpdate     = "user.update" // role, disabled
	AuditPasswordChange = "user.password"
	AuditUserWebhook    = "user.webhook"      // a user set or cleared their Discord webhook; Detail names it masked
	AuditWebhookTest    = "user.webhook_test" // a user sent a test message to their webhook (admin web); Detail: masked URL, outcome
	AuditKeyCreate      = "apikey.create"
	AuditKeyUpdate      = "apikey.update"
	AuditKeyRevoke      = "apikey.revoke"
	AuditAllowAdd       = "allowlist.add"
	AuditAllowRemove    = "allowlist.remove"
	AuditLeaseGrant     = "lease.grant"
	AuditLeaseRemove    = "lease.remove"
	AuditLeaseReclaim   = "lease.reclaim"
	AuditLeaseRevoke    = "lease.revoke"
	AuditLeaseRestore   = "lease.restore"
	AuditSkewReject     = "skew.reject"
	// AuditBackupRestore: the store's whole state replaced by a backup through the
	// admin API (POST /admin/api/restore).
	AuditBackupRestore = "backup.restore"
)
