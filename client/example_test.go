//go:build unix

package client_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/client"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/prometheus/client_golang/prometheus"
)

// A service that mints IDs: start a session (it blocks until the lease is held),
// serve its health check, mint, and on SIGTERM close it, which drains the calls in
// flight and gives the node IDs back.
func Example() {
	serverURL, apiKey, stopRegistry := startDemoRegistry(idkeeper.Config{})
	defer stopRegistry()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	s, err := client.Start(ctx, client.Config{ServerURL: serverURL, APIKey: apiKey, Count: 2})
	if err != nil {
		log.Fatal(err) // no lease: ctx ended, or the server refused for good
	}

	// The health check and issuing share one condition.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.Check(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	fmt.Println("health:", get(mux, "/health"))

	ids := make([]int64, 1000)
	if err := s.NextIDs(ids); err != nil {
		log.Fatal(err)
	}
	fmt.Println("minted", len(ids), "IDs, ascending:", slices.IsSorted(ids))

	syscall.Kill(os.Getpid(), syscall.SIGTERM) // the orchestrator stops the service

	select {
	case <-ctx.Done(): // SIGTERM
	case <-s.Done(): // the lease was lost (reached only with an OnFatal that does not exit)
	}
	if err := s.Close(); err != nil {
		log.Print(err) // logged by Close too; the server reclaims after expiry + grace
	}
	_, err = s.NextID()
	fmt.Println("after Close:", err)
	fmt.Println("health:", get(mux, "/health"))
	// Output:
	// health: 200
	// minted 1000 IDs, ascending: true
	// after Close: idkeeper client: session is closed
	// health: 503
}

// One generator per worker goroutine: no shared counter between the workers, and
// each worker's IDs ascend.
func ExampleSession_Generator() {
	serverURL, apiKey, stopRegistry := startDemoRegistry(idkeeper.Config{})
	defer stopRegistry()
	s, err := client.Start(context.Background(), client.Config{ServerURL: serverURL, APIKey: apiKey, Count: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	var wg sync.WaitGroup
	ascending := make([]bool, s.NumGenerators())
	for w := range s.NumGenerators() {
		gen := s.Generator(w)
		wg.Go(func() {
			var last int64
			ascending[w] = true
			for range 10_000 {
				id, err := gen.NextID()
				if err != nil {
					log.Print(err)
					return
				}
				ascending[w] = ascending[w] && id > last
				last = id
			}
		})
	}
	wg.Wait()
	fmt.Println("every worker's IDs ascend:", !slices.Contains(ascending, false))
	// Output: every worker's IDs ascend: true
}

// Stats is what a metrics exporter reads: counters per node ID, the lease time
// left and health. Package clientmetrics exports it to Prometheus; a service that
// does not use Prometheus reads it itself, and the client package compiles neither.
func ExampleSession_Stats() {
	serverURL, apiKey, stopRegistry := startDemoRegistry(idkeeper.Config{})
	defer stopRegistry()
	s, err := client.Start(context.Background(), client.Config{ServerURL: serverURL, APIKey: apiKey, Count: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if err := s.Generator(1).NextIDs(make([]int64, 10)); err != nil {
		log.Fatal(err)
	}

	st := s.Stats()
	for i, g := range st.Generators {
		fmt.Printf("generator %d: minted %d, sequence exhausted %d, clock backwards %d\n",
			i, g.Minted, g.SequenceExhausted, g.ClockBackwards)
	}
	fmt.Println("healthy:", st.Healthy, "lease held:", st.TimeLeft > 0)
	// Output:
	// generator 0: minted 0, sequence exhausted 0, clock backwards 0
	// generator 1: minted 10, sequence exhausted 0, clock backwards 0
	// healthy: true lease held: true
}

func get(h http.Handler, path string) int {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code
}

// startDemoRegistry runs a registry server with an embedded store on loopback and
// returns its URL and an API key.
func startDemoRegistry(cfg idkeeper.Config) (serverURL, apiKey string, stop func()) {
	quiet := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "idkeeper-client-example")
	if err != nil {
		log.Fatal(err)
	}
	st, err := bolt.Open(filepath.Join(dir, "idk.db"), bolt.Options{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	// A new deployment is initialised once, as `idkeeper init` does.
	if _, err := st.Init(context.Background(), idkeeper.PoolSpec{Nodes: 64, Layout: cfg.Layout}); err != nil { // the registry grows it to its pool
		log.Fatal(err)
	}
	cfg.Logger = quiet
	reg, err := idkeeper.NewRegistry(st, cfg)
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
