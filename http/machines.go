package http

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
)

// maxMachineLabel is the longest machine_id label value, in bytes. A machine ID
// may be 256 bytes (protocol.MaxMachineIDLen); a longer one is cut (machineLabel).
const maxMachineLabel = 64

// machineGauges are the gauges of the machine watch (idkeeper.Observer.Machines).
type machineGauges struct {
	mu                       sync.Mutex // one report replaces the last as a whole
	nodes, sessions, overdue *prometheus.GaugeVec
	count                    prometheus.Gauge
}

func newMachineGauges() machineGauges {
	vec := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "idkeeper_" + name, Help: help}, []string{"machine_id"})
	}
	return machineGauges{
		nodes: vec("machine_node_ids", "Node IDs held by the leases of a machine ID's sessions; only the 10 machine IDs "+
			"holding the most, as of the last cleanup tick."),
		sessions: vec("machine_sessions", "Sessions (requesters) of a machine ID that hold leases; the machine IDs of "+
			"idkeeper_machine_node_ids."),
		overdue: vec("machine_overdue_sessions", "Sessions of a machine ID that missed a renewal (crashed or cut off) "+
			"and still hold node IDs; the machine IDs of idkeeper_machine_node_ids."),
		count: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idkeeper_machines",
			Help: "Machine IDs whose sessions hold leases, as of the last cleanup tick."}),
	}
}

// set replaces the series with one per machine ID of top.
func (g *machineGauges) set(top []idkeeper.MachineLeases, machines int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nodes.Reset()
	g.sessions.Reset()
	g.overdue.Reset()
	for _, m := range top {
		l := machineLabel(m.MachineID)
		g.nodes.WithLabelValues(l).Set(float64(m.NodeIDs))
		g.sessions.WithLabelValues(l).Set(float64(m.Sessions))
		g.overdue.WithLabelValues(l).Set(float64(m.Overdue))
	}
	g.count.Set(float64(machines))
}

// machineLabel is id when it is at most maxMachineLabel bytes, else its first
// bytes (cut at a character boundary), "~" and 16 hex digits of its SHA-256, at
// most maxMachineLabel bytes in all: two machine IDs never share a label.
func machineLabel(id string) string {
	if len(id) <= maxMachineLabel {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	suffix := "~" + hex.EncodeToString(sum[:8])
	cut := maxMachineLabel - len(suffix)
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return id[:cut] + suffix
}
