package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper/etcd"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
	"github.com/idkeeper/idkeeper/server"
)

// gatewayProc is an in-process `idkeeper gateway` started by startGatewayCmd.
type gatewayProc struct {
	base string
	logs *lockedBuffer
	stop func() int // ends the gateway and returns its exit status
}

// startGatewayCmd runs `idkeeper gateway args…` in process (run(), as the
// command line does, JSON logs) and waits until it issues IDs.
func startGatewayCmd(t *testing.T, args []string, env map[string]string) *gatewayProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	args = append([]string{"gateway", "--listen", "127.0.0.1:0", "--log-format", "json"}, args...)
	done := make(chan int, 1)
	go func() {
		code := run(ctx, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard, pw)
		pw.Close()
		done <- code
	}()
	logs := &lockedBuffer{}
	addr := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		dec := json.NewDecoder(io.TeeReader(pr, logs))
		for {
			var rec struct{ Msg, Addr string }
			if err := dec.Decode(&rec); err != nil {
				_, _ = io.Copy(logs, pr)
				return
			}
			if rec.Msg == "gateway listening; leasing node IDs" {
				select {
				case addr <- rec.Addr:
				default:
				}
			}
		}
	}()
	stopped := false
	var code int
	stop := func() int {
		if !stopped {
			stopped = true
			cancel()
			code = <-done
			<-scanned
		}
		return code
	}
	t.Cleanup(func() { stop() })
	select {
	case a := <-addr:
		g := &gatewayProc{base: "http://" + a, logs: logs, stop: stop}
		deadline := time.Now().Add(20 * time.Second)
		for (&client{t: t, base: g.base}).status("GET", "/health") != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatalf("the gateway did not get ready:\n%s", logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return g
	case c := <-done:
		<-scanned
		t.Fatalf("the gateway exited with status %d:\n%s", c, logs)
	case <-time.After(20 * time.Second):
		t.Fatalf("the gateway did not start:\n%s", logs)
	}
	return nil
}

// idemPost posts body to base's /v1/ids with the Idempotency-Key key and returns
// the status, the replay header and the body.
func idemPost(t *testing.T, base, key, body string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/ids", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderKey, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed), string(b)
}

// purgingGatewayRegistry starts a registry on a bolt file for gateway tests and
// makes the gateways purge lapsed idempotency records every 100 ms; both undone
// in t.Cleanup.
func purgingGatewayRegistry(t *testing.T) (context.Context, *server.Server) {
	t.Helper()
	purgeEvery := idemPurgeEvery
	idemPurgeEvery = 100 * time.Millisecond
	t.Cleanup(func() { idemPurgeEvery = purgeEvery })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg, err := server.Open(ctx, server.Config{Listen: "127.0.0.1:0", Store: "bolt:" + filepath.Join(t.TempDir(), "r.db"),
		InitStore: true, BootstrapAPIKey: bootstrapKey, ShutdownTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return ctx, reg
}

// The gateway's --idempotency-store on etcd (issue #17): two gateways on one
// embedded etcd share the records under the URL's prefix: a request replayed with
// its Idempotency-Key gets the same IDs from either gateway, another body with
// the key gets 422 IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST, as on Redis;
// the lapsed records are purged (etcd keeps them otherwise); both stop cleanly.
func TestGatewayIdempotencyOnEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, reg := purgingGatewayRegistry(t)
	store := "etcd://" + strings.TrimPrefix(srv.Endpoints()[0], "http://") + "/gw-idem"
	env := map[string]string{"IDKEEPER_API_KEY": bootstrapKey}
	args := []string{"--server", "http://" + reg.Addr().String(), "--idempotency-store", store}
	a := startGatewayCmd(t, args, env)
	b := startGatewayCmd(t, args, env)

	const body = `{"count":4}`
	st, replayed, first := idemPost(t, a.base, "etcd-key-1", body)
	if st != http.StatusOK || replayed != "" {
		t.Fatalf("first request: %d replayed=%q %s", st, replayed, first)
	}
	var ids struct{ IDs []json.Number }
	if err := json.Unmarshal([]byte(first), &ids); err != nil || len(ids.IDs) != 4 {
		t.Fatalf("first answer: %v %s", err, first)
	}
	for _, g := range []*gatewayProc{a, b} {
		st, replayed, again := idemPost(t, g.base, "etcd-key-1", body)
		if st != http.StatusOK || replayed != "true" || again != first {
			t.Fatalf("replay on %s: %d replayed=%q\n%s\nwant\n%s", g.base, st, replayed, again, first)
		}
	}
	for _, g := range []*gatewayProc{b, a} {
		st, _, p := idemPost(t, g.base, "etcd-key-1", `{"count":5}`)
		var prob struct{ Code string }
		if err := json.Unmarshal([]byte(p), &prob); err != nil || st != http.StatusUnprocessableEntity || prob.Code != string(idempotency.CodeKeyReused) {
			t.Fatalf("another body with the key on %s: %d %s; want 422 %s", g.base, st, p, idempotency.CodeKeyReused)
		}
	}
	// Another key is another request: new IDs.
	if st, replayed, other := idemPost(t, b.base, "etcd-key-2", body); st != http.StatusOK || replayed != "" || other == first {
		t.Fatalf("another key: %d replayed=%q %s", st, replayed, other)
	}
	// The records are on etcd, under the URL's prefix.
	resp, err := srv.Client().Get(ctx, "gw-idem/idem/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 2 {
		t.Fatalf("records under gw-idem/idem/: %v, %v; want 2", resp, err)
	}

	// A gateway with a short TTL: its record lapses and the purge deletes it,
	// leaving the others'.
	c := startGatewayCmd(t, append(args, "--idempotency-ttl", "50ms"), env)
	if st, _, p := idemPost(t, c.base, "etcd-key-3", body); st != http.StatusOK {
		t.Fatalf("short TTL: %d %s", st, p)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := srv.Client().Get(ctx, "gw-idem/idem/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
		}
		if len(keys) == 2 && !strings.Contains(strings.Join(keys, " "), "etcd-key-3") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lapsed record was not purged: %q", keys)
		}
		time.Sleep(50 * time.Millisecond)
	}

	for _, g := range []*gatewayProc{a, b, c} {
		if code := g.stop(); code != exitOK {
			t.Fatalf("stop: exit %d:\n%s", code, g.logs)
		}
		if logs := g.logs.String(); !strings.Contains(logs, `"idempotencyStore":"`+store+`"`) || !strings.Contains(logs, "gateway stopped") {
			t.Fatalf("the log does not name the store or a clean stop:\n%s", logs)
		}
	}
}

