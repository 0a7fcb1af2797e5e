package redistest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper/internal/harness/redistest"
)

func client(t *testing.T, s *redistest.Server) *goredis.Client {
	t.Helper()
	o, err := goredis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	o.MaxRetries = -1
	c := goredis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestStartRestartStop(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	if strings.HasSuffix(s.Addr(), ":6379") || !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr = %q, want a private loopback port", s.Addr())
	}
	if want := "redis://" + s.Addr() + "/0"; s.URL() != want {
		t.Fatalf("URL = %q, want %q", s.URL(), want)
	}
	c := client(t, s)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ConfigGet(ctx, "save").Result()
	if err != nil {
		t.Fatal(err)
	}
	if cfg["save"] != "" {
		t.Errorf("save = %q, want persistence off", cfg["save"])
	}

	s.Restart(t)
	if _, err := c.Get(ctx, "k").Result(); !errors.Is(err, goredis.Nil) {
		t.Fatalf("after Restart without persistence: Get = %v, want redis.Nil", err)
	}

	s.Stop(t)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("Ping after Stop succeeded")
	}
	s.Stop(t) // a second Stop does nothing
}

func TestAOFSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.WithAOF())
	c := client(t, s)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart(t)
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after Restart with AOF: Get = %q, %v; want v", v, err)
	}
}

func TestServersAreIndependent(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("two servers share %s", a.Addr())
	}
}

func TestCluster(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.WithCluster())
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{s.Addr()}})
	t.Cleanup(func() { c.Close() })
	if err := c.Set(ctx, "{a}x", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.MSet(ctx, "{a}y", "2", "{a}z", "3").Err(); err != nil {
		t.Fatalf("same-slot MSET: %v", err)
	}
	if err := client(t, s).MSet(ctx, "p", "1", "q", "2").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("cross-slot MSET = %v, want CROSSSLOT", err)
	}
	s.Restart(t)
	if err := c.Set(ctx, "{a}x", "1", 0).Err(); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
}

func TestAOFEverySec(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.WithAOFEverySec())
	c := client(t, s)
	cfg, err := c.ConfigGet(ctx, "appendfsync").Result()
	if err != nil || cfg["appendfsync"] != "everysec" {
		t.Fatalf("appendfsync = %q, %v; want everysec", cfg["appendfsync"], err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart(t)
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after Restart with AOF everysec: Get = %q, %v; want v", v, err)
	}
}

func TestReplicaOfAndPromote(t *testing.T) {
	ctx := context.Background()
	primary, replica := redistest.Start(t), redistest.Start(t)
	replica.ReplicaOf(t, primary)
	pc, rc := client(t, primary), client(t, replica)
	if err := pc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := pc.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT = %d, %v; want 1 replica", n, err)
	}
	info, err := pc.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	old := field(info, "master_replid")
	replica.Promote(t)
	info, err = rc.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	if field(info, "role") != "master" || field(info, "master_replid2") != old || field(info, "master_replid") == old {
		t.Fatalf("promoted replica: %s; want a master with master_replid2 %s", info, old)
	}
	if v, err := rc.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("promoted replica: Get = %q, %v; want v", v, err)
	}
	if err := rc.Set(ctx, "k", "w", 0).Err(); err != nil {
		t.Fatalf("promoted replica refuses writes: %v", err)
	}
}

func field(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
