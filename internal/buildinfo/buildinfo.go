// Package buildinfo is the idkeeper_build_info metric that the registry (package
// http) and the gateway export alike: a gauge of constant value 1 whose labels
// say which build answers, so that a dashboard can tell the replicas' versions
// apart and an alert can join on them.
//
// It uses the standard library and the Prometheus client only.
package buildinfo

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns idkeeper_build_info{version,commit,goversion} 1: version and
// commit as the program reports them (idkeeper's /v1/version), goversion the Go
// release that built the running binary (runtime.Version). An empty version or
// commit is exported as "unknown", so that every label has a value.
func Collector(version, commit string) prometheus.Collector {
	if version == "" {
		version = "unknown"
	}
	if commit == "" {
		commit = "unknown"
	}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "idkeeper_build_info",
		Help: "Always 1; the labels name the build: version and commit of idkeeper, goversion of the Go toolchain.",
	}, []string{"version", "commit", "goversion"})
	g.WithLabelValues(version, commit, runtime.Version()).Set(1)
	return g
}