// A bad etcd URL is a usage error (status 2) that does not repeat its password,
// before anything is opened; an etcd that does not answer stops the gateway at
// start (status 1) with a message that says so, without the password.
func TestGatewayIdempotencyEtcdURLRefused(t *testing.T) {
	env := map[string]string{"IDKEEPER_API_KEY": bootstrapKey}
	base := []string{"gateway", "--listen", "127.0.0.1:0", "--server", "http://127.0.0.1:1"}
	for _, c := range []struct{ url, want string }{
		{"etcd://127.0.0.1/x", "needs HOST:PORT"},
		{"etcd://root:topsecret@127.0.0.1:2379/x?bogus=1", `unknown option "bogus"`},
		{"etcd://root:topsecret@127.0.0.1:port/x", "does not parse"},
		{"etcd://127.0.0.1:2379/x?cacert=/nonexistent", "need etcds://"},
		{"etcds://127.0.0.1:2379/x?cacert=" + filepath.Join(t.TempDir(), "missing.pem"), "cacert"},
		{"etcd://", "no host"},
	} {
		code, _, stderr := runInProcess(context.Background(), append(base, "--idempotency-store", c.url), env)
		if code != exitUsage || !strings.Contains(stderr, "--idempotency-store") || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "topsecret") {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and %q, no password", c.url, code, stderr, c.want)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	ping := idemEtcdPingTimeout
	idemEtcdPingTimeout = time.Second
	t.Cleanup(func() { idemEtcdPingTimeout = ping })
	for _, store := range []string{
		"etcd://" + closed + "/x",                                   // the Ping fails
		"etcd://root:topsecret@" + closed + "/x?dial_timeout=200ms", // authenticating in Open fails
	} {
		start := time.Now()
		code, _, stderr := runInProcess(context.Background(), append(base, "--idempotency-store", store), env)
		if code != exitFail || !strings.Contains(stderr, "does not answer") || !strings.Contains(stderr, etcd.RedactURL(store)) ||
			strings.Contains(stderr, "topsecret") {
			t.Errorf("unreachable etcd %s: exit %d, stderr %q; want exit 1, %q, no password", store, code, stderr, "does not answer")
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("unreachable etcd %s: refused after %s", store, d)
		}
	}
}
