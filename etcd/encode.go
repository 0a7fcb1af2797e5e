package etcd

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// msTime and timeMs are the shared rules' Unix-millisecond helpers.
func msTime(ms int64) time.Time { return leasetx.MsTime(ms) }
func timeMs(t time.Time) int64  { return leasetx.TimeMs(t) }

// hexTime is a time (Unix ms) as 16 hex digits with the sign bit flipped, so that
// key order is time order, the zero time.Time included.
func hexTime(ms int64) string { return fmt.Sprintf("%016x", uint64(ms)^1<<63) }

// parseHexTime is the inverse of hexTime.
func parseHexTime(s string) (int64, error) {
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || len(s) != 16 {
		return 0, fmt.Errorf("malformed time %q in a key", s)
	}
	return int64(v ^ 1<<63), nil
}

func hexID(id uint32) string   { return fmt.Sprintf("%08x", id) }
func hexU64(v uint64) string   { return fmt.Sprintf("%016x", v) }
func hexToken(t uint64) string { return hexU64(t) }

func parseID(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 16, 32)
	if err != nil || len(s) != 8 {
		return 0, fmt.Errorf("malformed node ID %q in a key", s)
	}
	return uint32(v), nil
}

// keys are the etcd keys of one prefix; the package doc lays them out.
type keys struct {
	prefix                                       string
	meta                                         string
	node, req, keyHeld                           string // + node ID, requester key, key ID
	keyCool                                      string // + key ID: its cooling charges (keycool.go)
	expiry, ready, cooling, quar                 string // index prefixes
	lock, apiKey, skew, skewLapse, hist, histEnd string
	// the admin records, the alert state, snapshot staging, idempotency records
	user, session, userSession, sessionSeen, sessionExp string
	allow, audit, auditHead, alert, staging             string
	backupSchedule                                      string // the backup schedule (backupschedule.go)
	idem, idemExp, idemOwn                              string
}

func newKeys(prefix string) keys {
	return keys{
		prefix: prefix, meta: prefix + "meta",
		node: prefix + "node/", req: prefix + "req/", keyHeld: prefix + "keyheld/", keyCool: prefix + "keycool/",
		expiry: prefix + "expiry/", ready: prefix + "ready/", cooling: prefix + "cooling/", quar: prefix + "quar/",
		lock: prefix + "lock/", apiKey: prefix + "apikey/", skew: prefix + "skew/", skewLapse: prefix + "skewlapse/",
		hist: prefix + "hist/", histEnd: prefix + "histend/",
		user: prefix + "user/", session: prefix + "session/", userSession: prefix + "usersession/",
		sessionSeen: prefix + "sessionseen/", sessionExp: prefix + "sessionexp/",
		allow: prefix + "allow/", audit: prefix + "audit/", auditHead: prefix + "audithead",
		alert: prefix + "alert/", staging: prefix + "staging/", backupSchedule: prefix + "setting/backup-schedule",
		idem: prefix + "idem/", idemExp: prefix + "idemexp/", idemOwn: prefix + "idemown/",
	}
}

func (k keys) nodeKey(id uint32) string { return k.node + hexID(id) }

// expiryKey is a held node's entry in the expiry index.
func (k keys) expiryKey(exp int64, id uint32) string {
	return k.expiry + hexTime(exp) + "/" + hexID(id)
}

// readyKey is a free node's entry in the ready index: free order, then node ID.
func (k keys) readyKey(seq uint64, id uint32) string { return k.ready + hexU64(seq) + "/" + hexID(id) }

// coolingKey orders cooling nodes by fenced watermark, then free order.
func (k keys) coolingKey(fenced int64, seq uint64, id uint32) string {
	return k.cooling + hexTime(fenced) + "/" + hexU64(seq) + "/" + hexID(id)
}

// quarKey is a free node's entry in the quarantine index.
func (k keys) quarKey(until int64, id uint32) string {
	return k.quar + hexTime(until) + "/" + hexID(id)
}

// entry is the index entry of node id with record r: its expiry entry while held,
// else the entry of the free index its place names.
func (k keys) entry(id uint32, r nodeRec) string {
	switch r.place {
	case placeReady:
		return k.readyKey(r.freeSeq, id)
	case placeCooling:
		return k.coolingKey(r.fenced(), r.freeSeq, id)
	case placeQuarantine:
		return k.quarKey(r.quarUntil, id)
	}
	return k.expiryKey(r.lease.ExpiresAt, id)
}

// before is the end of a range of index entries whose leading time is below ms.
func before(index string, ms int64) string { return index + hexTime(ms) }

func (k keys) histKey(id uint32, token uint64) string {
	return k.hist + hexID(id) + "/" + hexToken(token)
}

