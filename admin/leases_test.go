package admin_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The pool map and the lease list: statuses per node ID, the requester, key,
// token and window of each lease, the skew the registry stored for its requester
// (never recomputed: the clock moving on changes the status, not the skew), and
// the filters.
func TestPoolAndLeases(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.user("vera", account.RoleViewer)
		tok := e.login("vera", userPW)
		plainID, _ := idkeeper.HashAPIKey(plainKey)
		behind := ts(start.Add(-6 * time.Minute)) // more than grace/2: a warning
		e.do("POST", "/v1/leases", `{"requester":`+requesterJSON("1")+`,"count":2,"clientUtcNow":"`+behind+`"}`, "X-API-Key", plainKey).ok(t)
		e.do("POST", "/v1/leases", `{"requester":`+requesterJSON("2")+`,"count":1}`, "X-API-Key", adminKey).ok(t)

		var pool wire.Pool
		e.do("GET", "/admin/api/pool", "", "Cookie", tok).ok(t).decode(t, &pool)
		if pool.Total != 128 || pool.Leased != 3 || pool.Remaining != 125 || len(pool.Nodes) != 128 || pool.At != ts(start) ||
			pool.First != 0 || pool.Last != 127 {
			t.Fatalf("pool %+v", pool.RemainingResponse)
		}
		var list wire.LeaseList
		e.do("GET", "/admin/api/leases", "", "Cookie", tok).ok(t).decode(t, &list)
		if len(list.Leases) != 3 {
			t.Fatalf("leases %+v", list)
		}
		for _, l := range list.Leases {
			if pool.Nodes[l.NodeID] != "leased" || l.Status != "leased" {
				t.Fatalf("node %d: map %q, list %q", l.NodeID, pool.Nodes[l.NodeID], l.Status)
			}
		}
		l := list.Leases[0]
		if l.Requester.MachineID != "host-a" || l.Requester.PID != 1 || l.Requester.Instance != "inst-1" ||
			l.Requester.StartedAt != "2026-03-01T09:00:00.000Z" || l.KeyID != plainID || l.FencingToken == 0 ||
			l.ExpiresAt != ts(start.Add(10*time.Minute)) || l.GrantedAt != ts(start) || l.RenewedAt != nil {
			t.Fatalf("lease %+v", l)
		}
		if l.Skew == nil || l.Skew.SkewMs != 6*60*1000 || l.Skew.Level != "warn" || l.Skew.ObservedAt != ts(start) {
			t.Fatalf("skew %+v", l.Skew)
		}
		if last := list.Leases[2]; last.Skew != nil || last.Requester.PID != 2 {
			t.Fatalf("a requester that sent no clock has a skew: %+v", last)
		}

		count := func(q string) int {
			t.Helper()
			var ls wire.LeaseList
			e.do("GET", "/admin/api/leases"+q, "", "Cookie", tok).ok(t).decode(t, &ls)
			return len(ls.Leases)
		}
		for q, want := range map[string]int{"?key=" + plainID: 2, "?key=nobody": 0, "?requester=host": 3,
			"?requester=inst-2": 1, "?status=leased": 3, "?status=grace": 0, "?requester=host-a&key=" + plainID + "&status=leased": 2} {
			if got := count(q); got != want {
				t.Errorf("%s: %d leases, want %d", q, got, want)
			}
		}
		e.do("GET", "/admin/api/leases?status=free", "", "Cookie", tok).problem(t, protocol.CodeInvalidRequest)
		e.do("GET", "/admin/api/leases?sort=node", "", "Cookie", tok).problem(t, protocol.CodeInvalidRequest)
		e.do("GET", "/admin/api/leases?key=a&key=b", "", "Cookie", tok).problem(t, protocol.CodeInvalidRequest)

		// Past the first lease: in grace, the skew as stored.
		e.clk.Advance(11 * time.Minute)
		e.do("POST", "/v1/leases/renew", `{"requester":`+requesterJSON("2")+`}`, "X-API-Key", adminKey).ok(t)
		e.do("GET", "/admin/api/leases?status=grace", "", "Cookie", tok).ok(t).decode(t, &list)
		if len(list.Leases) != 2 || list.Leases[0].Skew == nil || list.Leases[0].Skew.Level != "warn" {
			t.Fatalf("in grace: %+v", list)
		}
		e.do("GET", "/admin/api/pool", "", "Cookie", tok).ok(t).decode(t, &pool)
		if pool.InGrace != 2 || pool.Nodes[list.Leases[0].NodeID] != "grace" {
			t.Fatalf("pool %+v", pool.RemainingResponse)
		}
		// Released without mintedUpTo: the node ID cools until its watermark.
		e.do("GET", "/admin/api/leases?requester=inst-2", "", "Cookie", tok).ok(t).decode(t, &list)
		cooling := list.Leases[0].NodeID
		e.do("POST", "/v1/leases/remove", `{"requester":`+requesterJSON("2")+`}`, "X-API-Key", adminKey).ok(t)
		e.do("GET", "/admin/api/pool", "", "Cookie", tok).ok(t).decode(t, &pool)
		if pool.Cooling != 1 || pool.Nodes[cooling] != "cooling" || pool.Nodes[list.Leases[0].NodeID+1] == "cooling" {
			t.Fatalf("pool %+v: node %d is %q", pool.RemainingResponse, cooling, pool.Nodes[cooling])
		}
	})
}

