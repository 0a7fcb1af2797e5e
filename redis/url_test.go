package redis

import (
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

func TestDialURLForms(t *testing.T) {
	for _, c := range []struct {
		url     string
		cluster bool
		err     string
	}{
		{url: "redis://127.0.0.1:6380/0"},
		{url: "rediss://:pw@127.0.0.1:6380/1"},
		{url: "redis+sentinel://:sentinelpw@127.0.0.1:26379/0?master_name=mymaster&addr=127.0.0.1:26380&password=datapw"},
		{url: "rediss+sentinel://127.0.0.1:26379/0?master_name=m"},
		{url: "redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", cluster: true},
		{url: "rediss+cluster://:pw@127.0.0.1:7000", cluster: true},
		{url: "redis+sentinel://127.0.0.1:26379/0", err: "needs master_name"},
		{url: "redis+sentinel://127.0.0.1:26379/0?master_name=m&no_such_option=1", err: "bad URL"},
		{url: "redis+cluster://:secretpw@127.0.0.1:7000?bogus=1", err: "bad URL"},
		{url: "redis+raft://127.0.0.1:1", err: "must start with one of"},
		{url: "http://127.0.0.1:1", err: "must start with one of"},
	} {
		cl, err := dial(c.url)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), "pw") {
				t.Errorf("%s: %v, want an error with %q and no password", c.url, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		_, isCluster := cl.(*goredis.ClusterClient)
		_, isClient := cl.(*goredis.Client)
		if isCluster != c.cluster || isClient == c.cluster {
			t.Errorf("%s: a %T", c.url, cl)
		}
		cl.Close()
	}
}

func TestRedactURL(t *testing.T) {
	got := RedactURL("redis+sentinel://u:sentinelpw@h:26379/0?master_name=m&password=datapw&sentinel_password=x")
	if strings.Contains(got, "sentinelpw") || strings.Contains(got, "datapw") || !strings.Contains(got, "master_name=m") {
		t.Errorf("RedactURL = %s", got)
	}
	if got := RedactURL("redis://%zz"); got != "(a URL that does not parse)" {
		t.Errorf("RedactURL of a bad URL = %s", got)
	}
}
