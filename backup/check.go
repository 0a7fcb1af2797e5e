package backup

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/plural"
	"github.com/idkeeper/idkeeper/snapshot"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/discord"
)

// Counts are the records of a snapshot by kind.
type Counts struct {
	Nodes   int // node records: every node ID of the pool
	Leases  int // of which held by a lease
	Keys    int // API keys (hashes only)
	Users   int // admin web accounts (password hashes only)
	Allow   int // IP allow-list entries
	Audit   int // audit log entries
	History int // lease history records
}

// Records is the number of records: Leases are inside node records.
func (c Counts) Records() int { return c.Nodes + c.Keys + c.Users + c.Allow + c.Audit + c.History }

func (c Counts) String() string {
	return fmt.Sprintf("%s: %s (%d leased), %s, %s, %s, %s, %s", plural.N(c.Records(), "record", "records"),
		plural.N(c.Nodes, "node ID", "node IDs"), c.Leases, plural.N(c.Keys, "API key", "API keys"),
		plural.N(c.Users, "user", "users"), plural.N(c.Allow, "allow-list entry", "allow-list entries"),
		plural.N(c.Audit, "audit entry", "audit entries"), plural.N(c.History, "lease history record", "lease history records"))
}

// decodeHeader reads a header line whose format and version were checked.
func decodeHeader(line []byte) (Header, error) {
	var l headerLine
	if err := strict(line, &l); err != nil {
		return Header{}, err
	}
	h := Header{Version: l.Version, Store: l.Source.Store, Redacted: l.Redacted}
	var err error
	if h.TakenAt, err = parseTime("takenAt", l.TakenAt); err != nil {
		return Header{}, err
	}
	g := l.Source.Generation
	m := snapshot.Meta{Generation: idkeeper.Generation{ID: g.ID, Number: g.Number, Origin: idkeeper.Origin(g.Origin)},
		Fence: l.Meta.Fence, Nodes: l.Meta.Nodes, First: idkeeper.NodeID(l.Meta.First), AuditSeq: l.Meta.AuditSeq,
		AuditHash: l.Meta.AuditHash}
	if m.Generation.At, err = parseTime("source.generation.at", g.At); err != nil {
		return Header{}, err
	}
	if l.Meta.First < 0 || l.Meta.First > math.MaxUint32 {
		return Header{}, fmt.Errorf("meta.first %d is not a node ID", l.Meta.First)
	}
	if l.Meta.Layout != "" {
		if m.Layout, err = idkeeper.ParseLayout(l.Meta.Layout); err != nil {
			return Header{}, fmt.Errorf("meta.layout: %w", err)
		}
	}
	h.Meta = m
	return h, checkHeader(h)
}

// checkHeader checks a header's bounds: what a Writer may write and a Reader
// accepts.
func checkHeader(h Header) error {
	m := h.Meta
	switch {
	case h.Version < minVersion || h.Version > Version:
		return fmt.Errorf("version %d: this idkeeper reads versions %d..%d", h.Version, minVersion, Version)
	case h.Version < 3 && (m.First != 0 || m.Layout != idkeeper.Layout{}):
		return fmt.Errorf("version %d has no meta.first or meta.layout", h.Version)
	case h.Version >= 3 && m.Layout == idkeeper.Layout{}:
		return errors.New("meta.layout is required")
	case h.TakenAt.IsZero():
		return errors.New("takenAt is required")
	case h.Store == "" || len(h.Store) > 32 || !word(h.Store, false):
		return fmt.Errorf("source.store %q is not a store name such as bolt or redis", h.Store)
	case m.Generation.ID == "" || len(m.Generation.ID) > 64 || !word(m.Generation.ID, true):
		return errors.New("source.generation.id is not a generation ID")
	case m.Generation.Number < 1:
		return errors.New("source.generation.number must be at least 1")
	case m.Generation.Origin != idkeeper.OriginFresh && m.Generation.Origin != idkeeper.OriginRecovered:
		return fmt.Errorf("source.generation.origin %q is neither %s nor %s", m.Generation.Origin, idkeeper.OriginFresh, idkeeper.OriginRecovered)
	case m.Fence > idkeeper.MaxFencingToken:
		return fmt.Errorf("meta.fence %d is above the last token 2^53-1", m.Fence)
	case idkeeper.CheckPoolSize(m.Nodes) != nil:
		return fmt.Errorf("meta.nodes %d is not a pool size 1..%d", m.Nodes, uint64(idkeeper.MaxPoolNodes))
	}
	if err := m.Pool().Validate(); err != nil {
		return fmt.Errorf("meta: the pool (first %d, nodes %d, layout %s): %s", m.First, m.Nodes,
			idkeeper.FormatLayout(m.Pool().LayoutOrDefault()), message(err))
	}
	if err := hexHash("meta.auditHash", m.AuditHash, false); err != nil {
		return err
	}
	_, err := newChecker(m)
	return err
}

