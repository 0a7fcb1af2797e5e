package client_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/client/clienttest"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
	"github.com/idkeeper/idkeeper/redis"
)

// Two real registry servers on one real store (a private redis-server): a session
// given both leases through the first; when that replica is gone (its listener
// closed: connections refused) a Renew and the final Remove go to the second,
// and a new session starts there. The store sees one lease per session throughout.
func TestFailoverBetweenTwoRegistriesOnOneRedis(t *testing.T) {
	rs := redistest.Start(t)
	clk := clienttest.NewClock(t0)
	now := func() time.Time { return t0.Add(clk.Mono()) }
	quiet := slog.New(slog.DiscardHandler)
	start := func(noInit bool) *registrytest.Server {
		st, err := redis.Open(rs.URL(), redis.Options{Clock: now, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return registrytest.Start(t, registrytest.Options{Config: idkeeper.Config{CleanupInterval: time.Hour}, Clock: now,
			APIKey: testKey, Store: st, NoInit: noInit})
	}
	a, b := start(false), start(true) // b serves the store a initialised
	fatal := make(chan error, 4)
	cfg := func() client.Config {
		return client.Config{ServerURLs: []string{a.URL, b.URL}, APIKey: testKey, Clock: clk, Requester: requester(),
			Logger: quiet, OnFatal: func(err error) { fatal <- err }}
	}
	open := func() *client.Session {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		s, err := client.Start(ctx, cfg())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	if rs := s.Stats().Replicas; rs[0].Requests != 2 || rs[1].Requests != 0 {
		t.Fatalf("Open: %+v, want Alloc and Renew on the first replica", rs)
	}
	held := s.Leases()[0]

	a.HTTP.Close()
	clk.Advance(halfWay)
	st := s.Stats()
	if st.Failovers != 1 || !st.Replicas[1].Current || st.TimeLeft != lease {
		t.Fatalf("Renew with the first replica gone: %+v, failovers %d, time left %v", st.Replicas, st.Failovers, st.TimeLeft)
	}
	if got := s.Leases()[0]; got.NodeID != held.NodeID || got.FencingToken != held.FencingToken {
		t.Fatalf("renewed lease %+v, held %+v", got, held)
	}

	s2 := open()
	ls, err := b.Store.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || s2.Leases()[0].NodeID == held.NodeID {
		t.Fatalf("store leases %+v after a second session on the second replica", ls)
	}
	for _, x := range []*client.Session{s, s2} {
		if err := x.Close(); err != nil {
			t.Fatalf("Close with the first replica gone: %v", err)
		}
	}
	if ls, _ := b.Store.Leases(context.Background()); len(ls) != 0 {
		t.Fatalf("after both Closes the store holds %+v", ls)
	}
	select {
	case err := <-fatal:
		t.Fatalf("OnFatal: %v", err)
	default:
	}
}
