package redistest_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper/internal/harness/redistest"
)

// Passwords with characters a URL and a config file must escape.
const (
	dataPW     = "d@ta pw/&?#:x"
	sentinelPW = "s3nt\"inel%pw"
)

// failoverOptions parses st.URL the way IdKeeper does: go-redis's
// ParseFailoverURL on the URL without "+sentinel".
func failoverOptions(t *testing.T, st *redistest.Sentinel) *goredis.FailoverOptions {
	t.Helper()
	u, ok := strings.CutPrefix(st.URL(), "redis+sentinel://")
	if !ok {
		t.Fatalf("URL = %q, want redis+sentinel://…", st.URL())
	}
	o, err := goredis.ParseFailoverURL("redis://" + u)
	if err != nil {
		t.Fatalf("ParseFailoverURL(%q): %v", st.URL(), err)
	}
	return o
}

func TestSentinelStartsAndNamesItsParts(t *testing.T) {
	ctx := context.Background()
	begin := time.Now()
	st := redistest.StartSentinel(t)
	t.Logf("StartSentinel: %v", time.Since(begin))

	addrs := st.SentinelAddrs()
	if len(addrs) != 3 {
		t.Fatalf("SentinelAddrs = %v, want 3", addrs)
	}
	want := "redis+sentinel://" + addrs[0] + "/0?addr=" + addrs[1] + "&addr=" + addrs[2] + "&master_name=mymaster"
	if st.URL() != want {
		t.Fatalf("URL = %q, want %q", st.URL(), want)
	}
	if st.MasterName() != "mymaster" {
		t.Fatalf("MasterName = %q", st.MasterName())
	}
	o := failoverOptions(t, st)
	if o.MasterName != "mymaster" || !slices.Equal(o.SentinelAddrs, addrs) || o.Password != "" || o.SentinelPassword != "" || o.DB != 0 {
		t.Fatalf("parsed URL: master %q, sentinels %v, password %q, sentinel password %q, db %d",
			o.MasterName, o.SentinelAddrs, o.Password, o.SentinelPassword, o.DB)
	}
	nodes := st.Nodes()
	if len(nodes) != 3 || st.Master() != nodes[0] {
		t.Fatalf("Nodes = %d, Master = %v, want the first of three", len(nodes), st.Master())
	}
	for _, a := range append(addrs, nodes[0].Addr(), nodes[1].Addr(), nodes[2].Addr()) {
		if !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":6379") || strings.HasSuffix(a, ":26379") {
			t.Fatalf("address %q, want a private loopback port", a)
		}
	}

	c := goredis.NewFailoverClient(o)
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range nodes[1:] {
		rc := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
		role, err := rc.Do(ctx, "ROLE").Slice()
		rc.Close()
		if err != nil || len(role) == 0 || role[0] != "slave" {
			t.Fatalf("ROLE on replica %s = %v %v", r.Addr(), role, err)
		}
	}
}

func TestSentinelFailoverWithPasswords(t *testing.T) {
	ctx := context.Background()
	begin := time.Now()
	st := redistest.StartSentinel(t,
		redistest.WithDataOptions(redistest.WithAOF(), redistest.WithPassword(dataPW)),
		redistest.WithSentinelPassword(sentinelPW))
	t.Logf("StartSentinel (AOF, passwords): %v", time.Since(begin))

	if st.Password() != dataPW || st.SentinelPassword() != sentinelPW {
		t.Fatalf("Password = %q, SentinelPassword = %q", st.Password(), st.SentinelPassword())
	}
	o := failoverOptions(t, st)
	if o.Password != dataPW || o.SentinelPassword != sentinelPW || o.MasterName != "mymaster" ||
		!slices.Equal(o.SentinelAddrs, st.SentinelAddrs()) {
		t.Fatalf("parsed URL %q: password %q, sentinel password %q, master %q, sentinels %v",
			st.URL(), o.Password, o.SentinelPassword, o.MasterName, o.SentinelAddrs)
	}

	// The two passwords are separate: each side refuses the other's.
	old := st.Master()
	if old == nil || old.Password() != dataPW {
		t.Fatalf("Master = %v", old)
	}
	for _, tc := range []struct {
		what, addr, pw string
	}{
		{"data node with the sentinel password", old.Addr(), sentinelPW},
		{"data node without a password", old.Addr(), ""},
		{"sentinel with the data password", st.SentinelAddrs()[0], dataPW},
		{"sentinel without a password", st.SentinelAddrs()[0], ""},
	} {
		c := goredis.NewClient(&goredis.Options{Addr: tc.addr, Password: tc.pw, MaxRetries: -1})
		err := c.Ping(ctx).Err()
		c.Close()
		if err == nil {
			t.Errorf("%s: PING succeeded", tc.what)
		}
	}
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: st.SentinelAddrs()[1], Password: sentinelPW})
	if a, err := sc.GetMasterAddrByName(ctx, "mymaster").Result(); err != nil || a[0]+":"+a[1] != old.Addr() {
		t.Fatalf("GET-MASTER-ADDR-BY-NAME = %v %v, want %s", a, err, old.Addr())
	}
	sc.Close()

	o.MaxRetries = -1
	c := goredis.NewFailoverClient(o)
	defer c.Close()
	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Do(ctx, "WAIT", 2, 2000).Int(); err != nil || n != 2 {
		t.Fatalf("WAIT 2 = %d %v", n, err)
	}

	begin = time.Now()
	killed := st.KillMaster(t)
	if killed != old.Addr() {
		t.Fatalf("KillMaster = %s, want %s", killed, old.Addr())
	}
	m := st.WaitFailover(t, killed, 15*time.Second)
	t.Logf("KillMaster to WaitFailover: %v (new master %s)", time.Since(begin), m.Addr())
	if m.Addr() == killed || st.Master() != m {
		t.Fatalf("WaitFailover = %s, Master = %v, killed %s", m.Addr(), st.Master(), killed)
	}

	// The failover client follows the sentinels to the new master.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Set(ctx, "after", "2", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Set after the failover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("KillMaster to the first write on the new master: %v", time.Since(begin))
	if v, err := c.Get(ctx, "before").Result(); err != nil || v != "1" {
		t.Fatalf("Get(before) on the new master = %q %v, want the write acknowledged by WAIT", v, err)
	}
	if n, err := c.Do(ctx, "WAIT", 1, 2000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on the new master = %d %v, want the surviving replica", n, err)
	}
}
