package gateway_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/redis"
)

func hashOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func boltIdem(t testing.TB) idempotency.Store {
	t.Helper()
	s, err := bolt.OpenIdempotency(filepath.Join(t.TempDir(), "gateway-idem.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newIdempotency(t testing.TB, store idempotency.Store, required bool) *idempotency.Service {
	t.Helper()
	svc, err := idempotency.New(store, idempotency.Config{Required: required, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// holdingSpy is a spy whose first mint waits until release is called (or 10 s
// pass), so that the other requests of a burst overlap with it.
type holdingSpy struct {
	*spy
	once    sync.Once
	release chan struct{}
}

func hold(s *spy) *holdingSpy { return &holdingSpy{spy: s, release: make(chan struct{})} }

func (h *holdingSpy) NextIDs(dst []int64) error {
	select {
	case <-h.release:
	case <-time.After(10 * time.Second):
	}
	return h.spy.NextIDs(dst)
}

func (h *holdingSpy) open() { h.once.Do(func() { close(h.release) }) }

// burst sends n identical requests with one Idempotency-Key at once, spread over
// gws, and calls release once a fifth of them have been answered (a holdingSpy lets
// its mint go after 10 s anyway).
func burst(t *testing.T, gws []*gw, n int, body, key string, release func()) []answer {
	t.Helper()
	answers := make([]answer, n)
	var done atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			answers[i] = gws[i%len(gws)].post(body, "Idempotency-Key", key)
			if done.Add(1) == int64(n/5) {
				release()
			}
		})
	}
	wg.Wait()
	return answers
}

// checkBurst checks the answers to one key: exactly one fresh 200, every other a
// replay of the same body or a 409 IDEMPOTENCY_REQUEST_IN_PROGRESS.
func checkBurst(t *testing.T, answers []answer) (first answer) {
	t.Helper()
	var fresh, replays, inProgress int
	for _, a := range answers {
		if a.status == http.StatusOK && a.header.Get(idempotency.HeaderReplayed) == "" {
			fresh++
			first = a
		}
	}
	if fresh != 1 {
		t.Fatalf("%d fresh answers, want exactly 1", fresh)
	}
	for _, a := range answers {
		switch {
		case a.status == http.StatusOK && a.header.Get(idempotency.HeaderReplayed) == "true":
			if string(a.body) != string(first.body) {
				t.Fatalf("a replay differs from the first answer:\n%s\n%s", a.body, first.body)
			}
			replays++
		case a.status == http.StatusConflict:
			a.problem(t, http.StatusConflict, idempotency.CodeInProgress)
			if a.header.Get("Retry-After") == "" {
				t.Fatal("409 without Retry-After")
			}
			inProgress++
		case a.status != http.StatusOK:
			t.Fatalf("unexpected answer %d: %s", a.status, a.body)
		}
	}
	t.Logf("%d requests: 1 issuance, %d replays, %d in progress", len(answers), replays, inProgress)
	return first
}

// Fifty concurrent requests with one Idempotency-Key: exactly one issuance, and
// the other 49 get the same answer replayed or 409 while it runs.
func TestIdempotencyFiftyConcurrentRequestsOneIssuance(t *testing.T) {
	reg := startRegistry(t, nil)
	src := hold(&spy{IDSource: reg.open(t, 2)})
	g := startGateway(t, src, gateway.Options{Idempotency: newIdempotency(t, boltIdem(t), false)})
	first := checkBurst(t, burst(t, []*gw{g}, 50, `{"count":1500}`, "fifty", src.open))
	if calls, _, minted := src.reset(); calls != 2 || len(minted) != 1500 {
		t.Fatalf("%d chunks, %d IDs minted: want one issuance of 1500 in 2 chunks", calls, len(minted))
	}
	if len(first.ids(t)) != 1500 {
		t.Fatal("short answer")
	}
	later := g.post(`{"count":1500}`, "Idempotency-Key", "fifty")
	if later.header.Get(idempotency.HeaderReplayed) != "true" || string(later.body) != string(first.body) {
		t.Fatalf("a later retry: %d %s", later.status, later.header)
	}
}

// A key reused with another body or query is 422; a key is required when the
// gateway says so (400), and must be well formed.
func TestIdempotencyKeyMisuse(t *testing.T) {
	reg := startRegistry(t, nil)
	sess := reg.open(t, 1)
	g := startGateway(t, sess, gateway.Options{Idempotency: newIdempotency(t, boltIdem(t), false)})
	first := g.post(`{"count":5}`, "Idempotency-Key", `"k-1"`)
	first.ids(t)
	g.post(`{"count":6}`, "Idempotency-Key", "k-1").problem(t, http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
	g.do(http.MethodPost, "/v1/ids?format=string", `{"count":5}`, "Idempotency-Key", "k-1").
		problem(t, http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
	if again := g.post(` { "count" : 5 } `, "Idempotency-Key", "k-1"); string(again.body) != string(first.body) {
		t.Fatalf("the same request, formatted differently, was not replayed: %s", again.body)
	}
	g.post(`{"count":5}`, "Idempotency-Key", "two words").problem(t, http.StatusBadRequest, idempotency.CodeKeyInvalid)
	if a := g.post(`{"count":5}`); a.status != http.StatusOK {
		t.Fatalf("no key where none is required: %d", a.status)
	}

	strict := startGateway(t, sess, gateway.Options{Idempotency: newIdempotency(t, boltIdem(t), true)})
	strict.post(`{"count":5}`).problem(t, http.StatusBadRequest, idempotency.CodeKeyRequired)
	strict.post(`{"count":5}`, "Idempotency-Key", "k-2").ids(t)
	if a := strict.get("/v1/ids/1"); a.status != http.StatusOK {
		t.Fatalf("GET needs no key: %d", a.status)
	}
}

// Two gateways on one Redis share idempotency records: a retry that lands on the
// other gateway gets the first answer, and a burst spread over both issues once.
func TestTwoGatewaysShareIdempotencyOnRedis(t *testing.T) {
	rs := redistest.Start(t)
	reg := startRegistry(t, nil)
	open := func() *idempotency.Service {
		st, err := redis.OpenIdempotency(rs.URL(), redis.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return newIdempotency(t, st, false)
	}
	srcA, srcB := hold(&spy{IDSource: reg.open(t, 1)}), hold(&spy{IDSource: reg.open(t, 1)})
	srcA.open()
	a := startGateway(t, srcA, gateway.Options{Idempotency: open()})
	b := startGateway(t, srcB, gateway.Options{Idempotency: open()})

	first := a.post(`{"count":3}`, "Idempotency-Key", "shared-1")
	first.ids(t)
	replay := b.post(`{"count":3}`, "Idempotency-Key", "shared-1")
	if replay.header.Get(idempotency.HeaderReplayed) != "true" || string(replay.body) != string(first.body) {
		t.Fatalf("gateway B did not replay gateway A's answer: %d %s", replay.status, replay.body)
	}
	b.post(`{"count":4}`, "Idempotency-Key", "shared-1").problem(t, http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
	if calls, _, _ := srcB.reset(); calls != 0 {
		t.Fatalf("gateway B minted %d chunks for a replayed key", calls)
	}
	srcA.reset()

	// B mints only after the release; A would mint at once: whichever claims the key
	// first is the only one to mint.
	checkBurst(t, burst(t, []*gw{a, b}, 50, `{"count":10}`, "shared-2", srcB.open))
	ca, _, _ := srcA.reset()
	cb, _, _ := srcB.reset()
	if ca+cb != 1 {
		t.Fatalf("gateways minted %d + %d times for one key, want 1 in all", ca, cb)
	}
}

// With a key required, the gateway can serve nothing while the idempotency store
// is down, so /health and /readyz are red then, and green again once it is back.
// Without the requirement, keyless requests still work and health stays green.
func TestHealthCoversTheIdempotencyStoreWhenAKeyIsRequired(t *testing.T) {
	reg := startRegistry(t, nil)
	src := reg.open(t, 1)
	rs := redistest.Start(t)
	store, err := redis.OpenIdempotency(rs.URL(), redis.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	required := startGateway(t, src, gateway.Options{Idempotency: newIdempotency(t, store, true)})
	optional := startGateway(t, src, gateway.Options{Idempotency: newIdempotency(t, store, false)})
	for _, g := range []*gw{required, optional} {
		if a := g.get("/health"); a.status != http.StatusOK {
			t.Fatalf("/health with the store up: %d %s", a.status, a.body)
		}
	}
	rs.Stop(t)
	a := required.get("/health")
	a.problem(t, http.StatusServiceUnavailable, gateway.CodeIssuingUnavailable)
	if !strings.Contains(string(a.body), "Idempotency-Key") || strings.Contains(string(a.body), "127.0.0.1") {
		t.Fatalf("/health with the store down: %s; want the reason, without the store's address", a.body)
	}
	required.get("/readyz").problem(t, http.StatusServiceUnavailable, protocol.CodeNotReady)
	if a := optional.get("/health"); a.status != http.StatusOK {
		t.Fatalf("/health of a gateway that does not require a key, store down: %d %s", a.status, a.body)
	}
	rs.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for required.get("/health").status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("/health stayed red after the store came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
