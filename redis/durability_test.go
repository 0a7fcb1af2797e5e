package redis_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/redis"
)

// Durability vouches for the store only with the append-only file, fsynced on
// every write or backed by replica acknowledgement; never without the file.
func TestDurability(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []redistest.Option
		set  map[string]string // CONFIG SET before asking
		wait int
		safe bool
		why  string
	}{
		{"AOFAlways", []redistest.Option{redistest.WithAOF()}, nil, 0, true, "appendfsync always"},
		{"AOFAlwaysWaitReplicas", []redistest.Option{redistest.WithAOF()}, nil, 1, true, "appendfsync always"},
		{"AOFEverySec", []redistest.Option{redistest.WithAOFEverySec()}, nil, 0, false, "appendfsync everysec, WaitReplicas 0"},
		{"AOFEverySecWaitReplicas", []redistest.Option{redistest.WithAOFEverySec()}, nil, 1, true, "WaitReplicas 1"},
		{"AOFNoFsync", []redistest.Option{redistest.WithAOF()}, map[string]string{"appendfsync": "no"}, 0, false, "appendfsync no"},
		{"NoPersistence", nil, nil, 0, false, "persists nothing"},
		{"NoPersistenceWaitReplicas", nil, nil, 2, false, "appendonly no"},
		{"RDBOnly", nil, map[string]string{"save": "3600 1"}, 1, false, "RDB snapshots"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t, c.opts...)
			for k, v := range c.set {
				if err := rawClient(t, srv).ConfigSet(t.Context(), k, v).Err(); err != nil {
					t.Fatal(err)
				}
			}
			s := open(t, srv, redis.Options{WaitReplicas: c.wait})
			safe, why, err := s.Durability(t.Context())
			if err != nil || safe != c.safe || !strings.Contains(why, c.why) {
				t.Fatalf("Durability = %v, %q, %v; want %v, mentioning %q", safe, why, err, c.safe, c.why)
			}
		})
	}
}

// CONFIG GET refused (a renamed or forbidden command) leaves the persistence
// unknown: not safe. A connection error is an error, not a verdict.
func TestDurabilityFailsClosed(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t, redistest.WithAOF())
	if err := rawClient(t, srv).Do(ctx, "ACL", "SETUSER", "noconfig", "on", ">pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	s, err := redis.Open(fmt.Sprintf("redis://noconfig:pw@%s/0", srv.Addr()), redis.Options{Logger: quiet, WaitReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if safe, why, err := s.Durability(ctx); err != nil || safe || !strings.Contains(why, "CONFIG GET") {
		t.Fatalf("Durability without CONFIG = %v, %q, %v; want not safe", safe, why, err)
	}
	srv.Stop(t)
	if safe, why, err := s.Durability(ctx); err == nil || safe {
		t.Fatalf("Durability with Redis down = %v, %q, %v; want an error", safe, why, err)
	}
}
