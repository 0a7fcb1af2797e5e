package gateway_test

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/idkeeper/idkeeper/client/clientmetrics"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/prometheus/client_golang/prometheus"
)

// demandSource is a source holding one node ID of its own and, on demand, more
// (NumNodeIDs above NumGenerators, as a client.Session with MaxCount): it records
// the generator each chunk went to.
type demandSource struct {
	fixedSource
	held int
	mu   sync.Mutex
	on   []int
}

func (d *demandSource) NumNodeIDs() int { return d.held }

func (d *demandSource) NextIDsOn(i int, dst []int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.on = append(d.on, i%d.held)
	return d.fixedSource.NextIDs(dst)
}

// A large request is spread over every node ID held, those leased on demand
// included, not only the session's own (NumGenerators).
func TestMintSpreadsOverNodeIDsOnDemand(t *testing.T) {
	src := &demandSource{fixedSource: fixedSource{next: 1 << 60}, held: 4}
	g := startGateway(t, src, gateway.Options{})
	ids := g.post(`{"count":4096}`).ids(t)
	if len(ids) != 4096 || !slices.IsSorted(ids) {
		t.Fatalf("%d IDs, sorted %v", len(ids), slices.IsSorted(ids))
	}
	on := slices.Clone(src.on)
	slices.Sort(on)
	if !slices.Equal(on, []int{0, 1, 2, 3}) {
		t.Fatalf("chunks went to generators %v, want one on each of the 4 node IDs", src.on)
	}
}

// The gateway's /metrics shows the node IDs held and their changes, from the
// session's collector.
func TestMetricsShowNodeIDsOnDemand(t *testing.T) {
	reg := startRegistry(t, nil)
	cfg := reg.config(t, 2, nil)
	cfg.MaxCount = 4
	sess := openSession(t, cfg)
	pr := prometheus.NewRegistry()
	pr.MustRegister(clientmetrics.NewCollector(sess))
	g := startGateway(t, sess, gateway.Options{Registerer: pr, Gatherer: pr})
	g.post(`{"count":3000}`).ids(t)
	a := g.get("/metrics")
	for _, want := range []string{"\nidkeeper_client_node_ids 2\n", "\nidkeeper_client_node_id_grows_total 0\n",
		"\nidkeeper_client_node_id_shrinks_total 0\n", "\nidkeeper_client_issuing_utilization_ratio "} {
		if !strings.Contains(string(a.body), want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, a.body)
		}
	}
}