func (k keys) histEndKey(ended int64, id uint32, token uint64) string {
	return k.histEnd + hexTime(ended) + "/" + hexID(id) + "/" + hexToken(token)
}

// indexID is the node ID that ends an index key.
func indexID(key string) (uint32, error) {
	i := strings.LastIndexByte(key, '/')
	return parseID(key[i+1:])
}

// indexTime is the time that leads an index key below the index prefix.
func indexTime(index, key string) (int64, error) {
	rest := strings.TrimPrefix(key, index)
	if len(rest) < 16 {
		return 0, fmt.Errorf("malformed index key %q", key)
	}
	return parseHexTime(rest[:16])
}

// meta is the meta record: the generation and the counters every lease
// transaction reads and rewrites.
type meta struct {
	Version    int     `json:"version"`
	Generation *genRec `json:"generation,omitempty"` // nil: not initialised
	Nodes      uint64  `json:"nodes"`                // pool size
	// First is the pool's first node ID (the pool is node IDs First..First+Nodes-1)
	// and Layout its layout (idkeeper.FormatLayout), both written with the pool;
	// "" is a pool written before layouts were, on idkeeper.DefaultLayout.
	First       uint64 `json:"first,omitempty"`
	Layout      string `json:"layout,omitempty"`
	Fence       uint64 `json:"fence"`       // fencing counter
	Seq         uint64 `json:"seq"`         // free-order counter
	Held        uint64 `json:"held"`        // leases
	Quarantined uint64 `json:"quarantined"` // entries of the quarantine index
	Cooling     uint64 `json:"cooling"`     // entries of the cooling index
	// ReadyFrom is at most the free sequence of every entry of the ready index,
	// so that Alloc reads it from there, past the entries it deleted, which etcd
	// keeps (and a range read walks) until it compacts.
	ReadyFrom uint64 `json:"readyFrom"`
}

// pool is the pool m records: zero when it holds none, else its First, size and
// layout (DefaultLayout when none is recorded).
func (m meta) pool() (idkeeper.PoolSpec, error) {
	if m.Nodes == 0 {
		return idkeeper.PoolSpec{}, nil
	}
	p := idkeeper.PoolSpec{First: idkeeper.NodeID(m.First), Nodes: int(m.Nodes), Layout: idkeeper.DefaultLayout}
	if m.Layout != "" {
		l, err := idkeeper.ParseLayout(m.Layout)
		if err != nil {
			return idkeeper.PoolSpec{}, fmt.Errorf("etcd: the stored layout: %w", err)
		}
		p.Layout = l
	}
	return p, nil
}

// end is the first node ID past m's pool.
func (m meta) end() uint64 { return m.First + m.Nodes }

// inPool reports whether id lies in m's pool.
func (m meta) inPool(id idkeeper.NodeID) bool {
	return id >= 0 && uint64(id) >= m.First && uint64(id) < m.end()
}

// schemaVersion is the layout of the package doc.
const schemaVersion = 1

type genRec struct {
	ID     string `json:"id"`
	Number uint64 `json:"number"`
	Origin string `json:"origin"`
	At     int64  `json:"at"` // Unix ms
}

func (g *genRec) generation() idkeeper.Generation {
	if g == nil {
		return idkeeper.Generation{}
	}
	return idkeeper.Generation{ID: g.ID, Number: g.Number, Origin: idkeeper.Origin(g.Origin), At: msTime(g.At)}
}

func genRecOf(g idkeeper.Generation) *genRec {
	return &genRec{ID: g.ID, Number: g.Number, Origin: string(g.Origin), At: timeMs(g.At)}
}

func decodeMeta(b []byte) (meta, error) {
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		return meta{}, fmt.Errorf("corrupt meta record: %w", err)
	}
	if m.Version != schemaVersion {
		return meta{}, fmt.Errorf("the meta record has schema version %d, this build reads version %d", m.Version, schemaVersion)
	}
	return m, nil
}

// nodeRec is the record of one node ID, with its lease while it is held.
type nodeRec struct {
	watermark  int64 // Unix ms; the store's own
	quarUntil  int64 // Unix ms
	floor      int64 // Unix ms; raised by a reset
	freeSeq    uint64
	lastToken  uint64
	place      place
	restorable bool
	lease      *leaseRec // set exactly when place is placeHeld
}

// fenced is the node's effective watermark: max(watermark, floor).
func (r nodeRec) fenced() int64 { return max(r.watermark, r.floor) }

// leaseRec is a held node's lease: the shared rules' lease (leasetx.Lease),
// which nodeRec.encode and decodeNode give its bytes.
type leaseRec = leasetx.Lease

