// Package redis is the idkeeper.Store on Redis (standalone, Sentinel or Cluster).
//
// # Atomicity and time
//
// Every change that touches more than one key is one Lua script, so it applies
// entirely or not at all and no other client sees it half done. Lease scripts read
// the time from Redis TIME inside the script: Redis is the deployment's single time
// authority (DESIGN §3), however many registry replicas share it. Options.Clock
// replaces it, for tests only.
//
// # Keys
//
// Every key carries the same hash tag, so they all live in one Redis Cluster slot
// and scripts may touch them together. With the default prefix "idkeeper" (times
// are Unix ms; Go's zero time.Time is its own negative value):
//
//	{idkeeper}:meta               hash: gen (generation ID), gen:number, gen:origin ("fresh" or
//	                              "recovered"), gen:at; nodes (pool size), fence (fencing counter),
//	                              freeseq (free-order counter). No gen: not initialised
//	{idkeeper}:leases             hash: node ID → "expiresAt,renewedAt,notBefore,token,grantedAt,n,<requester key><key ID>",
//	                              n the byte length of the requester key (both may hold commas)
//	{idkeeper}:requesters         hash: requester key → "3,17,42;<key ID>" (its node IDs, ascending,
//	                              and the API key that owns them all)
//	{idkeeper}:keyheld            hash: API key ID → node IDs its leases hold (absent: none)
//	{idkeeper}:expiry             zset: held node ID by expiresAt: Reclaim, and Leased/InGrace counts
//	{idkeeper}:watermarks         hash: node ID → its own watermark; never deleted
//	{idkeeper}:floors             hash: node ID → watermark floor raised by Reset
//	{idkeeper}:quarantine         hash: node ID → quarantined-until
//	{idkeeper}:lasttokens         hash: node ID → token of its latest grant, restore or contest
//	{idkeeper}:restorable         set: node IDs a Reset made restorable, until their next grant,
//	                              restore or contest
//	{idkeeper}:free:ready         zset: free node ID by free sequence (least recently freed first)
//	{idkeeper}:free:cooling       zset: free node ID by fenced watermark, for those whose fenced watermark ≥ now
//	{idkeeper}:free:quarantined   zset: free node ID by quarantined-until
//	{idkeeper}:free:seq           hash: node ID → its free sequence number
//	{idkeeper}:keycool            zset, every score 0: "<key ID>\0<until, 16 digits>\0<node ID>\0<last
//	                              token>", a key's cooling charges (idkeeper.LeaseStore.Remove) in until
//	                              order; a charge counts while until ≥ now and the node's last token is
//	                              the one it names. A snapshot load drops them
//	{idkeeper}:locks              hash: job name → "lockedAt,until,owner"
//	{idkeeper}:apikeys            hash: key ID → JSON (hash, description, createdAt, expiresAt,
//	                              maxNodes, bootstrap, admin, revokedAt, lastUsedAt)
//	{idkeeper}:skew:<requester>   string: JSON observation, PEXPIRE ttl
//	{idkeeper}:skew-index         zset: requester key by lapse time (store clock)
//
// The lease history (idkeeper.HistoryStore, history.go; one record per grant). A
// record's ID is "<node ID, 10 digits>:<fencing token, 16 digits>", so that IDs
// sort by node, then token:
//
//	{idkeeper}:history            hash: record ID → "windowEnd,endedAt,mintedUpTo,end,notBefore,grantedAt,
//	                              fromReceipt,r,k,<requester key><key ID><client>": end "" while held, else
//	                              removed, reclaimed, revoked or contested; fromReceipt 0 or 1; r and k
//	                              the byte lengths of the requester key and the key ID; client the JSON
//	                              {host, labels} reported with Alloc ("" when none; ClientInfo's limits
//	                              bound it to a few KiB)
//	{idkeeper}:history:index      zset, every score 0, read by lex range, two members per record:
//	                              "t:<ID>" (every record: NodeHistory, snapshots), and either
//	                              "s:<node, 10 digits>:<notBefore − ZERO, 16 digits>:<token, 16 digits>"
//	                              (a grant of the store's own: LeaseAt) or "r:<ID>" (a grant learned
//	                              from a receipt, FromReceipt: LeaseAt)
//	{idkeeper}:history:ended      zset: ended record ID by endedAt (PruneHistory); held records are not
//	                              in it, so they are never pruned
//
// The lease scripts write the history in the same script as the lease: Alloc adds
// a record per grant (the client's JSON comes from Go as an argument), the
// extensions of Alloc's repeat and Renew rewrite the window end of each record
// whose lease's expiry rose, Remove, Reclaim, RevokeLease and a contest end them,
// a restore or a contest records the claim's grant (or reopens or ends the record
// of its token). The fields that change come first, so a script rewrites them
// without decoding the rest; a lease without a record (written before the
// history) gets none. It costs a few commands for all of a script's k leases:
// O(k log n) still.
//
// LeaseAt(node, t) reads, in one script, the few "s:" members of node with the
// latest window start at or before t (reverse lex range) and every "r:" member of
// node. That is exact: the store's own grants of a node have windows that follow
// each other in token order (a grant's notBefore is past the node's fenced
// watermark, which is at least the window end of every earlier record: a Remove
// with mintedUpTo lowers the watermark only to the record's new window end), so
// the latest start at or before t is the only one of them that can hold t. A
// record from a receipt has the claim's window start, which may lie anywhere, so
// those (rare: a restore after the store lost writes, or a contest) are all
// checked. PruneHistory deletes the oldest ends first, a batch (256) per script.
//
// The admin records (account.Store; JSON records, times in Unix ms, at most
// 64 KiB each):
//
//	{idkeeper}:users              hash: user name → JSON (role, passwordHash, disabled, createdAt,
//	                              createdBy, epoch, passwordChangedAt, lastLoginAt, version,
//	                              webhook when set)
//	{idkeeper}:sessions           hash: session ID → JSON (user, epoch, createdAt, expiresAt,
//	                              remoteIp, userAgent); its seenAt is in session-seen
//	{idkeeper}:session-seen       zset: session ID by seenAt: TouchSession, and PruneSessions by idleness
//	{idkeeper}:session-expiry     zset: session ID by expiresAt: PruneSessions by expiry
//	{idkeeper}:session-user:<u>   set: the session IDs of user u: DeleteUserSessions
//	{idkeeper}:allowlist          hash: masked prefix ("10.0.0.0/8") → JSON (note, createdBy, createdAt)
//	{idkeeper}:audit              hash: Seq (decimal) → JSON entry (seq, at, actor, action, target,
//	                              remoteIp, detail, prev, hash)
//	{idkeeper}:audit-seq          zset: Seq by Seq, the order of the audit hash
//	{idkeeper}:audit-head         hash: seq, hash of the last entry ever appended; pruning keeps it
//
// The alert jobs' state (alert.StateStore, alerts.go; not part of a snapshot):
//
//	{idkeeper}:alerts             hash: alert name → JSON (firing, since, lastSent, checked, summary, version)
//
// The settings kept in the store (backupschedule.go; not part of a snapshot):
//
//	{idkeeper}:settings           hash: "backup-schedule" → JSON (spec, updatedBy, updatedAt, version)
//
// Snapshots (snapshot.go) add, for as long as one is read or loaded:
//
//	{idkeeper}:snapshot:<r>:<name>  ReadSnapshot's copy of each durable key <name>, lapsing by itself
//	{idkeeper}:restore:<r>:<name>   LoadSnapshot's staging key of each durable key <name>, lapsing by itself
//	{idkeeper}:restore-lock         string: the token of the load running (SET NX PX): one at a time
//
// UpdateUser, AppendAudit and every session write are scripts; PruneSessions and
// PruneAudit read candidates, then a script deletes those that still qualify, a
// batch (256) at a time: neither scans, each costs O(k log n) for k of n records.
//
// The fenced watermark of a node is max(watermark, floor). A free node sits in
// exactly one of the three free sets; quarantine and cooling end by the clock, and
// Alloc moves the nodes whose state changed to the ready set before it picks, so no
// operation scans the pool: Alloc, Renew and Remove cost O(k log n) for k node IDs
// (and claims), Counts O(log n), and Reclaim works in batches
// (Options.ReclaimBatch) so that no script blocks Redis for long. Init, Grow and
// Reset walk the pool (or its new part) once.
//
// # Guards and generations
//
// Every guarded script (Grow, Alloc, Renew, Remove, Reclaim, Quarantine,
// RevokeLease) takes the caller's idkeeper.Guard as its first arguments and checks
// it before its first write: the generation ID in the meta hash, the fencing
// counter against MinFence, and the script's now against Guard.Now. A failing
// check answers the state it read, and the Go side turns it into the error
// idkeeper.Guard.Check gives for it.
// The counter never passes idkeeper.MaxFencingToken (2^53−1), which Lua's numbers
// hold exactly.
//
// Keys written by a build from before generations (a "sentinel" in the meta hash)
// are not read: guarded calls find no generation, and Init and Reset refuse them.
//
// # What the Redis settings guarantee
//
// The store is only as durable as Redis is configured to be (DESIGN §7), and the
// registry decides at start-up whether to trust it (Durability):
//
//   - No persistence (save "" and appendonly no): a restart loses everything. The
//     next guarded call finds the generation gone and returns an error wrapping
//     idkeeper.ErrStoreReset, and the registry recovers the store (Store.Reset:
//     every node quarantined, watermark floors and the fencing counter raised).
//   - RDB snapshots only: a crash loses the writes since the last snapshot; the
//     generation survives, so only the fencing counter (a token the registry
//     handed out above it) can reveal the loss. Not durable.
//   - appendonly yes, appendfsync everysec (or no): a crash of Redis loses nothing
//     that was acknowledged; a crash of the machine loses up to about one second.
//     Durable only with Options.WaitReplicas ≥ 1.
//   - appendonly yes, appendfsync always: nothing acknowledged is lost. Durable.
//   - Replicas: replication is asynchronous; a failover can lose the last writes.
//     Options.WaitReplicas makes every Alloc, Renew and Reset wait until that many
//     replicas have the write, and fail otherwise. The registry detects a new
//     primary by ReplicationID and asks ReplicationChangeSafe whether it can prove
//     that no acknowledged write was lost.
//   - maxmemory-policy must be noeviction: an evicted key is lost state.
//
// Durability gives the start-up verdict; CheckConfig reports the settings that
// break these guarantees.
package redis
