package etcdtest_test

import (
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
)

// Two servers run side by side on ports of their own; a stopped one no longer
// answers.
func TestStartStop(t *testing.T) {
	a, b := etcdtest.Start(t), etcdtest.Start(t)
	if a.Endpoints()[0] == b.Endpoints()[0] {
		t.Fatalf("two servers on one endpoint %s", a.Endpoints()[0])
	}
	if _, err := a.Client().Put(t.Context(), "k", "a"); err != nil {
		t.Fatal(err)
	}
	resp, err := b.Client().Get(t.Context(), "k")
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the second server sees %v, %v; want nothing", resp, err)
	}
	c, err := a.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if resp, err := c.Get(t.Context(), "k"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "a" {
		t.Fatalf("a new client reads %v, %v", resp, err)
	}
	a.Stop(t)
	if err := a.Ping(time.Second); err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := b.Ping(5 * time.Second); err != nil {
		t.Fatalf("the other server: %v", err)
	}
}
