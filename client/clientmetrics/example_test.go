package clientmetrics_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/client/clientmetrics"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Export a session's metrics on the program's /metrics.
func ExampleNewCollector() {
	serverURL, apiKey, stopRegistry := startDemoRegistry()
	defer stopRegistry()
	s, err := client.Start(context.Background(), client.Config{ServerURL: serverURL, APIKey: apiKey, Count: 1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(clientmetrics.NewCollector(s))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	if err := s.NextIDs(make([]int64, 5)); err != nil {
		log.Fatal(err)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "idkeeper_client_ids_minted_total") || strings.HasPrefix(line, "idkeeper_client_healthy") {
			fmt.Print(line)
		}
	}
	// Output:
	// idkeeper_client_healthy 1
	// idkeeper_client_ids_minted_total{node="0"} 5
}

// startDemoRegistry runs a registry server with an embedded store on loopback and
// returns its URL and an API key.
func startDemoRegistry() (serverURL, apiKey string, stop func()) {
	quiet := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "idkeeper-clientmetrics-example")
	if err != nil {
		log.Fatal(err)
	}
	st, err := bolt.Open(filepath.Join(dir, "idk.db"), bolt.Options{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	// A new deployment is initialised once, as `idkeeper init` does.
	if _, err := st.Init(context.Background(), idkeeper.PoolSpec{Nodes: 64}); err != nil {
		log.Fatal(err)
	}
	reg, err := idkeeper.NewRegistry(st, idkeeper.Config{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	if err := reg.Open(context.Background()); err != nil {
		log.Fatal(err)
	}
	apiKey = "idk_example-key-0123456789abcdef"
	if _, err := reg.EnsureAPIKey(context.Background(), apiKey, "example"); err != nil {
		log.Fatal(err)
	}
	api, err := idkhttp.NewServer(reg, idkhttp.Options{Logger: quiet, Gatherer: prometheus.NewRegistry()})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	return srv.URL, apiKey, func() {
		srv.Close()
		reg.Close()
		st.Close()
		os.RemoveAll(dir)
	}
}