// word reports whether s holds only a-z, 0-9, '-' and '_', and A-Z when upper.
func word(s string, upper bool) bool {
	for _, r := range s {
		if !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-' || r == '_' || upper && 'A' <= r && r <= 'Z') {
			return false
		}
	}
	return true
}

// decodeRecord reads a record line of the given kind, checking each member's
// type and bounds (not yet its place in the snapshot: checker.add). In a
// redacted backup a secret is refused and a key's hash is "".
func decodeRecord(kind string, line []byte, redacted bool) (snapshot.Record, error) {
	var rec snapshot.Record
	var err error
	switch kind {
	case kindNode:
		var n *idkeeper.NodeState
		n, err = decodeNode(line)
		rec.Node = n
	case kindKey:
		var k *idkeeper.APIKey
		k, err = decodeKey(line, redacted)
		rec.Key = k
	case kindUser:
		var u *account.User
		u, err = decodeUser(line)
		if err == nil && redacted && (u.PasswordHash != "" || u.Webhook != "") {
			err = fmt.Errorf("user %s: a redacted backup holds no password hash and no webhook", u.Name)
		}
		rec.User = u
	case kindAllow:
		var a *allowlist.Entry
		a, err = decodeAllow(line)
		rec.Allow = a
	case kindAudit:
		var e *audit.Entry
		e, err = decodeAudit(line)
		rec.Audit = e
	case kindHistory:
		var h *idkeeper.HistoryRecord
		h, err = decodeHistory(line)
		rec.History = h
	default:
		b, _ := json.Marshal(kind)
		return rec, fmt.Errorf("unknown record kind %s", b)
	}
	return rec, err
}

// times parses the time members named in pairs (name, value) into dst.
func times(dst []*time.Time, pairs ...string) error {
	for i := range dst {
		t, err := parseTime(pairs[2*i], pairs[2*i+1])
		if err != nil {
			return err
		}
		*dst[i] = t
	}
	return nil
}

func decodeNode(line []byte) (*idkeeper.NodeState, error) {
	var l nodeLine
	if err := strict(line, &l); err != nil {
		return nil, err
	}
	if l.ID < 0 || l.ID >= idkeeper.MaxPoolNodes {
		return nil, fmt.Errorf("node ID %d is outside 0..%d", l.ID, uint64(idkeeper.MaxPoolNodes)-1)
	}
	if l.LastToken > idkeeper.MaxFencingToken {
		return nil, fmt.Errorf("node %d: lastToken %d is above the last token 2^53-1", l.ID, l.LastToken)
	}
	n := &idkeeper.NodeState{NodeID: idkeeper.NodeID(l.ID), LastToken: l.LastToken, Restorable: l.Restorable}
	if err := times([]*time.Time{&n.Watermark, &n.Floor, &n.QuarantinedUntil},
		"watermark", l.Watermark, "floor", l.Floor, "quarantinedUntil", l.QuarantinedUntil); err != nil {
		return nil, fmt.Errorf("node %d: %w", l.ID, err)
	}
	if l.Lease == nil {
		return n, nil
	}
	j := l.Lease
	ls := &idkeeper.Lease{NodeID: n.NodeID, FencingToken: j.Token, KeyID: j.KeyID,
		Requester: idkeeper.Requester{MachineID: j.Requester.MachineID, PID: j.Requester.PID, Instance: j.Requester.Instance}}
	if err := times([]*time.Time{&ls.Requester.StartedAt, &ls.NotBefore, &ls.ExpiresAt, &ls.GrantedAt, &ls.RenewedAt},
		"lease.requester.startedAt", j.Requester.StartedAt, "lease.notBefore", j.NotBefore, "lease.expiresAt", j.ExpiresAt,
		"lease.grantedAt", j.GrantedAt, "lease.renewedAt", j.RenewedAt); err != nil {
		return nil, fmt.Errorf("node %d: %w", l.ID, err)
	}
	var err error
	switch {
	case ls.NotBefore.IsZero() || ls.ExpiresAt.IsZero():
		err = errors.New("lease.notBefore and lease.expiresAt are required")
	case ls.FencingToken < 1 || ls.FencingToken > idkeeper.MaxFencingToken:
		err = fmt.Errorf("lease.token %d is outside 1..2^53-1", ls.FencingToken)
	default:
		if err = ls.Requester.ValidateStored(); err != nil {
			err = fmt.Errorf("lease: %w", err)
		} else {
			err = text("lease.keyId", ls.KeyID, audit.MaxFieldLen, false, true)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", l.ID, err)
	}
	n.Lease = ls
	return n, nil
}

func decodeKey(line []byte, redacted bool) (*idkeeper.APIKey, error) {
	var l keyLine
	if err := strict(line, &l); err != nil {
		return nil, err
	}
	if err := text("id", l.ID, audit.MaxFieldLen, true, true); err != nil {
		return nil, err
	}
	hash, err := hex.DecodeString(l.Hash)
	switch {
	case redacted && l.Hash != "":
		return nil, fmt.Errorf("key %s: a redacted backup holds no key hash", l.ID)
	case redacted:
		hash = nil
	case err != nil || len(hash) != 32 || hex.EncodeToString(hash) != l.Hash:
		return nil, fmt.Errorf("key %s: hash is not a SHA-256 as 64 lower-case hex digits", l.ID)
	}
	k := &idkeeper.APIKey{ID: l.ID, Hash: hash, Description: l.Description, CreatedBy: l.CreatedBy, MaxNodes: l.MaxNodes,
		Bootstrap: l.Bootstrap, Admin: l.Admin}
	err = times([]*time.Time{&k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &k.LastUsedAt},
		"createdAt", l.CreatedAt, "expiresAt", l.ExpiresAt, "revokedAt", l.RevokedAt, "lastUsedAt", l.LastUsedAt)
	if err == nil {
		err = text("description", k.Description, apikey.MaxDescriptionLen, false, false)
	}
	if err == nil {
		err = text("createdBy", k.CreatedBy, maxText, false, true)
	}
	if err == nil && (k.MaxNodes < 0 || k.MaxNodes > idkeeper.MaxPoolNodes) {
		err = fmt.Errorf("maxNodes %d is outside 0..%d", k.MaxNodes, uint64(idkeeper.MaxPoolNodes))
	}
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", l.ID, err)
	}
	return k, nil
}

