package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
)

// replica serves the env's registry under a URL of its own, behind a proxy of its
// own: one more replica of the same deployment (one store), whose faults the test
// sets apart from the others'. closeIt closes it: the URL then refuses connections.
func (e *env) replica() (p *proxy, url string, closeIt func()) {
	p = &proxy{next: e.proxy, faults: map[string]fault{}}
	srv := httptest.NewServer(p)
	e.t.Cleanup(srv.Close)
	return p, srv.URL, srv.Close
}

// replicasConfig is e.config() over the given replica URLs.
func (e *env) replicasConfig(urls ...string) client.Config {
	cfg := e.config()
	cfg.ServerURL, cfg.ServerURLs = "", urls
	return cfg
}

func replicaStats(t *testing.T, s *client.Session) []client.ReplicaStats {
	t.Helper()
	return s.Stats().Replicas
}

// A replica that resets the connection or answers 503 is left for the next one,
// within the same call; the one that answered is tried first from then on (sticky),
// and the counters say so.
func TestFailoverOnResetAnd503(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	a, aURL, _ := e.replica()
	b, bURL, _ := e.replica()
	a.set(allocPath, drop)
	s := e.open(e.replicasConfig(aURL, bURL))
	if a.count(allocPath) != 1 || b.count(allocPath) != 1 {
		t.Fatalf("Alloc: %d to A, %d to B; want one each", a.count(allocPath), b.count(allocPath))
	}
	// Open's first Renew went to B at once: it answered last.
	if a.count(renewPath) != 0 || b.count(renewPath) != 1 {
		t.Fatalf("first Renew: %d to A, %d to B; want it on B only", a.count(renewPath), b.count(renewPath))
	}
	st := s.Stats()
	if st.Failovers != 1 || st.Replicas[0].Failures != 1 || st.Replicas[0].Requests != 1 || st.Replicas[0].Current ||
		!st.Replicas[1].Current || st.Replicas[1].Requests != 2 || st.Replicas[1].Failures != 0 {
		t.Fatalf("stats after a reset on A: %+v, failovers %d", st.Replicas, st.Failovers)
	}
	if !strings.Contains(e.logs.String(), "registry replica failed; trying the next one") {
		t.Fatalf("no failover warning in the log:\n%s", e.logs)
	}
	held := s.Leases()

	a.set(allocPath, nil)
	b.set(renewPath, status(http.StatusServiceUnavailable, "STORE_UNAVAILABLE"))
	e.clk.Advance(halfWay)
	if b.count(renewPath) != 2 || a.count(renewPath) != 1 {
		t.Fatalf("Renew at half lease: %d to A, %d to B; want B (503), then A", a.count(renewPath), b.count(renewPath))
	}
	if got := s.Leases(); len(got) != 1 || got[0].NodeID != held[0].NodeID || got[0].FencingToken != held[0].FencingToken ||
		!got[0].ExpiresAt.Equal(t0.Add(halfWay+lease)) {
		t.Fatalf("leases after the failed-over Renew %+v, held %+v", got, held)
	}
	if got := s.TimeLeft(); got != lease {
		t.Fatalf("TimeLeft %v, want %v", got, lease)
	}
	if rs := replicaStats(t, s); !rs[0].Current || rs[1].Current || rs[1].Failures != 1 {
		t.Fatalf("stats after a 503 on B: %+v", rs)
	}
	if _, err := s.NextID(); err != nil {
		t.Fatal(err)
	}
	e.expectNoFatal()
}

