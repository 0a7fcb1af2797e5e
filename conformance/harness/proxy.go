package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper/conformance/internal/leasejson"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// Proxy is the fault proxy between a driver's client and the registry. It
// forwards every request, logs it, and applies the faults queued per route:
//
//	pass                forward unchanged
//	status:N            answer N with a problem+json body, not forwarded
//	reset               reset the connection (RST), not forwarded
//	drop                close the connection without an answer, not forwarded
//	malformed           forward, then answer 200 with a body that is not JSON
//	delay-request:MS    wait MS before forwarding
//	delay-response:MS   forward, then wait MS before answering
//	empty               forward, then answer the renew with an empty list
//	drop-lease          forward, then leave out the answer's last lease
//	expired             forward, then set serverUtcNow past the leases' expiry
//	bad-layout          forward, then answer a layout whose widths sum to 64
//
// Every Alloc and Renew answer also gets the scenario's skew added to its
// serverUtcNow. While the registry is down, every connection is reset.
type Proxy struct {
	URL  string
	srv  *http.Server
	skew time.Duration

	mu      sync.Mutex
	backend string // "" while the registry is down
	queue   map[string][]string
	always  map[string]string
	log     []*Exchange
	changed chan struct{} // closed and replaced on every logged exchange
}

// Exchange is one request the proxy handled.
type Exchange struct {
	Route    string
	Received time.Time // when the request arrived
	Answered time.Time // when the answer (or the reset) went out
	Action   string
	Request  map[string]any
	Status   int            // 0 for a reset or dropped connection
	Answer   map[string]any // the answer as the client got it, when JSON
}

// Granted reports whether the exchange handed the client a live lease: a 200
// answer with leases, not rewritten to show the lease gone or over.
func (e *Exchange) Granted() bool {
	switch e.Action {
	case "empty", "drop-lease", "expired", "bad-layout", "malformed":
		return false
	}
	ls, _ := e.Answer["leases"].([]any)
	return e.Status == http.StatusOK && len(ls) > 0 && (e.Route == "alloc" || e.Route == "renew")
}

// LeaseTime is the lease the answer grants: min(expiresAt) − serverUtcNow.
func (e *Exchange) LeaseTime() time.Duration {
	now, ok := leasejson.Time(e.Answer["serverUtcNow"])
	end, ok2 := leasejson.MinExpiry(e.Answer["leases"])
	if !ok || !ok2 {
		return 0
	}
	return end.Sub(now)
}

// StartProxy serves a proxy for backend on a free loopback port.
func StartProxy(backend string, skew time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{URL: "http://" + ln.Addr().String(), backend: backend, skew: skew,
		queue: map[string][]string{}, always: map[string]string{}, changed: make(chan struct{})}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

// Close stops the proxy.
func (p *Proxy) Close() { p.srv.Close() }

// SetBackend points the proxy at the registry's URL; "" while it is down.
func (p *Proxy) SetBackend(url string) {
	p.mu.Lock()
	p.backend = url
	p.mu.Unlock()
}

// Fault queues actions for route's next requests; always keeps the last one.
func (p *Proxy) Fault(route string, actions []string, always bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if always && len(actions) > 0 {
		p.queue[route] = append(p.queue[route], actions[:len(actions)-1]...)
		p.always[route] = actions[len(actions)-1]
		return
	}
	p.queue[route] = append(p.queue[route], actions...)
}

// Clear drops route's faults.
func (p *Proxy) Clear(route string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.queue, route)
	delete(p.always, route)
}

// Pending is the number of queued faults of route not used yet.
func (p *Proxy) Pending(route string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue[route])
}

// Log returns the exchanges so far and a channel closed at the next one.
func (p *Proxy) Log() ([]*Exchange, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Exchange(nil), p.log...), p.changed
}

func (p *Proxy) take(route string) (action, backend string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q := p.queue[route]; len(q) > 0 {
		p.queue[route] = q[1:]
		return q[0], p.backend
	}
	if a := p.always[route]; a != "" {
		return a, p.backend
	}
	return "pass", p.backend
}

func (p *Proxy) record(e *Exchange) {
	e.Answered = time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = append(p.log, e)
	close(p.changed)
	p.changed = make(chan struct{})
}

func routeOf(path string) string {
	switch path {
	case "/v1/leases":
		return "alloc"
	case "/v1/leases/renew":
		return "renew"
	case "/v1/leases/remove":
		return "remove"
	}
	return "other"
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := &Exchange{Route: routeOf(r.URL.Path), Received: time.Now()}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	_ = json.Unmarshal(body, &e.Request)
	action, backend := p.take(e.Route)
	e.Action = action
	defer p.record(e)
	kind, arg, _ := strings.Cut(action, ":")
	switch kind {
	case "reset", "drop":
		hangUp(w, kind == "reset")
		return
	case "status":
		e.Status, _ = strconv.Atoi(arg)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(e.Status)
		fmt.Fprintf(w, `{"type":"about:blank","title":"fault proxy","status":%d,"detail":"injected by the conformance proxy"}`, e.Status)
		return
	case "delay-request":
		sleepMs(arg)
	}
	if backend == "" { // the registry is down: as a refused connection
		hangUp(w, true)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, backend+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		hangUp(w, true)
		return
	}
	for _, h := range []string{"Content-Type", "X-API-Key", "Accept"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		hangUp(w, true)
		return
	}
	ans, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		hangUp(w, true)
		return
	}
	e.Status = resp.StatusCode
	if resp.StatusCode == http.StatusOK && (e.Route == "alloc" || e.Route == "renew") {
		ans = p.rewrite(ans, kind)
	}
	if kind == "malformed" && resp.StatusCode == http.StatusOK {
		ans = []byte(`{"leases": [ this is not JSON`)
	}
	_ = json.Unmarshal(ans, &e.Answer)
	if kind == "delay-response" {
		sleepMs(arg)
	}
	for _, h := range []string{"Content-Type", "Retry-After", "Warning"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(ans)))
	w.WriteHeader(resp.StatusCode)
	w.Write(ans)
}

// rewrite applies the skew and an answer-rewriting fault to a 200 body.
func (p *Proxy) rewrite(ans []byte, kind string) []byte {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(ans))
	dec.UseNumber()
	if dec.Decode(&m) != nil {
		return ans
	}
	now, ok := leasejson.Time(m["serverUtcNow"])
	if !ok {
		return ans
	}
	now = now.Add(p.skew)
	ls, _ := m["leases"].([]any)
	switch kind {
	case "empty":
		m["leases"] = []any{}
	case "drop-lease":
		if len(ls) > 0 {
			m["leases"] = ls[:len(ls)-1]
		}
	case "expired":
		if end, ok := leasejson.MinExpiry(m["leases"]); ok {
			now = end.Add(time.Second)
		}
	case "bad-layout":
		if l, ok := m["layout"].(map[string]any); ok {
			l["sequenceBits"] = json.Number("11")
		}
	}
	m["serverUtcNow"] = wire.FormatTime(now)
	out, err := json.Marshal(m)
	if err != nil {
		return ans
	}
	return out
}

// hangUp ends the connection without an answer: with a reset (RST) or a close.
func hangUp(w http.ResponseWriter, reset bool) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("conformance proxy: the connection cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok && reset {
		tc.SetLinger(0)
	}
	conn.Close()
}

func sleepMs(arg string) {
	ms, _ := strconv.Atoi(arg)
	time.Sleep(time.Duration(ms) * time.Millisecond)
}
