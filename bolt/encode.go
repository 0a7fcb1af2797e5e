package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper"
)

// zeroMs is the zero time.Time in Unix milliseconds: a never-set watermark or
// quarantine.
var zeroMs = time.Time{}.UnixMilli()

func msTime(ms int64) time.Time    { return time.UnixMilli(ms).UTC() }
func timeMs(t time.Time) int64     { return idkeeper.Millis(t).UnixMilli() }
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
type place byte

const (
	placeHeld place = iota
	placeReady
	placeCooling
	placeQuarantine
)

// nodeRec is the record of one node ID.
type nodeRec struct {
	watermark int64 // Unix ms
	quarUntil int64 // Unix ms
	freeSeq   uint64
	place     place
}

const nodeRecLen = 25

func (r nodeRec) encode() []byte {
	b := make([]byte, 0, nodeRecLen)
	b = binary.BigEndian.AppendUint64(b, uint64(r.watermark))
	b = binary.BigEndian.AppendUint64(b, uint64(r.quarUntil))
	b = binary.BigEndian.AppendUint64(b, r.freeSeq)
	return append(b, byte(r.place))
}

func decodeNode(b []byte) (nodeRec, error) {
	if len(b) != nodeRecLen {
		return nodeRec{}, fmt.Errorf("corrupt node record of %d bytes", len(b))
	}
	return nodeRec{watermark: getI64(b, 0), quarUntil: getI64(b, 8), freeSeq: binary.BigEndian.Uint64(b[16:]), place: place(b[24])}, nil
}

// leaseRec is the record of one lease.
type leaseRec struct {
	notBefore, expiresAt, grantedAt, renewedAt int64 // Unix ms
	token                                      uint64
	requester                                  string // Requester.Key
}

const leaseFixedLen = 40

func (l leaseRec) encode() []byte {
	b := make([]byte, 0, leaseFixedLen+len(l.requester))
	b = binary.BigEndian.AppendUint64(b, uint64(l.notBefore))
	b = binary.BigEndian.AppendUint64(b, uint64(l.expiresAt))
	b = binary.BigEndian.AppendUint64(b, l.token)
	b = binary.BigEndian.AppendUint64(b, uint64(l.grantedAt))
	b = binary.BigEndian.AppendUint64(b, uint64(l.renewedAt))
	return append(b, l.requester...)
}

func decodeLease(b []byte) (leaseRec, error) {
	if len(b) < leaseFixedLen {
		return leaseRec{}, fmt.Errorf("corrupt lease record of %d bytes", len(b))
	}
	return leaseRec{
		notBefore: getI64(b, 0), expiresAt: getI64(b, 8), token: binary.BigEndian.Uint64(b[16:]),
		grantedAt: getI64(b, 24), renewedAt: getI64(b, 32), requester: string(b[leaseFixedLen:]),
	}, nil
}

func (l leaseRec) lease(id uint32) (idkeeper.Lease, error) {
	r, err := idkeeper.ParseRequesterKey(l.requester)
	if err != nil {
		return idkeeper.Lease{}, err
	}
	return idkeeper.Lease{
		NodeID: idkeeper.NodeID(id), Requester: r, NotBefore: msTime(l.notBefore), ExpiresAt: msTime(l.expiresAt),
		FencingToken: l.token, GrantedAt: msTime(l.grantedAt), RenewedAt: msTime(l.renewedAt),
	}, nil
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
