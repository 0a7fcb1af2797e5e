// Package snapshot owns a store's whole durable state as records: its head
// (Meta), its records (Record) in a fixed order, how a store reads and replaces
// it (Store), the check every load runs as the records stream by (Checker), and
// the plan that makes a restored state safe to serve (RestorePlan). Package backup
// writes snapshots to files; the store adapters only move records.
package snapshot

import (
	"context"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// Snapshots (issue #12): a store's whole durable state, read record by record
// (Store.ReadSnapshot) and loaded back, all or nothing
// (Store.LoadSnapshot). Package backup writes them to files; the store
// adapters only move records. Sessions, skew observations, job locks and
// idempotency records are not part of a snapshot: they are short-lived, and a
// restored session or lock would be wrong.

// Meta is the head of a snapshot: what the store's Status says.
type Meta struct {
	Generation idkeeper.Generation // never zero: a store that is not initialised has no snapshot
	Fence      uint64              // the fencing counter
	Nodes      int                 // pool size: node IDs First..First+Nodes-1
	// First is the pool's lowest node ID and Layout its layout (zero:
	// DefaultLayout; a snapshot of a store or a backup from before layouts were
	// stored has First 0 and the default layout): see Pool.
	First  idkeeper.NodeID
	Layout idkeeper.Layout
	// AuditSeq and AuditHash are the audit log's head (audit.Store.AuditHead), kept
	// even when every entry was pruned.
	AuditSeq  uint64
	AuditHash string
}

// Pool is the snapshot's pool: First, Nodes and Layout.
func (m Meta) Pool() idkeeper.PoolSpec {
	return idkeeper.PoolSpec{First: m.First, Nodes: m.Nodes, Layout: m.Layout}
}

// Record is one record of a snapshot: exactly one field is set. The
// records of a snapshot come in this order: every node (NodeID order; its Lease,
// if held, inside the NodeState), every API key (ID order), every user (name
// order), every allow-list entry, every audit entry (Seq order), every lease
// history record (NodeID, then Token order).
type Record struct {
	Node    *idkeeper.NodeState
	Key     *idkeeper.APIKey
	User    *account.User
	Allow   *allowlist.Entry
	Audit   *audit.Entry
	History *idkeeper.HistoryRecord
}

// Source yields the records of a snapshot one at a time; Next returns
// io.EOF after the last. An error other than io.EOF ends the load: the store
// writes nothing.
type Source interface {
	Next() (Record, error)
}

// Store is a Store whose whole durable state can be read and replaced:
// bolt and redis implement it. internal/harness/storetest.RunSnapshot is its contract.
type Store interface {
	// ReadSnapshot calls meta once, then emit for every record in the order
	// Record states, from one consistent view of the store where the store
	// offers one (bolt: one read transaction; redis: a copy of its keys taken in
	// one script) — a store that cannot reads the parts one after another and says
	// so in its doc. It stops at the first
	// error of emit and returns it. A store that is not initialised returns a
	// STORE_NOT_INITIALISED Error and calls neither.
	ReadSnapshot(ctx context.Context, meta func(Meta) error, emit func(Record) error) error

	// LoadSnapshot replaces the store's whole durable state — pool, generation,
	// fencing counter, leases, node states, API keys, users, allow-list, audit log
	// and its head, lease history — with meta and the records of src, all or nothing: when src
	// fails, a record is invalid (a node outside meta.Pool(), repeated or
	// missing, a lease whose NodeID is not its node's, a token or LastToken above
	// meta.Fence, an audit entry out of Seq order, …: Checker) or the store
	// fails, the store is left as it was. Sessions of the admin web are
	// deleted (their users' records changed under them); job locks, skew
	// observations and idempotency records are left alone. The records are written
	// as given: making a restored state safe is the caller's job (package backup).
	// The store takes meta's pool (First, Nodes, Layout) — but when it holds a
	// pool already, with another First or layout than meta's, the load returns
	// PoolMismatch(stored, meta.Pool()) and changes nothing: a restore never
	// changes the ID space under running clients.
	// A snapshot does not hold the free order: the loaded store frees its free
	// node IDs in NodeID order, as if one call had freed them all (LeaseStore).
	// It holds at most a bounded batch of records in memory on top of what the
	// store itself buffers (bolt: the write transaction of one batch).
	LoadSnapshot(ctx context.Context, meta Meta, src Source) error
}

// RestorePlan is how a loaded snapshot is made safe (DESIGN §7, issue #12), taken
// at the import's time Now with the registry's LeaseDuration and Grace: see
// SafeRecord and SafeMeta.
type RestorePlan struct {
	Now           time.Time
	LeaseDuration time.Duration
	Grace         time.Duration
	// LiveFence is the fencing counter of the store being replaced (0 when it
	// was empty or unreadable); LiveGeneration its generation number.
	LiveFence      uint64
	LiveGeneration uint64
}

// Until is when a restored store's quarantine ends: Now + LeaseDuration + Grace.
// Every node ID's watermark floor is raised to it too, which is at least
// Now + LeaseDuration, the latest expiry any lease granted before the import can
// have (DESIGN §7).
func (p RestorePlan) Until() time.Time { return protocol.Millis(p.Now).Add(p.LeaseDuration + p.Grace) }

// SafeMeta returns meta as the restored store must hold it: a new generation
// (random ID, number above both the snapshot's and the live store's, origin
// recovered, at Now), so that every registry that adopted a generation treats the
// import as a store reset; and a fencing counter no lower than any token the
// snapshot or the live store knew, so that every new token lies above them.
func (p RestorePlan) SafeMeta(meta Meta) Meta {
	meta.Generation = idkeeper.Generation{ID: idkeeper.NewGenerationID(), Number: max(meta.Generation.Number, p.LiveGeneration) + 1,
		Origin: idkeeper.OriginRecovered, At: protocol.Millis(p.Now)}
	meta.Fence = max(meta.Fence, p.LiveFence)
	return meta
}

// SafeRecord returns rec as the restored store must hold it. A node: its Floor
// and QuarantinedUntil raised to at least Until (never lowered), Restorable set
// (its live holders' receipts restore their leases, as after a reset), its
// LastToken and lease kept — a lease keeps its expiry, never extended or
// shortened; its quarantine applies when it is freed. Other records are returned
// as they are.
func (p RestorePlan) SafeRecord(rec Record) Record {
	if rec.Node == nil {
		return rec
	}
	n := *rec.Node
	until := p.Until()
	if n.Floor.Before(until) {
		n.Floor = until
	}
	if n.QuarantinedUntil.Before(until) {
		n.QuarantinedUntil = until
	}
	n.Restorable = true
	rec.Node = &n
	return rec
}