// A 4xx answer is the registry's verdict: it is never taken to another replica.
// 401, 400 and 409 REQUESTER_COUNT_MISMATCH end Open on the first replica; 409
// CLOCK_SKEW_TOO_LARGE is retried after the back-off, on the same replica. A
// refused Renew stays on its replica too.
func TestNoFailoverOn4xx(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	a, aURL, _ := e.replica()
	b, bURL, _ := e.replica()
	for _, c := range []struct {
		status int
		code   string
	}{
		{http.StatusUnauthorized, "API_KEY_INVALID"},
		{http.StatusBadRequest, "INVALID_REQUEST"},
		{http.StatusConflict, "REQUESTER_COUNT_MISMATCH"},
		{http.StatusForbidden, "IP_NOT_ALLOWED"},
	} {
		a.set(allocPath, status(c.status, c.code))
		s, err := client.New(e.replicasConfig(aURL, bURL))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		err = s.Open(ctx)
		cancel()
		var se *client.ServerError
		if !errors.As(err, &se) || se.Status != c.status || string(se.Code) != c.code || se.Server != aURL {
			t.Fatalf("%d %s on A: Open returned %v, want that answer from %s", c.status, c.code, err, aURL)
		}
		if n := b.count(allocPath); n != 0 {
			t.Fatalf("%d %s on A: %d Allocs went to B", c.status, c.code, n)
		}
		if st := s.Stats(); st.Failovers != 0 || st.Replicas[0].Failures != 0 {
			t.Fatalf("%d %s counted as a failure: %+v", c.status, c.code, st.Replicas)
		}
	}

	a.set(allocPath, status(http.StatusConflict, "CLOCK_SKEW_TOO_LARGE"))
	s, err := client.New(e.replicasConfig(aURL, bURL))
	if err != nil {
		t.Fatal(err)
	}
	done := openAsync(s)
	for attempt := 1; attempt <= 3; attempt++ {
		if !e.clk.WaitPending(1, wait) {
			t.Fatalf("attempt %d: no back-off timer", attempt)
		}
		if n, m := a.count(allocPath)-4, b.count(allocPath); n != attempt || m != 0 {
			t.Fatalf("attempt %d: %d skew refusals on A, %d Allocs on B; want %d and 0", attempt, n, m, attempt)
		}
		if attempt == 3 {
			a.set(allocPath, nil)
		}
		e.clk.Advance(e.pending()[0])
	}
	if err := <-done; err != nil {
		t.Fatalf("Open after the skew cleared: %v", err)
	}
	defer s.Close()

	a.set(renewPath, status(http.StatusUnauthorized, "API_KEY_INVALID"))
	before := a.count(renewPath)
	e.clk.Advance(halfWay)
	if a.count(renewPath) != before+1 || b.count(renewPath) != 0 {
		t.Fatalf("a refused Renew: %d more to A, %d to B; want 1 and 0", a.count(renewPath)-before, b.count(renewPath))
	}
	if !strings.Contains(e.logs.String(), "renew refused; retrying until the lease ends") {
		t.Fatalf("no refusal in the log:\n%s", e.logs)
	}
}

// An Alloc that the first replica granted but whose answer was lost (the
// connection reset after the registry handled it) is sent again to the next
// replica with the same requester: the registry answers the same lease, and the
// store holds one lease, not two.
func TestFailoverAllocDoesNotLeakALease(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	a, aURL, _ := e.replica()
	_, bURL, _ := e.replica()
	a.set(allocPath, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		next.ServeHTTP(httptest.NewRecorder(), r) // granted, the answer lost
		drop(w, r, next)
	})
	cfg := e.replicasConfig(aURL, bURL)
	cfg.Count = 2
	s := e.open(cfg)
	ls := e.storeLeases()
	if len(ls) != 2 {
		t.Fatalf("the store holds %d leases, want the session's 2: %+v", len(ls), ls)
	}
	held := map[int64]bool{}
	for _, l := range s.Leases() {
		held[l.NodeID] = true
	}
	for _, l := range ls {
		if !held[int64(l.NodeID)] || l.Requester.Key() != s.Requester().Key() {
			t.Fatalf("store lease %+v is not the session's (%v, %+v)", l, held, s.Requester())
		}
	}
	reqs := e.proxy.requests(allocPath)
	if len(reqs) != 2 || reqs[0]["requester"].(map[string]any)["instance"] != reqs[1]["requester"].(map[string]any)["instance"] {
		t.Fatalf("the registry got %d Allocs, want 2 with one requester instance: %v", len(reqs), reqs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ls := e.storeLeases(); len(ls) != 0 {
		t.Fatalf("after Close the store holds %+v", ls)
	}
}

// The lease deadline counts from the first send of the call: a Renew that spent a
// minute on a replica that then failed, and was answered by the next, holds the
// lease the registry granted minus that minute, never more.
func TestFailoverDeadlineFromTheFirstSend(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	a, aURL, _ := e.replica()
	b, bURL, _ := e.replica()
	s := e.open(e.replicasConfig(aURL, bURL))
	if b.count(renewPath) != 0 {
		t.Fatal("Open's Renew went to B")
	}
	a.set(renewPath, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		e.clk.Jump(time.Minute) // the attempt takes a minute of the session's time
		drop(w, r, next)
	})
	e.clk.Advance(halfWay)
	if b.count(renewPath) != 1 {
		t.Fatalf("%d Renews to B, want 1", b.count(renewPath))
	}
	if got, want := s.TimeLeft(), lease-time.Minute; got != want {
		t.Fatalf("TimeLeft %v after a Renew that failed over after 1 min, want %v (the grant, from the first send)", got, want)
	}
	// Close's Remove fails over too: the store is empty afterwards.
	b.set(removePath, status(http.StatusBadGateway, "BAD_GATEWAY"))
	a.set(renewPath, nil)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if a.count(removePath) != 1 || len(e.storeLeases()) != 0 {
		t.Fatalf("Remove: %d to A, store %+v", a.count(removePath), e.storeLeases())
	}
}

