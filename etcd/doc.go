// Package etcd is the idkeeper.Store on etcd (go.etcd.io/etcd/client/v3): the
// store for registries that must lose no acknowledged grant when a store member
// fails. etcd commits every write to a quorum of its members' logs (Raft) before
// it answers, so the loss of a minority of members, the leader included, loses
// nothing the store acknowledged; a Redis failover can (DESIGN §7).
//
// # Transactions
//
// Every change is one etcd transaction whose If() compares revisions; nothing is
// read, changed in Go and written back outside one. All lease state changes
// through lease transactions, and every lease transaction rewrites one key, the
// meta record (generation, fencing counter, free-order counter and the counters
// below), so:
//
//  1. A first read transaction takes the meta record, its ModRevision M, and
//     what the call needs up front (the requester's index entry, the first entries
//     of a free index, …): all at one revision.
//  2. Further reads (the node and history records the first one named) are read
//     transactions conditioned on If(ModRevision(meta) = M): while it holds,
//     nothing of the lease state has changed since the first read. A new grant
//     needs none: the index entries it reads carry their nodes' records.
//  3. The writes, with the meta record, are one transaction conditioned on the
//     same compare. When another writer committed first, the compare fails,
//     nothing is written, and the call starts over from 1 with fresh reads and a
//     fresh now, up to 100 times, with a short random back-off after the second
//     failure, within the call's context.
//
// So lease transactions are serialised by the meta key, and every answer, an
// error included, is computed from one consistent state. A call that has nothing
// to write (a Renew of a requester holding nothing, a Reclaim with nothing due)
// answers from its reads and commits nothing. Within one Store, lease
// transactions take turns (a mutex), so goroutines of one process never make each
// other start over; different processes do, rarely.
//
// Guarded methods check their idkeeper.Guard (generation ID, fencing counter,
// Guard.Now against the store's now) on the state of step 1, with
// idkeeper.Guard.Check, before anything else: when it fails, nothing is written.
//
// Job locks, API keys and clock-skew observations are single records outside the
// pool; each changes by compare and set on its own key's ModRevision. So do the
// admin records, the alert state and the idempotency records (# Admin records,
// alerts, idempotency).
//
// # Time
//
// etcd has no clock to ask. The time authority is Options.Clock, time.Now by
// default, as for the bolt store: with several registry replicas on one etcd, each
// replica's clock is proven against the TCKCLK 2 clock agent (DESIGN §8), so any
// two differ by at most Δ. Each attempt of each call reads the clock once and
// truncates it to the millisecond. Which index holds a free node (quarantined,
// cooling, ready) is judged by the clock of the replica that put it there: a node
// whose quarantine ended by one replica's clock may be granted by another whose
// clock is up to Δ behind, up to Δ before the quarantine ends by that one's. That
// costs no uniqueness: a grant's window starts after the node's fenced watermark,
// which is at least the end of the lease that a revocation quarantined, and at
// least the quarantine's end after a reset.
//
// # Keys
//
// Every key starts with Options.Prefix (default "idkeeper/"). Times are Unix
// milliseconds; in keys they are 16 hex digits of the value with its sign bit
// flipped, so that key order is time order (Go's zero time.Time, a negative
// value, included); node IDs are 8 hex digits, sequence numbers and tokens 16, so
// that key order is number order. An index entry holds a copy of its node's
// record, written with it in every transaction, so that a range read of an index
// reads the records too.
//
//	meta                       JSON: version (1), generation {id, number, origin, at} (absent: not
//	                           initialised), nodes (pool size), first (the pool's first node ID;
//	                           absent: 0), layout (the pool's layout, idkeeper.FormatLayout; absent:
//	                           a pool from before layouts were stored, on the default layout), fence
//	                           (fencing counter), seq
//	                           (free-order counter), held (leases), quarantined and cooling (entries
//	                           of those indexes), readyFrom (no ready entry has a lower free
//	                           sequence: where Alloc reads the ready index from)
//	node/<node>                the node's record: watermark | quarantinedUntil | floor | freeSeq |
//	                           lastToken (8 bytes each, big-endian) | place (the free index that holds
//	                           it: 0 none, held; 1 ready; 2 cooling; 3 quarantine) | restorable, and
//	                           while held its lease: notBefore | expiresAt | token | grantedAt |
//	                           renewedAt (8 bytes each) | requester key length (2 bytes) | requester
//	                           key | key ID. Never deleted.
//	req/<requester key>        "<node>:<token>,…;<key ID>" (decimal; node IDs ascending): the
//	                           requester's leases and the API key that owns them all
//	keyheld/<key ID>           decimal: node IDs the key's leases hold (absent: none)
//	keycool/<key ID>           "<node>:<until>:<last token>,…" (decimal): the key's cooling charges
//	                           (keycool.go); a snapshot load deletes them
//	expiry/<expiresAt>/<node>  held nodes by expiry: Reclaim, and the leases in grace
//	ready/<freeSeq>/<node>     free nodes whose fenced watermark was below now when placed
//	cooling/<fenced watermark>/<freeSeq>/<node>
//	                           free nodes whose fenced watermark was at or after now
//	quar/<quarantinedUntil>/<node>
//	                           free nodes quarantined when placed
//	hist/<node>/<token>        the lease history: a JSON record per grant (history.go)
//	histend/<endedAt>/<node>/<token>
//	                           ended history records, oldest first: PruneHistory
//	lock/<name>                JSON: owner, lockedAt, until
//	apikey/<ID>                JSON: hash, description, createdAt, createdBy, expiresAt, maxNodes,
//	                           bootstrap, admin, revokedAt, lastUsedAt
//	skew/<requester key>       JSON: the last clock-skew observation and when it lapses
//	skewlapse/<lapse>/<requester key>
//	                           observations by lapse time: SkewObservations drops the lapsed ones
//	user/<name>                JSON: an admin account (account.User) with its Version
//	session/<ID>               JSON: an admin session (user, epoch, createdAt, seenAt, expiresAt, …)
//	usersession/<user>/<ID>    empty: the sessions of a user (DeleteUserSessions)
//	sessionseen/<seenAt>/<ID>  empty: sessions by SeenAt (PruneSessions: idle)
//	sessionexp/<expiresAt>/<ID>
//	                           empty: sessions by ExpiresAt (PruneSessions: expired)
//	allow/<hex key>            JSON: an allow-list entry; the key is family (00 IPv4, 01 IPv6) |
//	                           16-byte address (IPv4 4-in-6) | prefix length, in hex: key order is
//	                           address order, then length
//	audit/<seq>                JSON: an audit entry (16 hex digits of Seq)
//	audithead                  JSON: seq, hash of the last audit entry ever appended (kept when pruned)
//	alert/<name>               JSON: an alert's state (alert.State) with its Version
//	setting/backup-schedule    JSON: the backup schedule (idkeeper.BackupSchedule) with its Version;
//	                           no snapshot holds it
//	idem/<scope>               JSON: an idempotency record (owner, fingerprint, marker token, state,
//	                           outcome, metadata, body, createdAt, lockedUntil, expiresAt)
//	idemexp/<expiresAt>/<scope>
//	                           decimal: the record's size; idempotency records by lapse time (Purge,
//	                           Stats)
//	idemown/<hex owner>/<expiresAt>/<scope>
//	                           decimal: the record's size; an owner's records by lapse time (the cap
//	                           of idempotency.CountingStore.Owned: a count of the live ones)
//	staging/<load ID>/…        a snapshot load's staged keys (the live key below the prefix), and
//	                           staging/<load ID>/~load, the load's marker (# Snapshots)
//
// The fenced watermark of a node is max(watermark, floor). A free node sits in
// exactly one of the three free indexes; a node freed gets the next free-order
// number. Time moves nodes on by itself (a quarantine ends, a cooling watermark
// passes); Alloc and Reclaim move the entries it has moved, up to 256 of each
// kind a transaction, in preparatory transactions when there are more. So no call
// reads the pool: Alloc, Renew and Remove cost O(k log n) for k node IDs; Counts
// reads the counters and counts index ranges, O(log n + k) with k the leases in
// grace and the entries time has moved on but no Alloc or Reclaim has moved yet;
// Reclaim works in transactions of Options.ReclaimBatch leases. Init, Grow and
// Reset write the pool (or its new part) in one transaction; Leases reads the node
// records in one range.
//
// # Admin records, alerts, idempotency
//
// The admin records (account.Store), the alert state (alert.StateStore)
// and the idempotency records (idempotency.Store) are outside the lease
// pool and its meta record. Each change is one transaction conditioned on the
// revisions of what it read: a create on CreateRevision(key) = 0 (CreateUser,
// CreateSession, AddAllowEntry: ErrConflict when the key exists), an update on
// the record key's ModRevision (UpdateUser, PutAlertState: the record's Version is
// checked against the caller's in Go, and the put is made only when the key is
// unchanged since that read; a session's record, with its index entries, by
// TouchSession and DeleteSession; an idempotency record with its lapse entry). An
// audit append reads audithead and writes the entry and the new head in one
// transaction conditioned on the head's ModRevision (0 when absent): a writer
// that lost gets ErrConflict, as the contract says. The changes of many records
// (DeleteUserSessions, PruneSessions, PruneAudit, Purge) read their candidates
// from an index and delete them in transactions of at most 100 keys, each
// conditioned on the revisions of the records it deletes, judged again on them.
// A capped idempotency Begin (idempotency.CountingStore.Owned) counts the
// owner's live entries at the revision R it read the record at, and writes on the
// further condition that no key of the owner's range has a ModRevision above R
// (one range compare), so concurrent Begins never take an owner past its cap.
// The sessions' ends, the audit prune's cut-off and the idempotency records'
// lapses are judged by the times the caller gives, or, for idempotency, by
// Options.Clock. The store never drops a record by itself (no etcd leases): run
// PruneSessions, PruneAudit and Purge (idempotency) now and then.
//
// # Snapshots
//
// ReadSnapshot reads the meta record and the audit head in one transaction, and
// every other key at that transaction's revision (WithRev), in range reads of
// 1,000 keys: one consistent view, whatever is written meanwhile. A read that
// outlasts the compaction retention fails (etcd has compacted its revision) and
// may be tried again.
//
// LoadSnapshot stages, checks, then swaps in one transaction:
//
//  1. It deletes the staging keys of loads that did not finish (one range
//     delete of staging/), then writes its marker staging/<load ID>/~load, whose
//     CreateRevision names the load.
//  2. It reads the records of the source, checks each with
//     snapshot.Checker (and that a requester's leases belong to one key),
//     and writes the keys they make, under staging/<load ID>/ (the live key's
//     name below the prefix), in transactions of at most 100 keys conditioned
//     on the marker: node records with their index entries (free nodes filed at
//     the load's now in NodeID order, free sequence NodeID + 1), API keys,
//     users, allow-list entries, audit entries and history records with their
//     ended entries; then the requester index and the key counts, which it
//     gathered in memory (one entry per requester and per key: at most the
//     pool). Nothing live is touched so far.
//  3. The swap: it reads the staged keys and the keys of every live durable
//     family (node, req, keyheld, expiry, ready, cooling, quar, hist, histend,
//     apikey, user, allow, audit and the four session families) at one revision
//     R, and commits one transaction that puts every staged key in its live
//     place, the meta record and the audit head, deletes every live durable key
//     the snapshot does not hold (so every session) and the staging keys, on
//     the condition that the marker is the load's and that no key of those
//     families, nor meta or audithead, has a ModRevision above R (a range
//     compare each). When a writer came between, it reads again, up to 20
//     times. (etcd refuses a transaction that puts a key inside a range it
//     deletes, so the old keys are deleted one by one.)
//
// Until the swap commits, the live keys are untouched: a load that fails or
// dies anywhere before leaves the old state whole and readable, and its staging
// keys, deleted at once on a failure, or by the next load's step 1 after a crash.
// The swap is all or nothing, as every etcd transaction. Every lease transaction
// and compare-and-set in flight across the swap finds its revision changed and
// starts over on the new state. Loads are meant to run one at a time (package
// backup runs them under a job lock); within one Store they take turns, and a
// load of another process that deletes this one's staging makes it fail,
// writing nothing.
//
// The price of one swap transaction: it holds the whole durable state (about
// 2 keys per node ID, 2 per history record, 1 per lease holder, API key, user,
// allow-list entry and audit entry, and a delete per old key the snapshot does
// not hold), so the server must allow that many operations (--max-txn-ops) and
// bytes (--max-request-bytes) in one request, and the loading process holds that
// request in memory; a server that allows less fails the load with an error
// naming the setting, having changed nothing live. Staging itself holds at most
// 100 keys in memory and needs nothing above etcd's defaults.
//
// # What the etcd server must allow
//
// A transaction applies entirely or not at all, so the largest ones must fit in
// one request. Counting the keys each writes (k node IDs, n the pool size):
//
//	Init, Grow          2 per new node ID (record, ready entry)
//	Reset               up to 3n + 1 (every record; a free node's index entry moved)
//	Alloc               4k + 3, and up to 3 · 512 for entries time has moved on
//	Renew, Remove       4k + 2, 5k + 3
//	Reclaim             up to 7 per lease, ReclaimBatch leases (default 512), + 3 · 512
//	Quarantine          up to 3k + 1
//	LoadSnapshot        its swap: every key of the loaded state (about 2 per node ID and per
//	                    history record, 1 per lease holder, API key, user, allow-list entry and
//	                    audit entry) + a delete per live key the snapshot does not hold + 4
//	                    (staging transactions: at most 100 keys)
//	Reads               at most 127 keys a read transaction (any server allows that),
//	                    up to 8 such reads at once
//
// etcd refuses a transaction of more than --max-txn-ops operations (default 128:
// enough for pools of about 40 node IDs) and a request of more than
// --max-request-bytes (default 1.5 MiB). For the default pool of 4,096 node IDs
// (and Allocs of up to 4,096, protocol.MaxCount) run every member with
//
//	--max-txn-ops=32768 --max-request-bytes=10485760
//
// which suit pools up to about 10,000 node IDs; the clients need
// clientv3.Config.MaxCallSendMsgSize of at least --max-request-bytes. Measured
// for 4,096 node IDs: Init writes 8,193 keys in 0.6 MiB; a Reset 12,289 in 0.8
// MiB (8,193 in 1.1 MiB when all are held); an Alloc of all 4,096, 16,387 in 2.2
// MiB, the client's host and labels included once per node ID; a Reclaim batch of
// 512, 2,563 in 0.3 MiB. A store whose server allows less fails those calls with
// an error that names the setting; nothing is written.
//
// Every lease transaction writes a new revision of the meta key, and etcd keeps
// every revision, deleted keys included, until it compacts: run the members with
// --auto-compaction-mode=periodic --auto-compaction-retention=5m (the store never
// reads an old revision, so a short retention costs it nothing), and defragment
// now and then, or the database grows to its quota (--quota-backend-bytes) and
// etcd refuses writes. Compaction also keeps reads short: a range read walks the
// keys deleted in it since the last compaction. Alloc reads the ready index, from
// whose start every grant deletes an entry, from the meta record's readyFrom on,
// past those; Reclaim and Counts walk the expiry entries that Renew and Remove
// deleted since the last compaction.
//
// Reads are linearizable (etcd's default): a read needs the leader and a quorum,
// as writes do. A cluster that lost its quorum answers nothing; the registry then
// reports the store unavailable and grants nothing, which is safe.
//
// # Store resets
//
// etcd loses no acknowledged write while a quorum of members keeps its data, so
// the generation and the fencing counter never go back by a failover. They do
// when the data is replaced: a restore from a snapshot (etcdutl snapshot restore),
// a member set rebuilt with --force-new-cluster from a stale member, a wiped
// cluster, a prefix deleted. The registry detects those as for any store (a
// changed or missing generation, a fencing counter below a token it handed out)
// and recovers with Reset. The store has no replication ID
// (idkeeper.ReplicatedStore): there is no asynchronous replication to vouch for.
package etcd
