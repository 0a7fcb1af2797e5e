// Package backup writes a store's snapshot (snapshot.Store) to a file and
// loads one back so that no node ID can be handed out twice (issue #12, DESIGN §7).
//
// The file (docs/backup.md) is versioned, store-neutral and streamed: one JSON
// line of header, one JSON line per record in the order of
// snapshot.Record, and a trailer line with the record count and the
// SHA-256 of every byte before it. A Writer writes it; a Reader reads it back as an
// snapshot.Source that checks every line and returns io.EOF only once the
// trailer has proved the file whole, so that a store's LoadSnapshot writes nothing
// from a damaged, truncated or forged file. Export and Import join them to a store;
// Import makes the restored state safe with an snapshot.RestorePlan (PlanFor).
//
// Standard library and the root package only (and internal/shortlease, standard
// library only, through which the hidden --unsafe-short-leases of `idkeeper backup
// import` reaches PlanFor and Import).
package backup

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// The file format.
const (
	// FormatName is the header's "format": what marks a file as a backup.
	FormatName = "idkeeper-backup"
	// Version is the format version this package writes and the newest it reads.
	// Version 2 added the lease history records; version 1 files (none) are not
	// read. Version 3 (issue #22) added the pool's first node ID and layout
	// (meta.first, meta.layout); a version 2 file is read as a pool from node ID 0
	// on the default layout. An older idkeeper refuses a version 3 file
	// (ErrNewerVersion) rather than import its node range as 0-based.
	Version = 3
	// minVersion is the oldest format version this package reads.
	minVersion = 2
	// MaxLine is the longest line, in bytes without its line feed. The longest record
	// (an audit entry of bounded fields, escaped) is far below it.
	MaxLine = 64 << 10
)

// timeLayout is every time of the file: RFC 3339, milliseconds, UTC. A zero time
// is an absent member.
const timeLayout = wire.TimeFormat

// maxText bounds the strings that the root types leave unbounded (who created a
// key, a lease's key ID, a password hash), in bytes.
const maxText = 1024

// Errors a Reader wraps, for errors.Is.
var (
	// ErrNotBackup: the file does not start with a backup header.
	ErrNotBackup = errors.New("not an IdKeeper backup file")
	// ErrNewerVersion: the file was written by a newer IdKeeper.
	ErrNewerVersion = errors.New("the backup was written in a newer format")
	// ErrTruncated: the file ends before its trailer, or inside a line.
	ErrTruncated = errors.New("the backup is truncated")
	// ErrDamaged: a line is malformed, out of bounds or out of order, the count or
	// checksum of the trailer does not match, or data follows the trailer.
	ErrDamaged = errors.New("the backup is damaged")
	// ErrRedacted: the file is a redacted backup (Header.Redacted), which reads
	// and checks as any backup but never restores (CheckRestorable).
	ErrRedacted = errors.New("the backup is redacted")
)

// FormatError is what a Reader refuses: the line (1 is the header; 0 when the
// fault is no line's) and why. It wraps one of ErrNotBackup, ErrNewerVersion,
// ErrTruncated and ErrDamaged.
type FormatError struct {
	Line int
	Kind error // ErrNotBackup, ErrNewerVersion, ErrTruncated or ErrDamaged
	Msg  string
}

func (e *FormatError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%v: line %d: %s", e.Kind, e.Line, e.Msg)
	}
	return fmt.Sprintf("%v: %s", e.Kind, e.Msg)
}

func (e *FormatError) Unwrap() error { return e.Kind }

// Header is the first line of a backup.
type Header struct {
	Version int
	TakenAt time.Time
	Store   string // the store it was taken from: "bolt", "redis"
	// Meta is the snapshot's head; Meta.Generation is the source store's generation.
	Meta snapshot.Meta
	// Redacted (issue #29): the file holds no secret — every API key's hash, user's
	// password hash and webhook URL left out (Source.Redacted) — and so can never
	// be restored: Import refuses it (ErrRedacted), for it would leave no account
	// able to log in and no key valid. The header's member "redacted": true; a
	// full backup has none, as before.
	Redacted bool
}

// CheckRestorable returns nil when a backup with header h may be restored, and
// a *FormatError wrapping ErrRedacted, saying why, for a redacted one.
func CheckRestorable(h Header) error {
	if !h.Redacted {
		return nil
	}
	return &FormatError{Line: 1, Kind: ErrRedacted, Msg: "it was written without the API keys' hashes, the users' " +
		"password hashes and the webhook URLs (an operator's backup), so restoring it would lock every account and " +
		"key out: it can be read and checked, never restored; restore a full backup, which only an admin downloads"}
}

