package loadtest_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
	"github.com/idkeeper/idkeeper/internal/loadtest"
)

const key = "idk_loadtest-0123456789abcdefghijklmnop"

// gatewayURL starts a registry and a gateway on one node ID, both on loopback,
// and returns the gateway's POST /v1/ids URL.
func gatewayURL(t *testing.T, consumerKeys ...string) string {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	reg := registrytest.Start(t, registrytest.Options{Config: idkeeper.Config{CleanupInterval: time.Hour}, Logger: quiet,
		APIKey: key, KeyName: "load tests"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := client.Start(ctx, client.Config{ServerURL: reg.URL, APIKey: key, HTTPClient: reg.Client, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	opts := gateway.Options{Logger: quiet}
	if len(consumerKeys) > 0 {
		if opts.ConsumerKeys, err = gateway.ParseConsumerKeys(strings.Join(consumerKeys, "\n"), "test"); err != nil {
			t.Fatal(err)
		}
	}
	gw, err := gateway.New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(gw.Handler())
	t.Cleanup(ts.Close)
	return ts.URL + "/v1/ids"
}

// A run against a real gateway answers every request with its IDs, within the
// bounds it was given, and its percentiles are ordered.
func TestRunAgainstGateway(t *testing.T) {
	url := gatewayURL(t)
	r, err := loadtest.Run(t.Context(), loadtest.Config{URL: url, Clients: 4, Count: 100, Duration: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests == 0 || r.IDs != int64(r.Requests)*100 || r.Elapsed < 400*time.Millisecond || r.Elapsed > 5*time.Second ||
		!(r.P50 <= r.P90 && r.P90 <= r.P99 && r.P99 <= r.P999 && r.P999 <= r.Max) || r.IDsPerSecond() <= 0 {
		t.Fatalf("result %+v", r)
	}
	// The request budget ends a run before its duration.
	r, err = loadtest.Run(t.Context(), loadtest.Config{URL: url, Clients: 2, Count: 1, Duration: time.Minute, MaxRequests: 50})
	if err != nil || r.Requests != 50 {
		t.Fatalf("a budget of 50: %d requests, %v", r.Requests, err)
	}
}

// A gateway that refuses the requests ends the run with its answer.
func TestRunFailsOnRefusal(t *testing.T) {
	url := gatewayURL(t, "idk_consumer-0123456789abcdefghijklmnopq")
	_, err := loadtest.Run(t.Context(), loadtest.Config{URL: url, Clients: 2, Count: 10, Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), "status 401") {
		t.Fatalf("without the consumer key: %v", err)
	}
	r, err := loadtest.Run(t.Context(), loadtest.Config{URL: url, APIKey: "idk_consumer-0123456789abcdefghijklmnopq", Clients: 2,
		Count: 10, Duration: 200 * time.Millisecond})
	if err != nil || r.Requests == 0 {
		t.Fatalf("with the consumer key: %+v, %v", r, err)
	}
	// An answer without the IDs asked for is a failure, not a success.
	short := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"ids":[1,2]}`))
	}))
	defer short.Close()
	if _, err := loadtest.Run(t.Context(), loadtest.Config{URL: short.URL, Clients: 1, Count: 3, Duration: time.Second}); err == nil ||
		!strings.Contains(err.Error(), "does not hold 3 IDs") {
		t.Fatalf("a short answer: %v", err)
	}
}

func TestConfigBounds(t *testing.T) {
	ok := loadtest.Config{URL: "http://127.0.0.1:1/v1/ids", Clients: 1, Count: 1, Duration: time.Second}
	for _, bad := range []func(c *loadtest.Config){
		func(c *loadtest.Config) { c.URL = "" },
		func(c *loadtest.Config) { c.Clients = 0 },
		func(c *loadtest.Config) { c.Clients = loadtest.MaxClients + 1 },
		func(c *loadtest.Config) { c.Count = 0 },
		func(c *loadtest.Config) { c.Count = loadtest.MaxCount + 1 },
		func(c *loadtest.Config) { c.Duration = 0 },
		func(c *loadtest.Config) { c.Duration = 2 * time.Hour },
		func(c *loadtest.Config) { c.MaxRequests = -1 },
	} {
		c := ok
		bad(&c)
		if _, err := loadtest.Run(t.Context(), c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}
