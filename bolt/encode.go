package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// zeroMs, msTime and timeMs are the shared rules' Unix-millisecond helpers.
var zeroMs = leasetx.ZeroMs

func msTime(ms int64) time.Time    { return leasetx.MsTime(ms) }
func timeMs(t time.Time) int64     { return leasetx.TimeMs(t) }
func putU64(v uint64) []byte       { return binary.BigEndian.AppendUint64(nil, v) }
func nodeKey(id uint32) []byte     { return binary.BigEndian.AppendUint32(nil, id) }
func keyNode(k []byte) uint32      { return binary.BigEndian.Uint32(k[len(k)-4:]) }
func sortable(ms int64) uint64     { return uint64(ms) ^ 1<<63 }
func unsortable(v uint64) int64    { return int64(v ^ 1<<63) }
func keyTime(k []byte) int64       { return unsortable(binary.BigEndian.Uint64(k)) }
func getI64(b []byte, i int) int64 { return int64(binary.BigEndian.Uint64(b[i:])) }

func getU64(v []byte) uint64 {
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// timeNodeKey is an index key: a time, then the node ID.
func timeNodeKey(ms int64, id uint32) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 12), sortable(ms))
	return binary.BigEndian.AppendUint32(k, id)
}

// seqNodeKey is a ready-queue key: free-order sequence, then the node ID.
func seqNodeKey(seq uint64, id uint32) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 12), seq)
	return binary.BigEndian.AppendUint32(k, id)
}

// coolingKey orders cooling nodes by watermark, then by free order.
func coolingKey(wm int64, seq uint64, id uint32) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 20), sortable(wm))
	k = binary.BigEndian.AppendUint64(k, seq)
	return binary.BigEndian.AppendUint32(k, id)
}

// place names the index that holds a node.
type place = leasetx.Place

const (
	placeHeld       = leasetx.Held
	placeReady      = leasetx.Ready
	placeCooling    = leasetx.Cooling
	placeQuarantine = leasetx.Quarantine
)

// nodeRec is the record of one node ID.
type nodeRec struct {
	watermark  int64 // Unix ms; the store's own
	quarUntil  int64 // Unix ms
	freeSeq    uint64
	place      place
	floor      int64 // Unix ms; raised by a reset
	lastToken  uint64
	restorable bool
}

// fenced is the node's effective watermark: max(watermark, floor).
func (r nodeRec) fenced() int64 { return max(r.watermark, r.floor) }

const nodeRecLen = 42

func (r nodeRec) encode() []byte {
	b := make([]byte, 0, nodeRecLen)
	b = binary.BigEndian.AppendUint64(b, uint64(r.watermark))
	b = binary.BigEndian.AppendUint64(b, uint64(r.quarUntil))
	b = binary.BigEndian.AppendUint64(b, r.freeSeq)
	b = append(b, byte(r.place))
	b = binary.BigEndian.AppendUint64(b, uint64(r.floor))
	b = binary.BigEndian.AppendUint64(b, r.lastToken)
	if r.restorable {
		return append(b, 1)
	}
	return append(b, 0)
}

func decodeNode(b []byte) (nodeRec, error) {
	if len(b) != nodeRecLen {
		return nodeRec{}, fmt.Errorf("corrupt node record of %d bytes", len(b))
	}
	return nodeRec{watermark: getI64(b, 0), quarUntil: getI64(b, 8), freeSeq: binary.BigEndian.Uint64(b[16:]),
		place: place(b[24]), floor: getI64(b, 25), lastToken: binary.BigEndian.Uint64(b[33:]), restorable: b[41] == 1}, nil
}

func (r nodeRec) state(id uint32) idkeeper.NodeState {
	return idkeeper.NodeState{NodeID: idkeeper.NodeID(id), Watermark: msTime(r.watermark), Floor: msTime(r.floor),
		QuarantinedUntil: msTime(r.quarUntil), LastToken: r.lastToken, Restorable: r.restorable}
}

// leaseRec is the record of one lease: the shared rules' lease (leasetx.Lease),
// which encodeLease and decodeLease give its bytes.
type leaseRec = leasetx.Lease

const leaseFixedLen = 42

// encodeLease is notBefore | expiresAt | token | grantedAt | renewedAt (8 bytes
// each, big-endian) | requester key length (2 bytes) | requester key | key ID.
func encodeLease(l leaseRec) []byte {
	b := make([]byte, 0, leaseFixedLen+len(l.Requester)+len(l.KeyID))
	b = binary.BigEndian.AppendUint64(b, uint64(l.NotBefore))
	b = binary.BigEndian.AppendUint64(b, uint64(l.ExpiresAt))
	b = binary.BigEndian.AppendUint64(b, l.Token)
	b = binary.BigEndian.AppendUint64(b, uint64(l.GrantedAt))
	b = binary.BigEndian.AppendUint64(b, uint64(l.RenewedAt))
	b = binary.BigEndian.AppendUint16(b, uint16(len(l.Requester)))
	b = append(b, l.Requester...)
	return append(b, l.KeyID...)
}

func decodeLease(b []byte) (leaseRec, error) {
	if len(b) < leaseFixedLen {
		return leaseRec{}, fmt.Errorf("corrupt lease record of %d bytes", len(b))
	}
	n := int(binary.BigEndian.Uint16(b[40:]))
	if len(b) < leaseFixedLen+n {
		return leaseRec{}, fmt.Errorf("corrupt lease record of %d bytes", len(b))
	}
	return leaseRec{
		NotBefore: getI64(b, 0), ExpiresAt: getI64(b, 8), Token: binary.BigEndian.Uint64(b[16:]),
		GrantedAt: getI64(b, 24), RenewedAt: getI64(b, 32), Requester: string(b[leaseFixedLen : leaseFixedLen+n]),
		KeyID: string(b[leaseFixedLen+n:]),
	}, nil
}

// encodeGeneration is number u64 | at i64 | origin length u8 | origin | ID.
func encodeGeneration(g idkeeper.Generation) []byte {
	b := binary.BigEndian.AppendUint64(nil, g.Number)
	b = binary.BigEndian.AppendUint64(b, uint64(timeMs(g.At)))
	b = append(b, byte(len(g.Origin)))
	b = append(b, g.Origin...)
	return append(b, g.ID...)
}

func decodeGeneration(b []byte) (idkeeper.Generation, error) {
	if len(b) < 17 || len(b) < 17+int(b[16]) {
		return idkeeper.Generation{}, fmt.Errorf("corrupt generation record of %d bytes", len(b))
	}
	n := int(b[16])
	return idkeeper.Generation{Number: binary.BigEndian.Uint64(b), At: msTime(getI64(b, 8)),
		Origin: idkeeper.Origin(b[17 : 17+n]), ID: string(b[17+n:])}, nil
}

func encodeIDs(ids []uint32) []byte {
	b := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		b = binary.BigEndian.AppendUint32(b, id)
	}
	return b
}

func decodeIDs(b []byte) ([]uint32, error) {
	if len(b)%4 != 0 {
		return nil, errors.New("corrupt requester index entry")
	}
	ids := make([]uint32, len(b)/4)
	for i := range ids {
		ids[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return ids, nil
}
