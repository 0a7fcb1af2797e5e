package http_test

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/localstate"
)

// The benchmarks measure one client calling the API over real HTTP on loopback
// with keep-alive: JSON decoding, API-key check, registry and store, one request
// at a time. bolt fsyncs every write; redis runs a Lua script per operation.

// benchStores runs f on a fresh harness per store. The registry keeps its replica
// state in a real file, as the server does: every new grant saves it before it is
// answered.
func benchStores(b *testing.B, f func(b *testing.B, h *harness)) {
	withState := withConfig(func(c *idkeeper.Config) {
		st, err := localstate.Open(filepath.Join(b.TempDir(), "registry-state"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		c.State = st
	})
	b.Run("bolt", func(b *testing.B) { f(b, newBolt(b, withState)) })
	b.Run("redis", func(b *testing.B) { f(b, newRedis(b, withState)) })
}

// BenchmarkHTTPAllocRemove is one Alloc of one node ID and its Remove (with
// mintedUpTo) per iteration: the life of a short-lived process.
func BenchmarkHTTPAllocRemove(b *testing.B) {
	benchStores(b, func(b *testing.B, h *harness) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			who := requesterJSON(i)
			mustPost(b, h, "/v1/leases", `{"requester":`+who+`,"count":1,"clientUtcNow":"`+ts(start)+`"}`)
			mustPost(b, h, "/v1/leases/remove", `{"requester":`+who+`,"mintedUpTo":"`+ts(start)+`"}`)
		}
	})
}

// BenchmarkHTTPRenew is one Renew of a requester holding 4 node IDs per iteration,
// with their fencing tokens and receipts, as the client library sends it.
func BenchmarkHTTPRenew(b *testing.B) {
	benchStores(b, func(b *testing.B, h *harness) {
		who := requesterJSON(1)
		g := h.post("/v1/leases", `{"requester":`+who+`,"count":4}`).ok(b).leases(b)
		var receipts []string
		for _, l := range g {
			receipts = append(receipts, `"`+l.Receipt+`"`)
		}
		body := `{"requester":` + who + `,"clientUtcNow":"` + ts(start) + `","fencingTokens":[1,2,3,4],"receipts":[` +
			strings.Join(receipts, ",") + `]}`
		b.ReportAllocs()
		for b.Loop() {
			mustPost(b, h, "/v1/leases/renew", body)
		}
	})
}

// mustPost is a lean POST for benchmarks: no JSON decoding of the answer.
func mustPost(b *testing.B, h *harness, path, body string) {
	req, err := http.NewRequest(http.MethodPost, h.baseURL+path, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("X-API-Key", h.apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatal(fmt.Sprintf("%s: %d %s", path, resp.StatusCode, raw))
	}
}
