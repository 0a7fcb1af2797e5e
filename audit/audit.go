// Package audit owns the audit log's record and its hash chain: an Entry, how it is
// sealed after the log's head (Entry.Seal) and how a run of entries is verified
// (Verify), the actions the registry and the admin record, and the context values
// naming who acts and from where (WithActor, WithRemoteIP). It imports only the
// standard library and package protocol; stores keep entries through the root
// package account's Store (audit.Store), and the registry and package account append them.
package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// Entry is one entry of the audit log: who did what, when, from where. The
// log is append-only and tamper-evident: each entry's Hash covers its fields and
// the previous entry's Hash (Prev), so changing, removing or inserting an entry
// breaks every link after it (Verify).
type Entry struct {
	Seq      uint64    // 1, 2, 3, … in append order
	At       time.Time // to the millisecond
	Actor    string    // "user:NAME", "key:ID", "operator:WHO"  or "system"
	Action   string    // e.g. "lease.grant", "apikey.create", "user.login" (the constants of actions.go)
	Target   string    // what it acted on: "node:17", "key:ab12…", "user:bob", "ip:10.0.0.0/8"
	RemoteIP string    // the actor's address; "" for the system
	Detail   string    // free text, at most MaxTextLen bytes
	Prev     string    // hex SHA-256 Hash of the entry before; "" for the first
	Hash     string    // hex SHA-256 of the fields above (Seal)
}

// domain separates the audit hash from any other SHA-256 use.
const domain = "idkeeper audit v1\x00"

// Digest is the hex SHA-256 of e's fields but Hash, each length-prefixed, so no
// two different entries share an encoding.
func (e Entry) Digest() string {
	h := sha256.New()
	var b [8]byte
	h.Write([]byte(domain))
	binary.BigEndian.PutUint64(b[:], e.Seq)
	h.Write(b[:])
	binary.BigEndian.PutUint64(b[:], uint64(protocol.Millis(e.At).UnixMilli()))
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
func (e Entry) Seal(seq uint64, hash string) Entry {
	e.Seq, e.Prev, e.At = seq+1, hash, protocol.Millis(e.At)
	e.Actor = text(e.Actor, MaxFieldLen)
	e.Action = text(e.Action, MaxFieldLen)
	e.Target = text(e.Target, MaxFieldLen)
	e.RemoteIP = text(e.RemoteIP, MaxFieldLen)
	e.Detail = text(e.Detail, MaxTextLen)
	e.Hash = e.Digest()
	return e
}

// text is s as the audit log keeps it: invalid UTF-8 replaced by U+FFFD,
// characters that are not text (protocol.NotText: a forged line break in a logged user
// name, a bidi override, say) by a space, and cut to at most max bytes.
func text(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.ContainsFunc(s, protocol.NotText) {
		s = strings.Map(func(r rune) rune {
			if protocol.NotText(r) {
				return ' '
			}
			return r
		}, s)
	}
	return Cut(s, max)
}

// Cut returns s cut to at most max bytes, at a UTF-8 character boundary.
func Cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i]
}

// Break is the first broken link Verify found.
type Break struct {
	Seq    uint64 // the entry at which the chain breaks
	Reason string
}

func (b *Break) Error() string {
	return fmt.Sprintf("audit log broken at entry %d: %s", b.Seq, b.Reason)
}

// Verify checks a run of entries in Seq order: each entry's Hash is its
// Digest, and each links to the one before it (Seq + 1, Prev = its Hash). The first
// entry's Prev is trusted (its predecessor may have been pruned) unless its Seq is
// 1, where Prev must be "". headSeq and headHash, the store's AuditHead, must be
// the last entry's, so a truncated tail is found too (pass 0, "" to skip that
// check). It returns nil or the first *Break.
func Verify(entries []Entry, headSeq uint64, headHash string) error {
	for i, e := range entries {
		switch {
		case e.Hash != e.Digest():
			return &Break{e.Seq, "its hash does not match its content"}
		case i == 0 && e.Seq == 1 && e.Prev != "":
			return &Break{e.Seq, "the first entry links to a predecessor"}
		case i > 0 && e.Seq != entries[i-1].Seq+1:
			return &Break{e.Seq, fmt.Sprintf("it follows entry %d: entries are missing", entries[i-1].Seq)}
		case i > 0 && e.Prev != entries[i-1].Hash:
			return &Break{e.Seq, fmt.Sprintf("it does not link to entry %d", entries[i-1].Seq)}
		}
	}
	if headSeq == 0 && headHash == "" {
		return nil
	}
	if len(entries) == 0 {
		return &Break{headSeq, "the log holds no entry up to its head"}
	}
	last := entries[len(entries)-1]
	if last.Seq != headSeq || last.Hash != headHash {
		return &Break{last.Seq, fmt.Sprintf("the log's head is entry %d, not this last entry: entries are missing at the end", headSeq)}
	}
	return nil
}
