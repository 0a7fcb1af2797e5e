package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/internal/loadtest"
)

// The bench command drives a running gateway (issue #18): `idkeeper bench
// --gateway URL` with a concurrency and a batch size, and prints what its callers
// got: requests and IDs per second, the share of the ceiling, and the latency
// percentiles.

// benchFlags are the bench command's flags.
type benchFlags struct {
	gateway     string
	clients     int
	count       int
	duration    time.Duration
	maxRequests int
	nodeIDs     int
	json        bool
	key         string
	keyFlag     *secretFlag
	log         logFlags
}

func (b *benchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.gateway, "gateway", "", "the gateway's base URL, e.g. http://127.0.0.1:8081 (required)")
	fs.IntVar(&b.clients, "clients", 16, fmt.Sprintf("concurrent callers, each on its own keep-alive connection; 1..%d", loadtest.MaxClients))
	fs.IntVar(&b.count, "count", 1000, "IDs each request asks for (the gateway's --max-count bounds it)")
	fs.DurationVar(&b.duration, "duration", 10*time.Second, "how long the run lasts; 1ms..1h")
	fs.IntVar(&b.maxRequests, "max-requests", 0, "stop after this many requests; 0: only --duration")
	fs.IntVar(&b.nodeIDs, "node-ids", 0, "the gateway's node IDs (its --node-ids), to print the share of the ceiling (node IDs × the layout's IDs per second); 0: not printed")
	fs.BoolVar(&b.json, "json", false, "print the result as one JSON object")
}

// benchResult is the result as --json prints it; durations in milliseconds.
type benchResult struct {
	Clients      int     `json:"clients"`
	Count        int     `json:"count"`
	Requests     int     `json:"requests"`
	IDs          int64   `json:"ids"`
	ElapsedMs    float64 `json:"elapsedMs"`
	RequestsPerS float64 `json:"requestsPerSecond"`
	IDsPerS      float64 `json:"idsPerSecond"`
	OfCeiling    float64 `json:"ofCeiling,omitempty"` // 0..1; absent without --node-ids
	P50Ms        float64 `json:"p50Ms"`
	P90Ms        float64 `json:"p90Ms"`
	P99Ms        float64 `json:"p99Ms"`
	P999Ms       float64 `json:"p999Ms"`
	MaxMs        float64 `json:"maxMs"`
}

func runBench(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", stderr)
	var bf benchFlags
	bf.register(fs)
	bf.keyFlag = secretVar(fs, &bf.key, "consumer-key", "", "the consumer key the gateway wants in X-API-Key, when it has consumer keys (prefer --consumer-key-file or "+envName("consumer-key")+")", always)
	bf.log.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if err := resolveSecrets(bf.log.logger(stderr), bf.keyFlag); err != nil {
		return err
	}
	u, err := url.Parse(bf.gateway)
	if bf.gateway == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("bench: --gateway %q: want the gateway's http:// or https:// base URL", bf.gateway)
	}
	if bf.nodeIDs < 0 {
		return usagef("bench: --node-ids must not be negative")
	}
	cfg := loadtest.Config{URL: strings.TrimRight(bf.gateway, "/") + "/v1/ids", APIKey: bf.key, Clients: bf.clients,
		Count: bf.count, Duration: bf.duration, MaxRequests: bf.maxRequests}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	ceiling := 0.0
	if bf.nodeIDs > 0 {
		admin, err := newAdminClient(bf.gateway, "")
		if err != nil {
			return err
		}
		layout, err := fetchLayout(ctx, admin)
		admin.Close()
		if err != nil {
			return fmt.Errorf("bench: the gateway's layout: %w", err)
		}
		ceiling = float64(bf.nodeIDs) * float64(layout.IDsPerSecond())
	}
	r, err := loadtest.Run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	out := benchResult{Clients: bf.clients, Count: bf.count, Requests: r.Requests, IDs: r.IDs, ElapsedMs: ms(r.Elapsed),
		RequestsPerS: r.RequestsPerSecond(), IDsPerS: r.IDsPerSecond(), P50Ms: ms(r.P50), P90Ms: ms(r.P90), P99Ms: ms(r.P99),
		P999Ms: ms(r.P999), MaxMs: ms(r.Max)}
	if ceiling > 0 {
		out.OfCeiling = r.IDsPerSecond() / ceiling
	}
	if bf.json {
		b, _ := json.Marshal(out)
		fmt.Fprintf(stdout, "%s\n", b)
		return nil
	}
	fmt.Fprintf(stdout, "%d clients × count=%d for %s: %d requests, %.0f req/s, %.0f IDs/s", out.Clients, out.Count,
		r.Elapsed.Round(time.Millisecond), out.Requests, out.RequestsPerS, out.IDsPerS)
	if ceiling > 0 {
		fmt.Fprintf(stdout, " (%.1f %% of the ceiling of %d node IDs)", 100*out.OfCeiling, bf.nodeIDs)
	}
	fmt.Fprintf(stdout, "\nlatency: p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n", r.P50, r.P90, r.P99, r.P999, r.Max)
	return nil
}
