package main

import (
	"context"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
)

// The etcd URL form from the command line (issue #17): init and apikey work on
// an embedded member through etcd://HOST:PORT/PREFIX; the server refuses a shared
// etcd store without a clock agent, since each replica's clock is the time
// authority there, and serves the README's session on it with the unsafe flag;
// a bad URL is a usage error that does not repeat a password.
func TestStoreOnEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	store := "etcd://" + strings.TrimPrefix(srv.Endpoints()[0], "http://") + "/cli-test"
	if out := initInProcess(t, store, "--nodes", "64"); !strings.Contains(out, "64") {
		t.Fatalf("init on etcd: %q", out)
	}
	ctx := context.Background()
	code, out, stderr := runInProcess(ctx, []string{"apikey", "create", "--store", store, "--description", "billing"}, nil)
	if code != exitOK || !strings.HasPrefix(strings.TrimSpace(out), "idk_") {
		t.Fatalf("apikey create on etcd: exit %d, %q, %s", code, out, stderr)
	}
	code, out, stderr = runInProcess(ctx, []string{"apikey", "list", "--store", store}, nil)
	if code != exitOK || !strings.Contains(out, "billing") {
		t.Fatalf("apikey list on etcd: exit %d, %q, %s", code, out, stderr)
	}
	resp, err := srv.Client().Get(ctx, "cli-test/meta")
	if err != nil || resp.Count != 1 {
		t.Fatalf("no meta record under the URL's prefix: %v, %v", resp, err)
	}

	code, _, stderr = runInProcess(ctx, []string{"server", "--listen", "127.0.0.1:0", "--store", store, "--state-file", t.TempDir() + "/s.json"}, nil)
	if code != exitUsage || !strings.Contains(stderr, "--clock-agent") {
		t.Fatalf("server on etcd without a clock agent: exit %d, %s", code, stderr)
	}
	// The server on etcd (its own prefix): the HTTP session of the README — alloc,
	// renew, remaining, remove — and the admin web's store, on etcd.
	served := "etcd://" + strings.TrimPrefix(srv.Endpoints()[0], "http://") + "/served"
	initInProcess(t, served)
	logs := serveInProcess(t, served, func(c *client) {
		c.do("GET", "/readyz", "", 200)
	}, "--unsafe-no-clock-agent", "--state-file", t.TempDir()+"/state.json")
	if !strings.Contains(logs, "UNSAFE") && !strings.Contains(logs, "WITHOUT a clock agent") {
		t.Errorf("the server did not warn that no clock agent bounds the replicas:\n%s", logs)
	}
	code, _, stderr = runInProcess(ctx, []string{"apikey", "list", "--store", "etcd://root:topsecret@127.0.0.1/x"}, nil)
	if code == exitOK || strings.Contains(stderr, "topsecret") || !strings.Contains(stderr, "HOST:PORT") {
		t.Fatalf("a bad etcd URL: exit %d, %s", code, stderr)
	}
}
