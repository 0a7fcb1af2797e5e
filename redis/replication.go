package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// noReplID is master_replid2 of a node that was never promoted from a replica
// since it started.
const noReplID = "0000000000000000000000000000000000000000"

// ReplicationChangeSafe tells whether a change of ReplicationID from prev to the
// current one can be proved to have lost no acknowledged write (DESIGN §7). Redis
// gives a new replication ID on every restart, even a clean one with the
// append-only file, and when a master creates its replication backlog (its first
// replica attaches, or one attaches after repl-backlog-ttl without any), so a
// change alone is no loss. It is safe when the node that holds the store is a
// master and either
//
//   - it was promoted from a replica of prev (its master_replid2 is prev) and
//     Options.WaitReplicas is at least 1: every grant and renewal was acknowledged
//     by a replica before its reply. This assumes the promoted replica is one of
//     those that acknowledged: with more replicas than WaitReplicas, the failover
//     must promote the most up-to-date one (Sentinel and Cluster prefer the
//     largest replication offset among replicas of equal priority). Every registry
//     replica sharing the store must use the same WaitReplicas; or
//   - it was not promoted (master_replid2 unset) and it runs with appendonly yes
//     and appendfsync always: every acknowledged write was fsynced to the
//     append-only file before its reply, so a restart replays it. The settings are
//     read now, after the change; a node that was promoted and then restarted
//     before this check looks like a restart.
//
// Anything else is not safe: a promotion without replica acknowledgement (the
// replica may have missed the latest writes, whatever its own persistence),
// a promotion from another data set, a restart with weaker persistence, a node
// that is a replica, or CONFIG GET answering an error (a renamed or forbidden
// command). why says which case applied, for the log. An unchanged ID is safe. err
// is set only when Redis could not be asked (a connection error); safe is false
// then. A restore of an old append-only file also looks like a restart here; the
// guard catches it instead, by its fencing counter below a token a registry handed
// out (idkeeper.ErrFenceRegression), or by its generation.
func (s *Store) ReplicationChangeSafe(ctx context.Context, prev string) (safe bool, why string, err error) {
	c, err := s.server(ctx)
	if err != nil {
		return false, "", err
	}
	raw, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return false, "", fmt.Errorf("redis: info replication: %w", err)
	}
	info := map[string]string{}
	for _, line := range strings.Split(raw, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			info[k] = v
		}
	}
	cur, cur2, role := info["master_replid"], info["master_replid2"], info["role"]
	if cur == "" {
		return false, "", errors.New("redis: INFO replication has no master_replid")
	}
	switch {
	case cur == prev:
		return true, "the replication ID did not change", nil
	case role != "master":
		return false, fmt.Sprintf("the node is a %s, not a master", role), nil
	case cur2 == prev && s.waitReplicas >= 1:
		return true, fmt.Sprintf("failover: a replica of %s was promoted, and every grant and renewal "+
			"was acknowledged by %d replica(s) (`--redis-wait-replicas`: redis.Options.WaitReplicas in Go)", prev, s.waitReplicas), nil
	case cur2 == prev:
		return false, fmt.Sprintf("failover: a replica of %s was promoted, but grants and renewals are "+
			"not acknowledged by replicas (`--redis-wait-replicas 0`: redis.Options.WaitReplicas in Go): it may have missed the latest", prev), nil
	case cur2 != "" && cur2 != noReplID:
		return false, fmt.Sprintf("the node was promoted from a replica of %s, not of %s", cur2, prev), nil
	}
	cfg := map[string]string{}
	for _, name := range []string{"appendonly", "appendfsync"} {
		m, err := c.ConfigGet(ctx, name).Result()
		var reply goredis.Error
		if errors.As(err, &reply) {
			return false, fmt.Sprintf("restart: cannot read the persistence settings (CONFIG GET %s: %v)", name, err), nil
		}
		if err != nil {
			return false, "", fmt.Errorf("redis: config get %s: %w", name, err)
		}
		cfg[name] = m[name]
	}
	if cfg["appendonly"] == "yes" && cfg["appendfsync"] == "always" {
		return true, "restart: appendonly yes and appendfsync always: every acknowledged write " +
			"was in the append-only file before its reply", nil
	}
	return false, fmt.Sprintf("restart: appendonly %s, appendfsync %s: acknowledged writes may have been lost",
		cfg["appendonly"], cfg["appendfsync"]), nil
}