// Revoking a live lease end to end: an operator revokes it by node ID and
// fencing token; the node ID is quarantined until the lease's expiry + grace (the
// map shows it), the holder's next Renew lacks it, the revocation is audited with
// the operator as actor, and the node ID returns to the pool afterwards.
func TestRevokeLease(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.user("olga", account.RoleOperator)
		tok := e.login("olga", userPW)
		who := `{"requester":` + requesterJSON("7") + `}`
		r := e.do("POST", "/v1/leases", `{"requester":`+requesterJSON("7")+`,"count":1}`, "X-API-Key", plainKey).ok(t)
		var alloc wire.AllocResponse
		r.decode(t, &alloc)
		node, token := *alloc.Leases[0].NodeID, *alloc.Leases[0].FencingToken
		e.do("POST", "/v1/leases/renew", who, "X-API-Key", plainKey).ok(t) // a full lease now
		path := fmt.Sprintf("/admin/api/leases/%d/revoke", node)

		e.do("POST", path, fmt.Sprintf(`{"fencingToken":%d}`, token+1), "Cookie", tok).problem(t, protocol.CodeNotFound)
		e.do("POST", path, `{}`, "Cookie", tok).problem(t, protocol.CodeInvalidRequest)
		e.do("POST", "/admin/api/leases/x/revoke", `{"fencingToken":1}`, "Cookie", tok).problem(t, protocol.CodeInvalidRequest)

		var rev wire.RevokeLeaseResponse
		e.do("POST", path, fmt.Sprintf(`{"fencingToken":%d}`, token), "Cookie", tok).ok(t).decode(t, &rev)
		grace := e.reg.Config().Grace
		expires := start.Add(e.reg.Config().LeaseDuration)
		if rev.Lease.NodeID != node || rev.Lease.FencingToken != token || rev.Lease.ExpiresAt != ts(expires) ||
			rev.QuarantinedUntil != ts(expires.Add(grace)) {
			t.Fatalf("revoke: %+v", rev)
		}
		var pool wire.Pool
		e.do("GET", "/admin/api/pool", "", "Cookie", tok).ok(t).decode(t, &pool)
		if pool.Quarantined != 1 || pool.Nodes[node] != "quarantined" || pool.Leased != 0 {
			t.Fatalf("pool after the revocation: %+v %q", pool.RemainingResponse, pool.Nodes[node])
		}
		var renew wire.RenewResponse
		e.do("POST", "/v1/leases/renew", who, "X-API-Key", plainKey).ok(t).decode(t, &renew)
		if len(renew.Leases) != 0 {
			t.Fatalf("the holder still renews: %+v", renew)
		}
		e.do("POST", path, fmt.Sprintf(`{"fencingToken":%d}`, token), "Cookie", tok).problem(t, protocol.CodeNotFound)

		x := e.waitAudit(audit.LeaseRevoke, "node:"+strconv.FormatInt(node, 10))
		if x.Actor != "user:olga" || x.RemoteIP != "127.0.0.1" {
			t.Fatalf("audited as %+v", x)
		}
		n := 0
		es, _ := e.store.AuditEntriesBefore(context.Background(), 0, 1000)
		for _, y := range es {
			if y.Action == audit.LeaseRevoke {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("the revocation is audited %d times", n)
		}

		e.clk.Advance(e.reg.Config().LeaseDuration + grace + time.Second) // the session is over too
		e.do("GET", "/admin/api/pool", "", "X-API-Key", adminKey).ok(t).decode(t, &pool)
		if pool.Quarantined != 0 || pool.Nodes[node] == "quarantined" {
			t.Fatalf("still quarantined: %+v %q", pool.RemainingResponse, pool.Nodes[node])
		}
	})
}

