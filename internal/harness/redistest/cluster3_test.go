package redistest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper/internal/harness/redistest"
)

// clusterOptions parses c.URL the way IdKeeper does: go-redis's ParseClusterURL
// on the URL without "+cluster".
func clusterOptions(t *testing.T, c *redistest.Cluster) *goredis.ClusterOptions {
	t.Helper()
	u, ok := strings.CutPrefix(c.URL(), "redis+cluster://")
	if !ok {
		t.Fatalf("URL = %q, want redis+cluster://…", c.URL())
	}
	o, err := goredis.ParseClusterURL("redis://" + u)
	if err != nil {
		t.Fatalf("ParseClusterURL(%q): %v", c.URL(), err)
	}
	return o
}

// writeAcrossSlots writes keys in many slots through a cluster client and
// checks that every master holds some of them.
func writeAcrossSlots(t *testing.T, cl *redistest.Cluster, o *goredis.ClusterOptions) {
	t.Helper()
	ctx := context.Background()
	cc := goredis.NewClusterClient(o)
	defer cc.Close()
	slots := map[int64]bool{}
	for i := 0; i < 60; i++ {
		k := fmt.Sprintf("key-%d", i)
		if err := cc.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("Set(%s): %v", k, err)
		}
		slot, err := cc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	if len(slots) < 30 {
		t.Fatalf("the keys fell in %d slots, want many", len(slots))
	}
	for i := 0; i < 60; i++ {
		if v, err := cc.Get(ctx, fmt.Sprintf("key-%d", i)).Int(); err != nil || v != i {
			t.Fatalf("Get(key-%d) = %d %v", i, v, err)
		}
	}
	for _, n := range cl.Nodes() {
		nc := goredis.NewClient(&goredis.Options{Addr: n.Addr(), Password: n.Password()})
		size, err := nc.DBSize(ctx).Result()
		nc.Close()
		if err != nil || size == 0 {
			t.Errorf("DBSIZE on %s = %d %v, want some of the keys", n.Addr(), size, err)
		}
	}
}

func TestCluster3(t *testing.T) {
	begin := time.Now()
	cl := redistest.StartCluster3(t)
	t.Logf("StartCluster3: %v", time.Since(begin))

	addrs := cl.Addrs()
	if len(addrs) != 3 || len(cl.Nodes()) != 3 {
		t.Fatalf("Addrs = %v, Nodes = %d, want 3", addrs, len(cl.Nodes()))
	}
	for _, a := range addrs {
		if !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":6379") {
			t.Fatalf("address %q, want a private loopback port", a)
		}
	}
	if want := "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]; cl.URL() != want {
		t.Fatalf("URL = %q, want %q", cl.URL(), want)
	}
	o := clusterOptions(t, cl)
	if !slices.Equal(o.Addrs, addrs) || o.Password != "" {
		t.Fatalf("parsed URL: addrs %v, password %q", o.Addrs, o.Password)
	}

	// Every master owns a third of the slots.
	ctx := context.Background()
	nc := goredis.NewClient(&goredis.Options{Addr: addrs[1]})
	defer nc.Close()
	shards, err := nc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]int{}
	for _, s := range shards {
		owners[s.Nodes[0].Addr] += s.End - s.Start + 1
	}
	if len(owners) != 3 {
		t.Fatalf("CLUSTER SLOTS owners = %v, want the three nodes", owners)
	}
	for _, a := range addrs {
		if owners[a] < 5000 {
			t.Fatalf("CLUSTER SLOTS owners = %v, want each node about a third", owners)
		}
	}
	writeAcrossSlots(t, cl, o)
}

func TestCluster3PasswordAndAOF(t *testing.T) {
	begin := time.Now()
	cl := redistest.StartCluster3(t, redistest.WithAOF(), redistest.WithPassword(dataPW))
	t.Logf("StartCluster3 (AOF, password): %v", time.Since(begin))

	o := clusterOptions(t, cl)
	if o.Password != dataPW || cl.Password() != dataPW || !slices.Equal(o.Addrs, cl.Addrs()) {
		t.Fatalf("parsed URL %q: addrs %v, password %q", cl.URL(), o.Addrs, o.Password)
	}
	ctx := context.Background()
	for _, n := range cl.Nodes() {
		nc := goredis.NewClient(&goredis.Options{Addr: n.Addr(), MaxRetries: -1})
		err := nc.Ping(ctx).Err()
		nc.Close()
		if err == nil {
			t.Errorf("PING on %s without the password succeeded", n.Addr())
		}
		nc = goredis.NewClient(&goredis.Options{Addr: n.Addr(), Password: dataPW})
		cfg, err := nc.ConfigGet(ctx, "appendfsync").Result()
		nc.Close()
		if err != nil || cfg["appendfsync"] != "always" {
			t.Errorf("appendfsync on %s = %v %v, want always", n.Addr(), cfg, err)
		}
	}
	writeAcrossSlots(t, cl, o)
}
