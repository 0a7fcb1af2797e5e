package redis_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/redis"
)

// The contract on a three-master cluster (redis-cli --cluster create), opened
// the way the binary opens it: from its redis+cluster:// URL (issue #15). Each
// case's prefix hashes to its own slot, so the cases spread over the masters.
func TestClusterThreeMastersByURL(t *testing.T) {
	cl := redistest.StartCluster3(t)
	url := cl.URL()
	if !strings.HasPrefix(url, "redis+cluster://") {
		t.Fatalf("cluster URL %q", url)
	}
	storetest.Run(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		s, err := redis.Open(url, redis.Options{Clock: clock, Logger: quiet, Prefix: fmt.Sprintf("c3-%d", prefixSeq.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