// The lines, as JSON. Members appear in this order; members marked omitempty are
// absent when zero; each line is exactly json.Marshal of its struct (canonical), so
// a file has one spelling and the checksum covers the records' meaning.
type (
	headerLine struct {
		Format  string     `json:"format"`
		Version int        `json:"version"`
		TakenAt string     `json:"takenAt"`
		Source  sourceJSON `json:"source"`
		Meta    metaJSON   `json:"meta"`
		// Redacted (issue #29): absent in a full backup.
		Redacted bool `json:"redacted,omitempty"`
	}
	sourceJSON struct {
		Store      string         `json:"store"`
		Generation generationJSON `json:"generation"`
	}
	generationJSON struct {
		ID     string `json:"id"`
		Number uint64 `json:"number"`
		Origin string `json:"origin"`
		At     string `json:"at,omitempty"`
	}
	metaJSON struct {
		Fence uint64 `json:"fence"`
		Nodes int    `json:"nodes"`
		// First and Layout (version 3): the pool's first node ID (absent: 0) and
		// its layout (idkeeper.FormatLayout; required in version 3).
		First     int64  `json:"first,omitempty"`
		Layout    string `json:"layout,omitempty"`
		AuditSeq  uint64 `json:"auditSeq"`
		AuditHash string `json:"auditHash,omitempty"`
	}
	nodeLine struct {
		Kind             string     `json:"kind"`
		ID               int64      `json:"id"`
		Watermark        string     `json:"watermark,omitempty"`
		Floor            string     `json:"floor,omitempty"`
		QuarantinedUntil string     `json:"quarantinedUntil,omitempty"`
		LastToken        uint64     `json:"lastToken,omitempty"`
		Restorable       bool       `json:"restorable,omitempty"`
		Lease            *leaseJSON `json:"lease,omitempty"`
	}
	leaseJSON struct {
		Requester requesterJSON `json:"requester"`
		NotBefore string        `json:"notBefore"`
		ExpiresAt string        `json:"expiresAt"`
		Token     uint64        `json:"token"`
		GrantedAt string        `json:"grantedAt,omitempty"`
		RenewedAt string        `json:"renewedAt,omitempty"`
		KeyID     string        `json:"keyId,omitempty"`
	}
	requesterJSON struct {
		MachineID string `json:"machineId"`
		PID       int    `json:"pid"`
		StartedAt string `json:"startedAt"`
		Instance  string `json:"instance,omitempty"`
	}
	keyLine struct {
		Kind        string `json:"kind"`
		ID          string `json:"id"`
		Hash        string `json:"hash"` // hex SHA-256 of the secret: never the secret; "" in a redacted backup
		Description string `json:"description,omitempty"`
		CreatedAt   string `json:"createdAt,omitempty"`
		CreatedBy   string `json:"createdBy,omitempty"`
		ExpiresAt   string `json:"expiresAt,omitempty"`
		MaxNodes    int    `json:"maxNodes,omitempty"`
		Bootstrap   bool   `json:"bootstrap,omitempty"`
		Admin       bool   `json:"admin,omitempty"`
		RevokedAt   string `json:"revokedAt,omitempty"`
		LastUsedAt  string `json:"lastUsedAt,omitempty"`
	}
	userLine struct {
		Kind              string `json:"kind"`
		Name              string `json:"name"`
		Role              string `json:"role"`
		PasswordHash      string `json:"passwordHash,omitempty"` // PHC string: never the password
		Disabled          bool   `json:"disabled,omitempty"`
		CreatedAt         string `json:"createdAt,omitempty"`
		CreatedBy         string `json:"createdBy,omitempty"`
		Epoch             uint64 `json:"epoch,omitempty"`
		PasswordChangedAt string `json:"passwordChangedAt,omitempty"`
		LastLoginAt       string `json:"lastLoginAt,omitempty"`
		Version           uint64 `json:"version,omitempty"`
		Webhook           string `json:"webhook,omitempty"` // the Discord webhook URL, token and all: a secret
	}
	allowLine struct {
		Kind      string `json:"kind"`
		Prefix    string `json:"prefix"`
		Note      string `json:"note,omitempty"`
		CreatedBy string `json:"createdBy,omitempty"`
		CreatedAt string `json:"createdAt,omitempty"`
	}
	auditLine struct {
		Kind     string `json:"kind"`
		Seq      uint64 `json:"seq"`
		At       string `json:"at"`
		Actor    string `json:"actor,omitempty"`
		Action   string `json:"action,omitempty"`
		Target   string `json:"target,omitempty"`
		RemoteIP string `json:"remoteIp,omitempty"`
		Detail   string `json:"detail,omitempty"`
		Prev     string `json:"prev,omitempty"`
		Hash     string `json:"hash"`
	}
	// historyLine's end is "ended": a line with a member "end" is the trailer.
	historyLine struct {
		Kind        string            `json:"kind"`
		Node        int64             `json:"node"`
		Token       uint64            `json:"token"`
		Requester   requesterJSON     `json:"requester"`
		KeyID       string            `json:"keyId"`
		Host        string            `json:"host,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		GrantedAt   string            `json:"grantedAt"`
		NotBefore   string            `json:"notBefore"`
		WindowEnd   string            `json:"windowEnd"`
		End         string            `json:"ended,omitempty"`
		EndedAt     string            `json:"endedAt,omitempty"`
		MintedUpTo  string            `json:"mintedUpTo,omitempty"`
		FromReceipt bool              `json:"fromReceipt,omitempty"`
	}
	trailerLine struct {
		End     bool   `json:"end"`
		Records uint64 `json:"records"`
		SHA256  string `json:"sha256"`
	}
)

// The record kinds, in file order.
const (
	kindNode  = "node"
	kindKey   = "key"
	kindUser  = "user"
	kindAllow = "allow"
	kindAudit = "audit"
	// kindHistory (format version 2): the lease history.
	kindHistory = "history"
)

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return protocol.Millis(t).UTC().Format(timeLayout)
}

// parseTime reads a time of the file: "" is zero; anything else must be exactly
// how fmtTime spells it.
func parseTime(member, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(timeLayout, s)
	if err != nil || t.IsZero() || t.UTC().Format(timeLayout) != s {
		return time.Time{}, fmt.Errorf("%s %q is not a time as YYYY-MM-DDThh:mm:ss.mmmZ", member, s)
	}
	return t, nil
}

// encodeHeader is h's line, without its line feed.
func encodeHeader(h Header) ([]byte, error) {
	g := h.Meta.Generation
	return json.Marshal(headerLine{Format: FormatName, Version: h.Version, TakenAt: fmtTime(h.TakenAt),
		Source: sourceJSON{Store: h.Store, Generation: generationJSON{ID: g.ID, Number: g.Number, Origin: string(g.Origin), At: fmtTime(g.At)}},
		Meta: metaJSON{Fence: h.Meta.Fence, Nodes: h.Meta.Nodes, First: int64(h.Meta.First), Layout: layoutText(h.Meta.Layout),
			AuditSeq: h.Meta.AuditSeq, AuditHash: h.Meta.AuditHash}, Redacted: h.Redacted})
}

// redact is rec without its secrets, as a redacted backup holds it: a key
// without its hash, a user without its password hash and webhook URL. The
// records of rec are copied, never changed.
func redact(rec snapshot.Record) snapshot.Record {
	if k := rec.Key; k != nil {
		c := *k
		c.Hash = nil
		rec.Key = &c
	}
	if u := rec.User; u != nil {
		c := *u
		c.PasswordHash, c.Webhook = "", ""
		rec.User = &c
	}
	return rec
}

// layoutText is l as a header holds it: idkeeper.FormatLayout, "" for the zero
// Layout (a version 2 header).
func layoutText(l idkeeper.Layout) string {
	if l == (idkeeper.Layout{}) {
		return ""
	}
	return idkeeper.FormatLayout(l)
}

// encodeRecord is rec's line, without its line feed. A lease's receipt is never
// written (stores hold none).
func encodeRecord(rec snapshot.Record) ([]byte, error) {
	switch {
	case rec.Node != nil:
		n := rec.Node
		l := nodeLine{Kind: kindNode, ID: int64(n.NodeID), Watermark: fmtTime(n.Watermark), Floor: fmtTime(n.Floor),
			QuarantinedUntil: fmtTime(n.QuarantinedUntil), LastToken: n.LastToken, Restorable: n.Restorable}
		if ls := n.Lease; ls != nil {
			l.Lease = &leaseJSON{Requester: requesterJSON{MachineID: ls.Requester.MachineID, PID: ls.Requester.PID,
				StartedAt: fmtTime(ls.Requester.StartedAt), Instance: ls.Requester.Instance},
				NotBefore: fmtTime(ls.NotBefore), ExpiresAt: fmtTime(ls.ExpiresAt), Token: ls.FencingToken,
				GrantedAt: fmtTime(ls.GrantedAt), RenewedAt: fmtTime(ls.RenewedAt), KeyID: ls.KeyID}
		}
		return json.Marshal(l)
	case rec.Key != nil:
		k := rec.Key
		return json.Marshal(keyLine{Kind: kindKey, ID: k.ID, Hash: hex.EncodeToString(k.Hash), Description: k.Description,
			CreatedAt: fmtTime(k.CreatedAt), CreatedBy: k.CreatedBy, ExpiresAt: fmtTime(k.ExpiresAt), MaxNodes: k.MaxNodes,
			Bootstrap: k.Bootstrap, Admin: k.Admin, RevokedAt: fmtTime(k.RevokedAt), LastUsedAt: fmtTime(k.LastUsedAt)})
	case rec.User != nil:
		u := rec.User
		return json.Marshal(userLine{Kind: kindUser, Name: u.Name, Role: string(u.Role), PasswordHash: u.PasswordHash,
			Disabled: u.Disabled, CreatedAt: fmtTime(u.CreatedAt), CreatedBy: u.CreatedBy, Epoch: u.Epoch,
			PasswordChangedAt: fmtTime(u.PasswordChangedAt), LastLoginAt: fmtTime(u.LastLoginAt), Version: u.Version,
			Webhook: u.Webhook})
	case rec.Allow != nil:
		a := rec.Allow
		p := ""
		if a.Prefix.IsValid() {
			p = a.Prefix.String()
		}
		return json.Marshal(allowLine{Kind: kindAllow, Prefix: p, Note: a.Note, CreatedBy: a.CreatedBy, CreatedAt: fmtTime(a.CreatedAt)})
	case rec.Audit != nil:
		e := rec.Audit
		return json.Marshal(auditLine{Kind: kindAudit, Seq: e.Seq, At: fmtTime(e.At), Actor: e.Actor, Action: e.Action,
			Target: e.Target, RemoteIP: e.RemoteIP, Detail: e.Detail, Prev: e.Prev, Hash: e.Hash})
	case rec.History != nil:
		h := rec.History
		return json.Marshal(historyLine{Kind: kindHistory, Node: int64(h.NodeID), Token: h.Token,
			Requester: requesterJSON{MachineID: h.Requester.MachineID, PID: h.Requester.PID,
				StartedAt: fmtTime(h.Requester.StartedAt), Instance: h.Requester.Instance},
			KeyID: h.KeyID, Host: h.Client.Host, Labels: h.Client.Labels, GrantedAt: fmtTime(h.GrantedAt),
			NotBefore: fmtTime(h.NotBefore), WindowEnd: fmtTime(h.WindowEnd), End: string(h.End), EndedAt: fmtTime(h.EndedAt),
			MintedUpTo: fmtTime(h.MintedUpTo), FromReceipt: h.FromReceipt})
	}
	return nil, errors.New("a snapshot record with no field set")
}

// strict decodes one line into v: unknown members and wrong types are refused,
// and so is anything but the canonical spelling (json.Marshal of v) — another
// member order, white space, a member that should be absent, a duplicate.
func strict(line []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return jsonProblem(err)
	}
	again, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if !bytes.Equal(again, line) {
		return errors.New("not in the canonical form (member order, spacing, empty or duplicate members)")
	}
	return nil
}

// jsonProblem says what is wrong with a line in the file's words, not Go's.
func jsonProblem(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return fmt.Errorf("member %q: a JSON %s where %s belongs", te.Field, te.Value, jsonKind(te.Type.Kind().String()))
	case errors.As(err, &se):
		return fmt.Errorf("not JSON: %v", se)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Errorf("unknown member %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("not JSON: the line is empty or ends inside a value")
	}
	return fmt.Errorf("not JSON: %v", err)
}

func jsonKind(goKind string) string {
	switch {
	case strings.HasPrefix(goKind, "int"), strings.HasPrefix(goKind, "uint"):
		return "an integer"
	case goKind == "string":
		return "a string"
	case goKind == "bool":
		return "true or false"
	}
	return "an object"
}

// text checks a string member: valid UTF-8 (a line that held anything else is
// not canonical already) of at most max bytes, non-empty when required, and
// without control characters when printable.
func text(member, s string, max int, required, printable bool) error {
	switch {
	case required && s == "":
		return fmt.Errorf("%s is required", member)
	case len(s) > max:
		return fmt.Errorf("%s is longer than %d bytes", member, max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not UTF-8", member)
	case printable && strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%s holds control characters", member)
	}
	return nil
}

// hexHash checks a member that holds a hex SHA-256 (lower case), or "" when
// allowed.
func hexHash(member, s string, required bool) error {
	if s == "" && !required {
		return nil
	}
	if len(s) != 64 || strings.ContainsFunc(s, func(r rune) bool { return !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') }) {
		return fmt.Errorf("%s is not a SHA-256 as 64 lower-case hex digits", member)
	}
	return nil
}

// parsePrefix reads an allow-list prefix: canonical and masked.
func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || p != p.Masked() || p.String() != s {
		return netip.Prefix{}, fmt.Errorf("prefix %q is not a masked CIDR prefix such as 10.0.0.0/8", s)
	}
	return p, nil
}
