package gateway_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
)

// A gateway whose session holds a cooling node ID is red on /health, and the
// problem's detail says until when it waits (issue #20).
func TestHealthSaysWhenACoolingNodeIDOpens(t *testing.T) {
	srv := registrytest.Start(t, registrytest.Options{
		Config: idkeeper.Config{Nodes: 1, CleanupInterval: time.Hour}, Logger: quiet,
		APIKey: registryKey, KeyName: "gateway tests",
	})
	r := &registry{url: srv.URL, hc: srv.Client, reg: srv.Registry}
	crashed := r.open(t, 1) // renewed to the full 48 h lease
	keyID, _ := idkeeper.HashAPIKey(registryKey)
	// It crashes: nobody sends mintedUpTo; an operator (or a reclaim) frees the node ID.
	if _, err := r.reg.Remove(context.Background(), idkeeper.RemoveRequest{Requester: crashed.Requester(), KeyID: keyID}); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, r.open(t, 1), gateway.Options{})
	p := g.get("/health").problem(t, http.StatusServiceUnavailable, gateway.CodeIssuingUnavailable)
	detail, _ := p["detail"].(string)
	if !strings.Contains(detail, "node ID 0 is cooling: the generator waits until ") || !regexp.MustCompile(`\(in 4[78]h\d+m\d+s\) to mint`).MatchString(detail) {
		t.Fatalf("/health detail %q does not say until when the node ID cools", detail)
	}
}