// Every replica down: one Alloc attempt tries each replica once, then Open waits
// out the back-off and tries them all again; a replica that comes back is used.
func TestAllReplicasDownBacksOff(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	_, deadURL, closeDead := e.replica()
	closeDead() // connection refused
	b, bURL, _ := e.replica()
	b.set(allocPath, status(http.StatusServiceUnavailable, "STORE_NOT_INITIALISED"))
	s, err := client.New(e.replicasConfig(deadURL, bURL))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := openAsync(s)
	for attempt := 1; attempt <= 2; attempt++ {
		if !e.clk.WaitPending(1, wait) {
			t.Fatalf("attempt %d: no back-off timer", attempt)
		}
		if n := b.count(allocPath); n != attempt {
			t.Fatalf("attempt %d: %d Allocs to B, want one per attempt", attempt, n)
		}
		rs := replicaStats(t, s)
		if rs[0].Requests != uint64(attempt) || rs[0].Failures != uint64(attempt) || rs[1].Failures != uint64(attempt) {
			t.Fatalf("attempt %d: stats %+v", attempt, rs)
		}
		if attempt == 2 {
			b.set(allocPath, nil)
		}
		e.clk.Advance(e.pending()[0])
	}
	if err := <-done; err != nil {
		t.Fatalf("Open: %v", err)
	}
	if !strings.Contains(e.logs.String(), "all 2 registry replicas failed") {
		t.Fatalf("the retry log does not say every replica failed:\n%s", e.logs)
	}
}

// ServerURL and ServerURLs: one of them, not both; 1..16 distinct http(s) URLs.
func TestServerURLsConfig(t *testing.T) {
	many := make([]string, client.MaxServerURLs+1)
	for i := range many {
		many[i] = "http://r" + string(rune('a'+i)) + ":8080"
	}
	for _, c := range []struct {
		cfg  client.Config
		want string
	}{
		{client.Config{APIKey: "k"}, "Config.ServerURL or Config.ServerURLs is required"},
		{client.Config{APIKey: "k", ServerURL: "http://a", ServerURLs: []string{"http://b"}}, "not both"},
		{client.Config{APIKey: "k", ServerURLs: []string{"http://a", "ftp://b"}}, `Config.ServerURLs "ftp://b" is not an http(s) URL`},
		{client.Config{APIKey: "k", ServerURLs: []string{"http://a/", "http://a"}}, `names "http://a" twice`},
		{client.Config{APIKey: "k", ServerURLs: many}, "names 17 URLs, at most 16"},
		{client.Config{APIKey: "k", ServerURL: "idkeeper:8080"}, `Config.ServerURL "idkeeper:8080" is not an http(s) URL`},
	} {
		if _, err := client.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	s, err := client.New(client.Config{APIKey: "k", ServerURLs: many[:client.MaxServerURLs]})
	if err != nil {
		t.Fatal(err)
	}
	if rs := s.Stats().Replicas; len(rs) != client.MaxServerURLs || rs[0].URL != many[0] || !rs[0].Current {
		t.Fatalf("replicas %+v", rs)
	}
}