const (
	nodeFixedLen  = 42
	leaseFixedLen = 42
)

// encode is watermark | quarantinedUntil | floor | freeSeq | lastToken (8 bytes
// each, big-endian) | place | restorable, then, while held: notBefore | expiresAt
// | token | grantedAt | renewedAt (8 bytes each) | requester key length (2 bytes)
// | requester key | key ID.
func (r nodeRec) encode() string {
	n := nodeFixedLen
	if r.lease != nil {
		n += leaseFixedLen + len(r.lease.Requester) + len(r.lease.KeyID)
	}
	b := make([]byte, 0, n)
	for _, v := range []uint64{uint64(r.watermark), uint64(r.quarUntil), uint64(r.floor), r.freeSeq, r.lastToken} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	b = append(b, byte(r.place), boolByte(r.restorable))
	if l := r.lease; l != nil {
		for _, v := range []uint64{uint64(l.NotBefore), uint64(l.ExpiresAt), l.Token, uint64(l.GrantedAt), uint64(l.RenewedAt)} {
			b = binary.BigEndian.AppendUint64(b, v)
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(l.Requester)))
		b = append(b, l.Requester...)
		b = append(b, l.KeyID...)
	}
	return string(b)
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func u64(b []byte, i int) uint64 { return binary.BigEndian.Uint64(b[i:]) }
func i64(b []byte, i int) int64  { return int64(binary.BigEndian.Uint64(b[i:])) }

func decodeNode(b []byte) (nodeRec, error) {
	if len(b) < nodeFixedLen {
		return nodeRec{}, fmt.Errorf("corrupt node record of %d bytes", len(b))
	}
	r := nodeRec{watermark: i64(b, 0), quarUntil: i64(b, 8), floor: i64(b, 16), freeSeq: u64(b, 24), lastToken: u64(b, 32),
		place: place(b[40]), restorable: b[41] == 1}
	rest := b[nodeFixedLen:]
	if r.place != placeHeld {
		if len(rest) != 0 || r.place > placeQuarantine {
			return nodeRec{}, fmt.Errorf("corrupt node record: place %d with %d lease bytes", r.place, len(rest))
		}
		return r, nil
	}
	if len(rest) < leaseFixedLen {
		return nodeRec{}, fmt.Errorf("corrupt node record: held, with %d lease bytes", len(rest))
	}
	n := int(binary.BigEndian.Uint16(rest[40:]))
	if len(rest) < leaseFixedLen+n {
		return nodeRec{}, fmt.Errorf("corrupt node record: a requester key of %d bytes in %d", n, len(rest))
	}
	r.lease = &leaseRec{NotBefore: i64(rest, 0), ExpiresAt: i64(rest, 8), Token: u64(rest, 16), GrantedAt: i64(rest, 24),
		RenewedAt: i64(rest, 32), Requester: string(rest[leaseFixedLen : leaseFixedLen+n]), KeyID: string(rest[leaseFixedLen+n:])}
	return r, nil
}

func (r nodeRec) state(id uint32) (idkeeper.NodeState, error) {
	st := idkeeper.NodeState{NodeID: idkeeper.NodeID(id), Watermark: msTime(r.watermark), Floor: msTime(r.floor),
		QuarantinedUntil: msTime(r.quarUntil), LastToken: r.lastToken, Restorable: r.restorable}
	if r.lease != nil {
		l, err := r.lease.On(id)
		if err != nil {
			return idkeeper.NodeState{}, err
		}
		st.Lease = &l
	}
	return st, nil
}

// holding is a requester index entry: the leases a requester holds, by node ID
// ascending, with their tokens (which locate their history records), and the API
// key that owns them all. It is stored as "3:9,17:12;<key ID>".
type holding = leasetx.Holding

func encodeHolding(h holding) string {
	var b strings.Builder
	for i, id := range h.IDs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(id), 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(h.Tokens[i], 10))
	}
	b.WriteByte(';')
	b.WriteString(h.KeyID)
	return b.String()
}

func decodeHolding(v []byte) (holding, error) {
	pairs, keyID, ok := strings.Cut(string(v), ";")
	if !ok || pairs == "" {
		return holding{}, errors.New("corrupt requester index entry")
	}
	h := holding{KeyID: keyID}
	for p := range strings.SplitSeq(pairs, ",") {
		ids, toks, ok := strings.Cut(p, ":")
		id, err1 := strconv.ParseUint(ids, 10, 32)
		tok, err2 := strconv.ParseUint(toks, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return holding{}, fmt.Errorf("corrupt requester index entry %q", v)
		}
		h.IDs, h.Tokens = append(h.IDs, uint32(id)), append(h.Tokens, tok)
	}
	return h, nil
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
