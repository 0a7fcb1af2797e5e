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
// and scripts may touch them together. With the default prefix "idkeeper":
//
//	{idkeeper}:meta               hash: sentinel, nodes (pool size), fence (fencing counter), freeseq
//	{idkeeper}:leases             hash: node ID → "notBefore,expiresAt,token,grantedAt,renewedAt,requester key" (Unix ms)
//	{idkeeper}:requesters         hash: requester key → "3,17,42" (its node IDs, ascending)
//	{idkeeper}:expiry             zset: held node ID by expiresAt: Reclaim, and Leased/InGrace counts
//	{idkeeper}:watermarks         hash: node ID → watermark; never deleted
//	{idkeeper}:quarantine         hash: node ID → quarantined-until
//	{idkeeper}:free:ready         zset: free node ID by free sequence (least recently freed first)
//	{idkeeper}:free:cooling       zset: free node ID by watermark, for those whose watermark ≥ now
//	{idkeeper}:free:quarantined   zset: free node ID by quarantined-until
//	{idkeeper}:free:seq           hash: node ID → its free sequence number
//	{idkeeper}:locks              hash: job name → "lockedAt,until,owner"
//	{idkeeper}:apikeys            hash: key ID → JSON
//	{idkeeper}:skew:<requester>   string: JSON observation, PEXPIRE ttl
//	{idkeeper}:skew-index         zset: requester key by lapse time (store clock)
//
// A free node sits in exactly one of the three free sets; quarantine and cooling
// end by the clock, and Alloc moves the nodes whose state changed to the ready
// set before it picks, so no operation scans the pool: Alloc, Renew and Remove
// cost O(k log n) for k node IDs, Counts O(log n), and Reclaim works in batches
// (Options.ReclaimBatch) so that no script blocks Redis for long. Init and Reset
// walk the pool once.
//
// # What the Redis settings guarantee
//
// The store is only as durable as Redis is configured to be (DESIGN §7):
//
//   - No persistence (save "" and appendonly no): a restart loses everything. The
//     next mutating call finds the sentinel gone and returns idkeeper.ErrStoreReset,
//     and the registry quarantines the pool (Store.Reset).
//   - RDB snapshots only: a crash loses the writes since the last snapshot, the
//     sentinel survives, so the loss is not detected by it. Not recommended.
//   - appendonly yes, appendfsync everysec: a crash of Redis loses nothing that was
//     acknowledged; a crash of the machine loses up to about one second.
//   - appendfsync always: nothing acknowledged is lost.
//   - Replicas: replication is asynchronous; a failover can lose the last writes.
//     The registry detects a new primary by ReplicationID. Options.WaitReplicas
//     makes every Alloc and Renew wait until that many replicas have the write.
//   - maxmemory-policy must be noeviction: an evicted key is lost state.
//
// CheckConfig reports the settings that break these guarantees.
package redis
