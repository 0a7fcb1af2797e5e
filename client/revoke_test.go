package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
)

// An operator's revocation of one of the session's leases (Registry.RevokeLease)
// reaches the session at its next Renew, whose answer lacks that node ID: fewer
// node IDs than generators is a lost session (checkRenewed), so issuing stops on
// every generator and OnFatal gets ErrLeaseLost. The receipt of the revoked lease,
// which the session still sends, restores nothing.
func TestRevokedLeaseEndsTheSession(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	cfg := e.config()
	cfg.Count = 2
	s := e.open(cfg)
	held := s.Leases()
	if len(held) != 2 {
		t.Fatalf("session holds %d leases, want 2", len(held))
	}
	revoked, err := e.reg.RevokeLease(context.Background(), idkeeper.NodeID(held[0].NodeID), held[0].FencingToken)
	if err != nil {
		t.Fatalf("RevokeLease: %v", err)
	}
	if int64(revoked.NodeID) != held[0].NodeID || revoked.FencingToken != held[0].FencingToken {
		t.Fatalf("RevokeLease returned node %d token %d, want %d %d", revoked.NodeID, revoked.FencingToken,
			held[0].NodeID, held[0].FencingToken)
	}
	e.expectNoFatal() // nothing tells the session before its next Renew
	e.clk.Advance(halfWay)
	err = e.expectFatal()
	if !errors.Is(err, client.ErrLeaseLost) || !strings.Contains(err.Error(), "node IDs") {
		t.Fatalf("fatal %v, want ErrLeaseLost about node IDs", err)
	}
	for i := range 2 {
		if _, err := s.Generator(i).NextID(); !errors.Is(err, client.ErrLeaseLost) {
			t.Fatalf("NextID of generator %d after the revocation: %v", i, err)
		}
	}
	// The session's last Renew carried both receipts; the revoked node stays free.
	if reqs := e.proxy.requests(renewPath); len(reqs) == 0 {
		t.Fatal("no Renew was sent")
	} else if rs, _ := reqs[len(reqs)-1]["receipts"].([]any); len(rs) != 2 {
		t.Fatalf("the last Renew carried receipts %v, want both", reqs[len(reqs)-1]["receipts"])
	}
	st, err := e.store.Node(context.Background(), revoked.NodeID)
	if err != nil || st.Lease != nil {
		t.Fatalf("revoked node after the Renew: %+v, %v; want free", st, err)
	}
}
