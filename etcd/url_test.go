package etcd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/etcd"
	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
)

func TestParseURL(t *testing.T) {
	cfg, prefix, err := etcd.ParseURL("etcd://root:s3cret@10.0.0.1:2379,10.0.0.2:2379/prod/ids?dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Endpoints, " ") != "http://10.0.0.1:2379 http://10.0.0.2:2379" || prefix != "prod/ids/" ||
		cfg.Username != "root" || cfg.Password != "s3cret" || cfg.DialTimeout != 2*time.Second || cfg.TLS != nil ||
		cfg.MaxCallSendMsgSize != etcd.MaxRequestBytes {
		t.Fatalf("config %+v, prefix %q", cfg, prefix)
	}
	if cfg, prefix, err := etcd.ParseURL("etcds://h:2379"); err != nil || prefix != etcd.DefaultPrefix || cfg.TLS == nil ||
		cfg.Endpoints[0] != "https://h:2379" {
		t.Fatalf("etcds default: %+v %q %v", cfg, prefix, err)
	}
	for raw, want := range map[string]string{
		"redis://h:6379":                                "must start with",
		"etcd://":                                       "no host",
		"etcd://h":                                      "HOST:PORT",
		"etcd://h:2379,k":                               "bad URL",
		"etcd://:pw@h:2379":                             "needs a user name",
		"etcd://h:2379?dial_timeout=2h":                 "dial_timeout",
		"etcd://h:2379?x=1":                             "unknown option",
		"etcd://h:2379?cacert=/etc/ca.pem":              "need etcds://",
		"etcds://h:2379?cacert=/nonexistent":            "cacert",
		"etcds://h:2379?cert=/a":                        "cert and key together",
		"etcd://h:2379?dial_timeout=1s&dial_timeout=2s": "given 2 times",
	} {
		_, _, err := etcd.ParseURL(raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL(%q) = %v, want an error with %q", raw, err, want)
		}
	}
	if _, _, err := etcd.ParseURL("etcd://u:topsecret@h"); err == nil || strings.Contains(err.Error(), "topsecret") {
		t.Errorf("an error repeats the password: %v", err)
	}
	if got := etcd.RedactURL("etcd://u:topsecret@h:2379/p"); strings.Contains(got, "topsecret") || !strings.Contains(got, "u:xxxxx@") {
		t.Errorf("RedactURL = %q", got)
	}
	// A URL that does not parse cannot be redacted: it is not shown.
	if got := etcd.RedactURL("etcd://u:topsecret@h:port/p"); strings.Contains(got, "topsecret") {
		t.Errorf("RedactURL of an unparsable URL = %q", got)
	}
}

// Open dials the URL form and owns its client: a store on an embedded member,
// under the URL's prefix, initialised and closed.
func TestOpenURL(t *testing.T) {
	srv := etcdtest.Start(t)
	ep := strings.TrimPrefix(srv.Endpoints()[0], "http://")
	s, err := etcd.Open("etcd://"+ep+"/url-test", etcd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 16}); err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Get(ctx, "url-test/", clientv3.WithPrefix())
	if err != nil || resp.Count == 0 {
		t.Fatalf("nothing under the URL's prefix: %v, %v", resp, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping after Close: the client is still open")
	}
}
