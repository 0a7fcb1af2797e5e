package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
)

// Durability tells the server at start-up whether the Redis that holds the store
// keeps every write it acknowledged across a restart or a failover (DESIGN §7,
// "Durability is decided at start-up"). It is safe when Redis runs with the
// append-only file (appendonly yes) and either fsyncs it before every reply
// (appendfsync always) or the store waits for replicas (Options.WaitReplicas ≥ 1),
// so that a crash of one machine loses no acknowledged grant, renewal or reset.
//
// It is not safe when Redis runs without the append-only file (RDB snapshots
// only, or no persistence at all: a restart loses the writes since the last
// snapshot, or everything), when the append-only file is fsynced only every
// second (everysec) or when the OS decides (no) while no replica acknowledges the
// writes, or when CONFIG GET answers an error (a renamed or forbidden command, as
// on some managed services): the settings are unknown, so the store cannot vouch
// for them. why names the settings read, for the operator. err is set only when
// Redis could not be asked at all (a connection error); safe is false then.
func (s *Store) Durability(ctx context.Context) (safe bool, why string, err error) {
	c, err := s.server(ctx)
	if err != nil {
		return false, "", err
	}
	cfg := map[string]string{}
	for _, name := range []string{"appendonly", "appendfsync", "save"} {
		m, err := c.ConfigGet(ctx, name).Result()
		var reply goredis.Error
		if errors.As(err, &reply) {
			return false, fmt.Sprintf("cannot read the Redis persistence settings (CONFIG GET %s: %v), so nothing "+
				"vouches that a restart keeps the acknowledged writes", name, err), nil
		}
		if err != nil {
			return false, "", fmt.Errorf("redis: config get %s: %w", name, err)
		}
		v, ok := m[name]
		if !ok {
			return false, fmt.Sprintf("Redis does not report its %s setting (CONFIG GET %s answered nothing), so "+
				"nothing vouches that a restart keeps the acknowledged writes", name, name), nil
		}
		cfg[name] = v
	}
	aof, fsync, save := cfg["appendonly"], cfg["appendfsync"], cfg["save"]
	switch {
	case aof != "yes" && save == "":
		return false, fmt.Sprintf("Redis persists nothing (appendonly %s, save \"\"): a restart loses every "+
			"acknowledged write; set appendonly yes with appendfsync always (or WaitReplicas ≥ 1)", aof), nil
	case aof != "yes":
		return false, fmt.Sprintf("Redis persists only RDB snapshots (appendonly %s, save %q): a restart loses "+
			"the writes acknowledged since the last snapshot; set appendonly yes with appendfsync always "+
			"(or WaitReplicas ≥ 1)", aof, save), nil
	case fsync == "always":
		return true, "appendonly yes, appendfsync always: every acknowledged write is in the append-only " +
			"file on disk before its reply", nil
	case s.waitReplicas >= 1:
		return true, fmt.Sprintf("appendonly yes, appendfsync %s: a crash may lose the last second of the "+
			"append-only file, but every grant, renewal and reset waits until %d replica(s) acknowledged it "+
			"(WaitReplicas %d)", fsync, s.waitReplicas, s.waitReplicas), nil
	}
	return false, fmt.Sprintf("appendonly yes, appendfsync %s, WaitReplicas 0: a crash may lose the writes of "+
		"about the last second, which no replica acknowledged; set appendfsync always or WaitReplicas ≥ 1",
		fsync), nil
}
