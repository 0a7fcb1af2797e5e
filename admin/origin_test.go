package admin_test

import (
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// GET /admin/api/ids/{id}/origin: an ID minted in a lease's window maps back to
// that lease, with what the client reported; after the lease is removed it
// still does, ended; an ID of a millisecond nobody held says so; bad IDs are
// refused; a caller without a role gets nothing.
func TestIDOrigin(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		e.user("vera", account.RoleViewer)
		tok := e.login("vera", userPW)
		var grant wire.AllocResponse
		e.do("POST", "/v1/leases", `{"requester":`+requesterJSON("1")+`,"count":1,`+
			`"client":{"host":"web-7.example","labels":{"service":"orders","version":"1.4.2"}}}`, "X-API-Key", plainKey).ok(t).decode(t, &grant)
		l := grant.Leases[0]
		node, token := *l.NodeID, *l.FencingToken
		layout := e.reg.Layout()
		mintAt := start.Add(2 * time.Minute)
		ts0, err := layout.Timestamp(mintAt)
		if err != nil {
			t.Fatal(err)
		}
		id, err := layout.Compose(ts0, node, 17)
		if err != nil {
			t.Fatal(err)
		}
		origin := func(path string) wire.IDOrigin {
			t.Helper()
			var o wire.IDOrigin
			e.do("GET", "/admin/api/ids/"+path+"/origin", "", "Cookie", tok).ok(t).decode(t, &o)
			return o
		}
		o := origin(strconv.FormatInt(id, 10))
		if o.ID != strconv.FormatInt(id, 10) || o.Decoded.NodeID != node || o.Decoded.Sequence != 17 ||
			o.Decoded.Time != ts(mintAt) || len(o.Leases) != 1 || o.Note != "" {
			t.Fatalf("origin %+v", o)
		}
		got := o.Leases[0]
		if got.FencingToken != token || got.Requester.PID != 1 || got.Requester.Instance != "inst-1" ||
			got.Client == nil || got.Client.Host != "web-7.example" || got.Client.Labels["service"] != "orders" ||
			got.End != "" || got.EndedAt != "" || got.NotBefore != l.NotBefore || got.WindowEnd != l.ExpiresAt {
			t.Fatalf("origin lease %+v", got)
		}
		// The JSON string form, quotes and all, answers the same.
		if q := origin(url.PathEscape(`"` + strconv.FormatInt(id, 10) + `"`)); len(q.Leases) != 1 || q.ID != o.ID {
			t.Fatalf("string form: %+v", q)
		}

		e.clk.Advance(5 * time.Minute)
		e.do("POST", "/v1/leases/remove", `{"requester":`+requesterJSON("1")+`,"mintedUpTo":"`+ts(mintAt)+`"}`, "X-API-Key", plainKey).ok(t)
		o = origin(strconv.FormatInt(id, 10))
		if len(o.Leases) != 1 || o.Leases[0].End != "removed" || o.Leases[0].EndedAt != ts(start.Add(5*time.Minute)) ||
			o.Leases[0].MintedUpTo != ts(mintAt) || o.Leases[0].WindowEnd != ts(mintAt) {
			t.Fatalf("after Remove: %+v", o)
		}
		// A millisecond after what the holder attested: nobody's.
		later, _ := layout.Compose(ts0+1, node, 0)
		if o := origin(strconv.FormatInt(later, 10)); len(o.Leases) != 0 || o.Note == "" {
			t.Fatalf("after mintedUpTo: %+v", o)
		}
		// A node ID outside the pool (128 node IDs here).
		outside, _ := layout.Compose(ts0, 1000, 0)
		if o := origin(strconv.FormatInt(outside, 10)); len(o.Leases) != 0 || o.Decoded.NodeID != 1000 || o.Note == "" {
			t.Fatalf("outside the pool: %+v", o)
		}
		for _, bad := range []string{"-1", "abc", "9223372036854775808", "1.5", url.PathEscape(`"12`)} {
			e.do("GET", "/admin/api/ids/"+bad+"/origin", "", "Cookie", tok).problem(t, protocol.CodeInvalidRequest)
		}
		e.do("GET", "/admin/api/ids/1/origin", "").status1(t, 401)
		e.do("GET", "/admin/api/ids/1/origin", "", "X-API-Key", plainKey).status1(t, 403)
	})
}