func decodeUser(line []byte) (*account.User, error) {
	var l userLine
	if err := strict(line, &l); err != nil {
		return nil, err
	}
	if !account.ValidUserName(l.Name) {
		return nil, fmt.Errorf("name %q is not a user name (1 to %d of a-z 0-9 . _ @ -)", l.Name, account.MaxUserNameLen)
	}
	u := &account.User{Name: l.Name, Role: account.Role(l.Role), PasswordHash: l.PasswordHash, Disabled: l.Disabled,
		CreatedBy: l.CreatedBy, Epoch: l.Epoch, Version: l.Version, Webhook: l.Webhook}
	err := times([]*time.Time{&u.CreatedAt, &u.PasswordChangedAt, &u.LastLoginAt},
		"createdAt", l.CreatedAt, "passwordChangedAt", l.PasswordChangedAt, "lastLoginAt", l.LastLoginAt)
	switch {
	case err != nil:
	case !u.Role.Valid():
		err = fmt.Errorf("role %q is not one of viewer, operator, admin", l.Role)
	default:
		if err = text("passwordHash", u.PasswordHash, maxText, false, true); err == nil {
			err = text("createdBy", u.CreatedBy, maxText, false, true)
		}
		if err == nil && u.Webhook != "" {
			// Its error names what is wrong, never the token.
			if werr := discord.ValidWebhookURL(u.Webhook); werr != nil {
				err = fmt.Errorf("webhook: %w", werr)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("user %s: %w", l.Name, err)
	}
	return u, nil
}

func decodeAllow(line []byte) (*allowlist.Entry, error) {
	var l allowLine
	if err := strict(line, &l); err != nil {
		return nil, err
	}
	p, err := parsePrefix(l.Prefix)
	if err != nil {
		return nil, err
	}
	a := &allowlist.Entry{Prefix: p, Note: l.Note, CreatedBy: l.CreatedBy}
	if a.CreatedAt, err = parseTime("createdAt", l.CreatedAt); err == nil {
		if err = text("note", a.Note, allowlist.MaxNoteLen, false, false); err == nil {
			err = text("createdBy", a.CreatedBy, maxText, false, true)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("allow-list entry %s: %w", l.Prefix, err)
	}
	return a, nil
}

func decodeAudit(line []byte) (*audit.Entry, error) {
	var l auditLine
	if err := strict(line, &l); err != nil {
		return nil, err
	}
	e := &audit.Entry{Seq: l.Seq, Actor: l.Actor, Action: l.Action, Target: l.Target, RemoteIP: l.RemoteIP,
		Detail: l.Detail, Prev: l.Prev, Hash: l.Hash}
	var err error
	if l.Seq < 1 {
		err = errors.New("seq must be at least 1")
	} else if e.At, err = parseTime("at", l.At); err == nil && e.At.IsZero() {
		err = errors.New("at is required")
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"actor", e.Actor, audit.MaxFieldLen}, {"action", e.Action, audit.MaxFieldLen},
		{"target", e.Target, audit.MaxFieldLen}, {"remoteIp", e.RemoteIP, audit.MaxFieldLen},
		{"detail", e.Detail, audit.MaxTextLen}} {
		if err == nil {
			err = text(f.name, f.v, f.max, false, false)
		}
	}
	if err == nil {
		err = hexHash("prev", e.Prev, false)
	}
	if err == nil {
		err = hexHash("hash", e.Hash, true)
	}
	if err != nil {
		return nil, fmt.Errorf("audit entry %d: %w", l.Seq, err)
	}
	return e, nil
}

func decodeHistory(line []byte) (*idkeeper.HistoryRecord, error) {
	var l historyLine
	if err := strict(line, &l); err != nil {
		return nil, err
	}
	if l.Node < 0 || l.Node > math.MaxInt32 {
		return nil, fmt.Errorf("history record of node %d: no such node ID", l.Node)
	}
	h := &idkeeper.HistoryRecord{NodeID: idkeeper.NodeID(l.Node), Token: l.Token, KeyID: l.KeyID,
		Requester: idkeeper.Requester{MachineID: l.Requester.MachineID, PID: l.Requester.PID, Instance: l.Requester.Instance},
		Client:    idkeeper.ClientInfo{Host: l.Host, Labels: l.Labels}, End: idkeeper.LeaseEnd(l.End), FromReceipt: l.FromReceipt}
	err := times([]*time.Time{&h.Requester.StartedAt, &h.GrantedAt, &h.NotBefore, &h.WindowEnd, &h.EndedAt, &h.MintedUpTo},
		"requester.startedAt", l.Requester.StartedAt, "grantedAt", l.GrantedAt, "notBefore", l.NotBefore,
		"windowEnd", l.WindowEnd, "endedAt", l.EndedAt, "mintedUpTo", l.MintedUpTo)
	if err == nil {
		err = text("keyId", h.KeyID, maxText, false, true)
	}
	if err == nil {
		err = h.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("history record of node %d token %d: %s", l.Node, l.Token, message(err))
	}
	return h, nil
}

// checker checks that the records of one snapshot come in order and agree with
// its meta, as a store's LoadSnapshot will (snapshot.Checker: every node
// ID of the pool once, in order; keys, users and allow-list entries in order, each
// once; audit entries unbroken up to the head; no token above the fencing
// counter), and counts them. The Reader runs it on every record it reads, the
// Writer on every record it writes. It holds a few values, never the records.
type checker struct {
	sc     *snapshot.Checker
	counts Counts
}

func newChecker(meta snapshot.Meta) (checker, error) {
	sc, err := snapshot.NewChecker(meta)
	if err != nil {
		return checker{}, errors.New(message(err))
	}
	return checker{sc: sc}, nil
}

// message is err's text without the code of an idkeeper.Error.
func message(err error) string {
	var e *idkeeper.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

func kindOf(rec snapshot.Record) (string, error) {
	set, kind := 0, ""
	for _, f := range []struct {
		ok   bool
		kind string
	}{{rec.Node != nil, kindNode}, {rec.Key != nil, kindKey}, {rec.User != nil, kindUser}, {rec.Allow != nil, kindAllow}, {rec.Audit != nil, kindAudit},
		{rec.History != nil, kindHistory}} {
		if f.ok {
			set++
			kind = f.kind
		}
	}
	if set != 1 {
		return "", fmt.Errorf("a snapshot record with %d fields set, not one", set)
	}
	return kind, nil
}

// add checks rec, the next record, and counts it.
func (c *checker) add(rec snapshot.Record) error {
	if err := c.sc.Check(rec); err != nil {
		return errors.New(message(err))
	}
	switch {
	case rec.Node != nil:
		c.counts.Nodes++
		if rec.Node.Lease != nil {
			c.counts.Leases++
		}
	case rec.Key != nil:
		c.counts.Keys++
	case rec.User != nil:
		c.counts.Users++
	case rec.Allow != nil:
		c.counts.Allow++
	case rec.Audit != nil:
		c.counts.Audit++
	case rec.History != nil:
		c.counts.History++
	}
	return nil
}

// finish checks the snapshot complete.
func (c *checker) finish() error {
	if err := c.sc.Done(); err != nil {
		return errors.New(message(err))
	}
	return nil
}
