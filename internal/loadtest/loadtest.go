// Package loadtest drives an ID gateway (POST /v1/ids) at a fixed concurrency and
// batch size and measures what its callers get: requests and IDs per second and
// the latency percentiles (issue #18). `idkeeper bench` and the gateway's load
// run use it; docs/benchmarks.md records its figures.
package loadtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Limits of a Config.
const (
	MaxClients  = 1024
	MaxCount    = 100_000 // the gateway's own limit is lower; a larger count is the gateway's 400
	MaxRequests = 50_000_000
	MaxDuration = time.Hour
)

// Config is one load run. URL, Clients, Count and Duration are required.
type Config struct {
	// URL is the gateway's POST /v1/ids URL, e.g. http://127.0.0.1:8081/v1/ids.
	URL string
	// APIKey, when set, is sent as X-API-Key (a gateway with consumer keys).
	APIKey string
	// Clients is the number of concurrent callers, each on its own keep-alive
	// connection: 1..MaxClients.
	Clients int
	// Count is the IDs each request asks for: 1..MaxCount.
	Count int
	// Duration bounds the run: 1 ms..MaxDuration. MaxRequests bounds it too:
	// 0 means MaxRequests.
	Duration    time.Duration
	MaxRequests int
	// Client sends the requests; nil: a client of its own with Clients idle
	// connections and no compression.
	Client *http.Client
}

// Result is what a run measured.
type Result struct {
	Requests int           // answered 200 with Count IDs
	IDs      int64         // Requests × Count
	Elapsed  time.Duration // from the first request to the last answer
	// Latency percentiles of the answered requests: P50, P90, P99, P999 and Max.
	P50, P90, P99, P999, Max time.Duration
}

// RequestsPerSecond and IDsPerSecond are the throughput.
func (r Result) RequestsPerSecond() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// IDsPerSecond is the IDs answered per second.
func (r Result) IDsPerSecond() float64 { return float64(r.IDs) / r.Elapsed.Seconds() }

// Validate returns an error naming the first setting out of bounds.
func (c Config) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("loadtest: the gateway URL is required")
	case c.Clients < 1 || c.Clients > MaxClients:
		return fmt.Errorf("loadtest: clients must be 1..%d, got %d", MaxClients, c.Clients)
	case c.Count < 1 || c.Count > MaxCount:
		return fmt.Errorf("loadtest: count must be 1..%d, got %d", MaxCount, c.Count)
	case c.Duration < time.Millisecond || c.Duration > MaxDuration:
		return fmt.Errorf("loadtest: duration must be 1ms..%s, got %s", MaxDuration, c.Duration)
	case c.MaxRequests < 0 || c.MaxRequests > MaxRequests:
		return fmt.Errorf("loadtest: max requests must be 0..%d, got %d", MaxRequests, c.MaxRequests)
	}
	return nil
}

// Run sends requests from c.Clients goroutines until c.Duration has passed, the
// request budget is spent or ctx ends, and measures each answer's latency. The
// first failed request (a transport error, a status other than 200, an answer
// that does not hold Count IDs) ends the run with its error and no result.
func Run(ctx context.Context, c Config) (Result, error) {
	if err := c.Validate(); err != nil {
		return Result{}, err
	}
	budget := c.MaxRequests
	if budget == 0 {
		budget = MaxRequests
	}
	hc := c.Client
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{MaxIdleConns: c.Clients, MaxIdleConnsPerHost: c.Clients, DisableCompression: true}}
		defer hc.CloseIdleConnections()
	}
	ctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	body := fmt.Appendf(nil, `{"count":%d}`, c.Count)
	var (
		sent   atomic.Int64
		failed error
		once   sync.Once
		wg     sync.WaitGroup
		lat    = make([][]time.Duration, c.Clients)
	)
	start := time.Now()
	for i := range c.Clients {
		lat[i] = make([]time.Duration, 0, min(budget/c.Clients+1, 1<<20))
		wg.Go(func() {
			for ctx.Err() == nil && sent.Add(1) <= int64(budget) {
				t0 := time.Now()
				if err := post(ctx, hc, c, body); err != nil {
					if ctx.Err() == nil {
						once.Do(func() { failed = err; cancel() })
					}
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if failed != nil {
		return Result{}, failed
	}
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return Result{}, errors.New("loadtest: no request was answered in time")
	}
	slices.Sort(all)
	q := func(f float64) time.Duration { return all[min(len(all)-1, int(f*float64(len(all))))] }
	return Result{Requests: len(all), IDs: int64(len(all)) * int64(c.Count), Elapsed: elapsed,
		P50: q(0.50), P90: q(0.90), P99: q(0.99), P999: q(0.999), Max: all[len(all)-1]}, nil
}

// post is one request: POST the body, read the whole answer, check the status
// and that the answer's "ids" array holds Count IDs (commas counted, the IDs not
// parsed: the caller's CPU is not what is measured).
func post(ctx context.Context, hc *http.Client, c Config, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	if c.APIKey != "" {
		req.Header["X-Api-Key"] = []string{c.APIKey}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(c.Count)*24+4096))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("loadtest: status %d: %.200s", resp.StatusCode, data)
	}
	open, close := bytes.IndexByte(data, '['), bytes.LastIndexByte(data, ']')
	if open < 0 || close < open || bytes.Count(data[open:close], []byte{','})+1 != c.Count {
		return fmt.Errorf("loadtest: the answer does not hold %d IDs: %.200s", c.Count, data)
	}
	return nil
}