// The audit log pages newest first with next, filters by action (or a family of
// actions) and actor, and refuses a bad query.
func TestAuditPages(t *testing.T) {
	e := newEnv(t, loopback)
	e.user("alice", account.RoleOperator)
	tok := e.login("alice", userPW)
	for i := range 12 {
		e.do("POST", "/admin/api/allowlist", fmt.Sprintf(`{"prefix":"198.51.100.%d","note":"n%d"}`, i, i), "Cookie", tok).status1(t, 201)
	}
	e.do("POST", "/admin/api/keys", `{"description":"k"}`, "X-API-Key", adminKey).status1(t, 201)
	all := e.auditAll("Cookie", tok)
	for i := 1; i < len(all); i++ {
		if all[i].Seq >= all[i-1].Seq {
			t.Fatalf("not newest first: %+v", all)
		}
	}
	var seen []uint64
	q := "/admin/api/audit?limit=5"
	for pages := 0; ; pages++ {
		var p wire.AuditPage
		e.do("GET", q, "", "Cookie", tok).ok(t).decode(t, &p)
		for _, x := range p.Entries {
			seen = append(seen, x.Seq)
		}
		if p.Next == nil {
			break
		}
		if pages > 20 {
			t.Fatal("no end")
		}
		q = fmt.Sprintf("/admin/api/audit?limit=5&before=%d", *p.Next)
	}
	if len(seen) != len(all) {
		t.Fatalf("paged %d entries, the log has %d", len(seen), len(all))
	}
	for i := range seen {
		if seen[i] != all[i].Seq {
			t.Fatalf("pages %v, log %+v", seen, all)
		}
	}

	var p wire.AuditPage
	e.do("GET", "/admin/api/audit?action=allowlist.add&actor=user:alice&limit=5", "", "Cookie", tok).ok(t).decode(t, &p)
	if len(p.Entries) != 5 || p.Next == nil || p.Entries[0].Target != "ip:198.51.100.11/32" {
		t.Fatalf("filtered: %+v", p)
	}
	e.do("GET", fmt.Sprintf("/admin/api/audit?action=allowlist&before=%d", *p.Next), "", "Cookie", tok).ok(t).decode(t, &p)
	if len(p.Entries) != 7 || p.Next != nil {
		t.Fatalf("the rest: %+v", p)
	}
	e.do("GET", "/admin/api/audit?action=apikey.create", "", "Cookie", tok).ok(t).decode(t, &p)
	if len(p.Entries) != 1 || p.Entries[0].Actor[:4] != "key:" {
		t.Fatalf("key create: %+v", p)
	}
	e.do("GET", "/admin/api/audit?actor=nobody", "", "Cookie", tok).ok(t).decode(t, &p)
	if len(p.Entries) != 0 || p.Next != nil {
		t.Fatalf("%+v", p)
	}
	for _, bad := range []string{"limit=0", "limit=1001", "limit=x", "before=0", "before=-1", "page=2"} {
		e.do("GET", "/admin/api/audit?"+bad, "", "Cookie", tok).problem(t, protocol.CodeInvalidRequest)
	}
}

// The store's health: phase, the generation served under, no reset yet, the
// store's counter, pool size and clock, and the durability the server was given.
func TestStoreHealth(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		var s wire.StoreHealth
		e.do("GET", "/admin/api/store", "", "X-API-Key", adminKey).ok(t).decode(t, &s)
		if s.Phase != "ready" || s.Generation == nil || s.Generation.Number != 1 || s.Generation.Origin != "fresh" ||
			s.LastReset != nil || !s.Reachable || s.Nodes != 128 || s.StoreTime == nil || *s.StoreTime != ts(start) ||
			!s.ClockOK || s.Durability != "fsync on every write" || s.ClockCheck != "verified by the clock agent 127.0.0.1:1" {
			t.Fatalf("%+v", s)
		}
	})
}
