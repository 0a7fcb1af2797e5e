package leasetx

import (
	"slices"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/histrec"
)

// Tx is one store transaction as the rules use it. Every read sees the
// transaction's own writes, and nothing is written unless the transaction
// commits: the store runs each Alloc, Renew, Remove, Revoke or Reclaim step in
// one transaction, isolated from the others (serializable: two of them that
// read a record the other writes may not both commit), and commits it whole or
// not at all.
//
// The methods read and write records; the decisions (which node, which
// watermark, which token, which index) are the rules'. A method's error ends
// the step and the transaction is not committed.
type Tx interface {
	// Now is the transaction's instant, Unix ms.
	Now() int64
	// InPool reports whether id lies in the stored pool.
	InPool(id idkeeper.NodeID) bool
	// Fence is the fencing counter: the last token handed out.
	Fence() uint64
	// NextToken raises the fencing counter by one and returns it.
	NextToken() uint64
	// FreeNodes is how many node IDs of the pool are neither held nor in the
	// quarantine index, as the store's counters say.
	FreeNodes() int

	// Node reads the record of id, a node of the pool.
	Node(id uint32) (Node, error)
	// Lease reads the lease on the held node id.
	Lease(id uint32) (Lease, error)
	// Holding reads the requester index entry of the requester with key (the
	// zero Holding when it holds nothing).
	Holding(key string) (Holding, error)
	// PutHolding stores the requester index entry of key, or deletes it when h
	// holds nothing.
	PutHolding(key string, h Holding) error
	// KeyHeld is how many node IDs the leases of the API key keyID hold.
	KeyHeld(keyID string) (int, error)
	// Charges reads the cooling charges of the API key keyID, stale ones
	// included, in an order of the store's own (the same on every read).
	Charges(keyID string) ([]Charge, error)
	// PutCharges replaces old, the charges of keyID as Charges read them, with cs.
	PutCharges(keyID string, old, cs []Charge) error
	// ReadAhead tells the store which records come next: the node and history
	// records of h's leases and of the claims that are possible and in the pool.
	// A store whose reads are cheap does nothing; one that pays a round trip a
	// read reads them in one.
	ReadAhead(h Holding, claims []idkeeper.Claim) error

	// Promote makes the moves time has made due between the free indexes:
	// every free node whose index is no longer the one FreePlace names at Now
	// moves there. A store that moves them in batches may end the step with an
	// error of its own that commits the moves and runs the step again.
	Promote() error
	// Scan returns the first n node IDs of the free index p (Ready or
	// Cooling), in its order: Ready by the order they were freed in, Cooling by
	// fenced watermark, then free order. Only Alloc scans, after Promote, and it
	// takes every node ID Scan returns.
	Scan(p Place, n int) ([]uint32, error)
	// Take gives the free node id the lease l: the node leaves its free index,
	// its record takes n's Watermark, LastToken and Restorable, the lease (and
	// its expiry entry) is stored and counted among the held and against
	// l.KeyID. The requester index is the rules' (PutHolding).
	Take(id uint32, l Lease, n Node) error
	// Extend stores l in place of old, the lease on the held node id, moving its
	// expiry entry, and raises the node's watermark to l.ExpiresAt.
	Extend(id uint32, old, l Lease) error
	// Free deletes the lease l on the held node id, takes id out of the
	// requester index entry of l.Requester and out of l.KeyID's count, stores
	// n's Watermark, QuarUntil, LastToken and Restorable in its record and puts
	// the node at the back of the free order, in the index FreePlace names.
	Free(id uint32, l Lease, n Node) error
	// History is the transaction's lease history.
	History() histrec.Log
}

// Step runs step in one transaction: run opens it, calls its argument with it
// and commits it when that returns nil (retrying as the store needs). It
// returns what step returned, or the zero T and the error of step or of run.
func Step[T any](run func(func(Tx) error) error, step func(Tx) (T, error)) (T, error) {
	var out T
	err := run(func(t Tx) error {
		var err error
		out, err = step(t)
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// Holding is a requester index entry: the leases one requester holds, by node
// ID (sorted) with their tokens, and the API key that owns them all.
type Holding struct {
	IDs    []uint32
	Tokens []uint64
	KeyID  string
}

// With returns h with the lease (id, token) added, in node ID order.
func (h Holding) With(id uint32, token uint64) Holding {
	i, _ := slices.BinarySearch(h.IDs, id)
	h.IDs = slices.Insert(slices.Clone(h.IDs), i, id)
	h.Tokens = slices.Insert(slices.Clone(h.Tokens), i, token)
	return h
}

// Without returns h without the lease on id.
func (h Holding) Without(id uint32) Holding {
	i, ok := slices.BinarySearch(h.IDs, id)
	if !ok {
		return h
	}
	h.IDs = slices.Delete(slices.Clone(h.IDs), i, i+1)
	h.Tokens = slices.Delete(slices.Clone(h.Tokens), i, i+1)
	return h
}
