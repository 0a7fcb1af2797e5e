package admin_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// An entry added through the admin API applies to /v1 at once, through the http
// server's Options.AllowList; so does its removal. The last entry of a list with
// an empty floor goes only with "allowAll": true. Both changes are audited.
func TestAllowListAppliesAtOnce(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.user("alice", account.RoleOperator)
		tok := e.login("alice", userPW)
		v1 := func() response { return e.do("GET", "/v1/leases/remaining", "", "X-API-Key", plainKey) }
		v1().ok(t) // an empty list allows every address

		r := e.do("POST", "/admin/api/allowlist", `{"prefix":"192.0.2.77/24","note":"  office  "}`, "Cookie", tok).status1(t, 201)
		var added wire.AllowEntry
		r.decode(t, &added)
		if added.Prefix != "192.0.2.0/24" || added.Note != "office" || added.CreatedBy != "user:alice" || added.CreatedAt != ts(start) {
			t.Fatalf("added %s", r.raw)
		}
		v1().problem(t, protocol.CodeIPNotAllowed)
		e.do("GET", "/admin/api/keys", "", "X-API-Key", adminKey).problem(t, protocol.CodeIPNotAllowed)
		e.do("GET", "/admin/api/keys", "", "Cookie", tok).ok(t) // a session is no key

		e.do("POST", "/admin/api/allowlist", `{"prefix":"127.0.0.1","note":"the tests"}`, "Cookie", tok).status1(t, 201)
		v1().ok(t)
		var list wire.AllowList
		e.do("GET", "/admin/api/allowlist", "", "Cookie", tok).ok(t).decode(t, &list)
		if len(list.Floor) != 0 || len(list.TrustedProxies) != 0 || len(list.Entries) != 2 ||
			list.Entries[0].Prefix != "127.0.0.1/32" || list.Entries[1].Prefix != "192.0.2.0/24" {
			t.Fatalf("%+v", list)
		}
		for _, c := range []struct{ body, field string }{
			{`{"prefix":"","note":"x"}`, "prefix"},
			{`{"prefix":"10.0.0.0/33","note":"x"}`, "prefix"},
			{`{"prefix":"host.example","note":"x"}`, "prefix"},
			{`{"prefix":"10.0.0.0/8"}`, "note"},
			{`{"prefix":"10.0.0.0/8","note":"a\nb"}`, "note"},
			{`{"prefix":"10.0.0.0/8","note":"x","by":"me"}`, "by"},
		} {
			if r := e.do("POST", "/admin/api/allowlist", c.body, "Cookie", tok).problem(t, protocol.CodeInvalidRequest); r.str("field") != c.field {
				t.Errorf("%s: field %q, want %q", c.body, r.str("field"), c.field)
			}
		}
		e.do("POST", "/admin/api/allowlist", `{"prefix":"192.0.2.1/24","note":"again"}`, "Cookie", tok).problem(t, protocol.CodeConflict)

		e.do("POST", "/admin/api/allowlist/remove", `{"prefix":"127.0.0.1/32"}`, "Cookie", tok).status1(t, 204)
		v1().problem(t, protocol.CodeIPNotAllowed)
		e.do("POST", "/admin/api/allowlist/remove", `{"prefix":"127.0.0.1"}`, "Cookie", tok).problem(t, protocol.CodeNotFound)
		e.do("POST", "/admin/api/allowlist/remove", `{"prefix":"192.0.2.0/24"}`, "Cookie", tok).problem(t, protocol.CodeConflict)
		v1().problem(t, protocol.CodeIPNotAllowed)
		e.do("POST", "/admin/api/allowlist/remove", `{"prefix":"192.0.2.0/24","allowAll":true}`, "Cookie", tok).status1(t, 204)
		v1().ok(t)

		var adds, removes int
		for _, x := range e.auditAll("Cookie", tok) {
			switch {
			case x.Actor != "user:alice" || x.RemoteIP != "127.0.0.1":
			case x.Action == audit.AllowAdd && (x.Target == "ip:192.0.2.0/24" && x.Detail == "office" || x.Target == "ip:127.0.0.1/32"):
				adds++
			case x.Action == audit.AllowRemove:
				removes++
			}
		}
		if adds != 2 || removes != 2 {
			t.Fatalf("audited %d adds, %d removes", adds, removes)
		}
	})
}

// The floor (--allowed-ips) is configuration: shown, never removed (409); the
// trusted proxies are shown.
func TestAllowListFloor(t *testing.T) {
	e := newEnv(t, func(s *setup) {
		s.floor = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")}
		s.trusted = []netip.Prefix{netip.MustParsePrefix("192.0.2.10/32")}
	})
	var list wire.AllowList
	e.do("GET", "/admin/api/allowlist", "", "X-API-Key", adminKey).ok(t).decode(t, &list)
	if len(list.Floor) != 2 || list.Floor[0] != "10.0.0.0/8" || len(list.TrustedProxies) != 1 ||
		list.TrustedProxies[0] != "192.0.2.10/32" || list.Entries == nil || len(list.Entries) != 0 {
		t.Fatalf("%+v", list)
	}
	r := e.do("POST", "/admin/api/allowlist/remove", `{"prefix":"10.0.0.0/8"}`, "X-API-Key", adminKey).problem(t, protocol.CodeConflict)
	if r.str("detail") == "" {
		t.Fatal("no reason")
	}
	// With a floor, the last stored entry goes without allowAll.
	e.do("POST", "/admin/api/allowlist", `{"prefix":"198.51.100.0/24","note":"partner"}`, "X-API-Key", adminKey).status1(t, 201)
	e.do("POST", "/admin/api/allowlist/remove", `{"prefix":"198.51.100.0/24"}`, "X-API-Key", adminKey).status1(t, 204)
	if es, _ := e.store.AllowEntries(context.Background()); len(es) != 0 {
		t.Fatalf("%+v", es)
	}
}

// A key caller's address is the TCP peer: an X-Forwarded-For from a peer that is
// no trusted proxy does not get it past the allow-list, on /v1 or here. From a
// trusted proxy the forwarded address is judged.
func TestAllowListIgnoresSpoofedForwardedFor(t *testing.T) {
	floor := func(s *setup) { s.floor = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")} }
	e := newEnv(t, floor)
	e.do("GET", "/admin/api/keys", "", "X-API-Key", adminKey, "X-Forwarded-For", "192.0.2.5").problem(t, protocol.CodeIPNotAllowed)
	e.do("GET", "/v1/leases/remaining", "", "X-API-Key", plainKey, "X-Forwarded-For", "192.0.2.5").problem(t, protocol.CodeIPNotAllowed)

	p := newEnv(t, floor, func(s *setup) { s.trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} })
	p.do("GET", "/admin/api/keys", "", "X-API-Key", adminKey, "X-Forwarded-For", "192.0.2.5").ok(t)
	p.do("GET", "/admin/api/keys", "", "X-API-Key", adminKey, "X-Forwarded-For", "198.51.100.5").problem(t, protocol.CodeIPNotAllowed)
	p.do("GET", "/admin/api/keys", "", "X-API-Key", adminKey).problem(t, protocol.CodeIPNotAllowed)
}
