package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/chaos/history"
)

// GatewayName names the gateway in reports and fault targets.
const GatewayName = "gw"

// GatewayBackoffSlack is added to the gateway's liveness bound: it opens its
// session with the client library's default Alloc back-off (3 s, doubling, ±20 %),
// which has no flag, so after a quarantine its second retry comes up to ~11 s late.
const GatewayBackoffSlack = 6 * time.Second

// Gateway is the `idkeeper gateway` process of a Cluster, with what the suite needs
// to check it like a client: a recording HTTP proxy between it and its TCP Proxy
// (which records its leases from the registry's answers), a consumer that asks it
// for IDs all the time and writes every ID it hands out, and a supervisor that
// restarts it whenever it exits (it exits when its lease is lost, by design).
//
// Each gateway process is one generation; its record is slot = generation in the
// gateway's history directory, so the checker sees every process as one session.
type Gateway struct {
	c     *Cluster
	Dir   string
	Proxy *Proxy // between the recorder and the servers: faults go here
	Start time.Time
	hist  *history.Writer
	rec   *http.Server

	mu      sync.Mutex
	gen     int // current generation, from 1
	p       *process
	url     string // of the current generation
	ids     map[int]*history.IDWriter
	digests map[int]*history.Digest
	layout  *history.Layout
	acq     map[int]bool
	stopped bool
	killed  bool // the current generation was killed by the test
}

// StartGateway starts the gateway and its consumer. The cluster stops it.
func (c *Cluster) StartGateway() (*Gateway, error) {
	proxy, err := NewProxy(c.backends()...)
	if err != nil {
		return nil, err
	}
	g := &Gateway{c: c, Dir: filepath.Join(c.dir, GatewayName), Proxy: proxy,
		ids: map[int]*history.IDWriter{}, digests: map[int]*history.Digest{}, acq: map[int]bool{}}
	if err := os.MkdirAll(g.Dir, 0o755); err != nil {
		return nil, err
	}
	if g.hist, err = history.Create(g.Dir); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	target, _ := url.Parse("http://" + proxy.Addr())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = g.recordAnswer
	rp.ErrorLog = log.New(io.Discard, "", 0) // a fault's broken connections are expected
	g.rec = &http.Server{Handler: g.tagGeneration(rp), ReadHeaderTimeout: 10 * time.Second}
	go g.rec.Serve(ln)
	c.mu.Lock()
	c.gateway = g
	c.mu.Unlock()
	g.Start = time.Now()
	if err := g.launch("http://" + ln.Addr().String()); err != nil {
		return nil, err
	}
	go g.consume()
	return g, nil
}

type genKey struct{}

// tagGeneration marks each request with the generation current when it arrived:
// the previous process is dead before the next starts.
func (g *Gateway) tagGeneration(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		gen := g.gen
		g.mu.Unlock()
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), genKey{}, gen)))
	})
}

// recordAnswer records the registry's Alloc and Renew answers to the gateway; the
// first 200 Alloc answer of a generation is its "acquired": the grant. (Open may
// mint before any Renew answer came, when the first Renew only timed out.)
func (g *Gateway) recordAnswer(resp *http.Response) error {
	path := resp.Request.URL.Path
	kind := ""
	switch {
	case strings.HasSuffix(path, "/v1/leases/renew"):
		kind = history.EvRenewAnswer
	case strings.HasSuffix(path, "/v1/leases"):
		kind = history.EvAllocAnswer
	default:
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return err
	}
	gen, _ := resp.Request.Context().Value(genKey{}).(int)
	e := history.Event{T: time.Now().UnixNano(), Ev: kind, S: gen, G: 1, Status: resp.StatusCode}
	if resp.StatusCode == http.StatusOK {
		var layout *history.Layout
		e.Leases, layout = history.ParseAnswer(body)
		g.mu.Lock()
		if layout != nil {
			g.layout = layout
		}
		first := kind == history.EvAllocAnswer && !g.acq[gen] && len(e.Leases) > 0 && g.layout != nil
		g.acq[gen] = g.acq[gen] || first
		if first {
			// Written before the lock is released: the consumer writes progress
			// events once acq is set, and none may come before this one.
			g.write(history.Event{T: e.T, Ev: history.EvAcquired, S: gen, G: 1, Leases: e.Leases, Layout: g.layout})
		}
		g.mu.Unlock()
	}
	g.write(e)
	return nil
}

func (g *Gateway) write(e history.Event) {
	if err := g.hist.Write(e); err != nil {
		g.c.t.Errorf("gateway history: %v", err)
	}
}

// launch starts the next generation on a fresh port.
func (g *Gateway) launch(server string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return nil
	}
	g.gen++
	gen := g.gen
	g.mu.Unlock()
	args := []string{"gateway", "--listen", "127.0.0.1:" + strconv.Itoa(port), "--server", server,
		"--node-ids", "2", "--idempotency-store", "none", "--shutdown-timeout", "2s"}
	env := []string{"IDKEEPER_API_KEY=" + g.c.apiKey}
	p, err := startProcess(fmt.Sprintf("%s-%d", GatewayName, gen), filepath.Join(g.c.dir, GatewayName+".log"), env, g.c.bins.Server, args...)
	if err != nil {
		return err
	}
	w, err := history.CreateIDs(g.Dir, gen)
	if err != nil {
		p.kill()
		return err
	}
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		p.kill()
		w.Close()
		return nil
	}
	g.p, g.url, g.killed = p, "http://127.0.0.1:"+strconv.Itoa(port), false
	g.ids[gen], g.digests[gen] = w, &history.Digest{}
	g.mu.Unlock()
	go g.supervise(p, gen, server)
	return nil
}

// supervise restarts the gateway when it exits, as its supervisor would; an exit
// the test did not cause is a lost lease (the gateway's documented behaviour).
func (g *Gateway) supervise(p *process, gen int, server string) {
	<-p.done
	g.mu.Lock()
	stopped, killed := g.stopped, g.killed
	d := *g.digests[gen]
	g.mu.Unlock()
	if stopped {
		return
	}
	if !killed {
		g.write(history.Event{T: time.Now().UnixNano(), Ev: history.EvLost, S: gen, G: 1,
			Err: "gateway exited: " + p.cmd.ProcessState.String(), Digest: &d})
	}
	time.Sleep(300 * time.Millisecond)
	if err := g.launch(server); err != nil {
		g.c.t.Errorf("restart the gateway: %v", err)
	}
}

// Kill kills the gateway with SIGKILL; the supervisor restarts it.
func (g *Gateway) Kill() {
	at := time.Now()
	g.mu.Lock()
	p, gen := g.p, g.gen
	g.killed = true
	g.mu.Unlock()
	p.kill()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		g.mu.Lock()
		next := g.gen
		g.mu.Unlock()
		if next > gen {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	g.c.record(Fault{Kind: "kill-gateway", Target: GatewayName, At: at, Heal: time.Now()})
}

// Pause stops the gateway with SIGSTOP for d, then continues it.
func (g *Gateway) Pause(ctx context.Context, d time.Duration) {
	at := time.Now()
	g.mu.Lock()
	p := g.p
	g.mu.Unlock()
	p.stop()
	sleepCtx(ctx, d)
	p.cont()
	g.c.record(Fault{Kind: "sigstop-gateway", Target: GatewayName, At: at, Heal: time.Now()})
}

// consume asks the current generation for 2 IDs every 2 ms and records them.
func (g *Gateway) consume() {
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	lastReport := time.Now()
	for range tick.C {
		g.mu.Lock()
		stopped, gen, u := g.stopped, g.gen, g.url
		g.mu.Unlock()
		if stopped {
			return
		}
		start := time.Now()
		ids, err := g.ask(hc, u)
		g.mu.Lock()
		if err == nil && len(ids) > 0 && !g.stopped {
			if werr := g.ids[gen].Write(ids); werr != nil {
				g.c.t.Errorf("gateway IDs: %v", werr)
			}
			d := g.digests[gen]
			for _, id := range ids {
				if d.N == 0 || id < d.Min {
					d.Min = id
				}
				d.Max = max(d.Max, id)
				d.N++
			}
			d.LastValid = start.UnixNano()
		}
		if time.Since(lastReport) >= 200*time.Millisecond && !g.stopped && g.acq[gen] {
			lastReport = time.Now()
			_ = g.ids[gen].Flush()
			d := *g.digests[gen]
			g.mu.Unlock()
			g.write(history.Event{T: time.Now().UnixNano(), Ev: history.EvProgress, S: gen, G: 1, Digest: &d})
			continue
		}
		g.mu.Unlock()
	}
}

func (g *Gateway) ask(hc *http.Client, u string) ([]int64, error) {
	resp, err := hc.Post(u+"/v1/ids", "application/json", strings.NewReader(`{"count":2}`))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	var ans struct {
		IDs []int64 `json:"ids"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return nil, err
	}
	if len(ans.IDs) != 2 {
		return nil, errors.New("gateway: wrong number of IDs")
	}
	return ans.IDs, nil
}

// stop ends the consumer, records the current generation as closing (the gateway
// then closes its session, Remove included), and stops the gateway.
func (g *Gateway) stop() {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	g.stopped = true
	p, gen, acquired := g.p, g.gen, g.acq[g.gen]
	d := *g.digests[gen]
	for _, w := range g.ids {
		_ = w.Close()
	}
	g.mu.Unlock()
	if acquired {
		g.write(history.Event{T: time.Now().UnixNano(), Ev: history.EvClosing, S: gen, G: 1, Digest: &d})
	}
	if !p.terminate(10 * time.Second) {
		g.c.t.Logf("the gateway did not exit cleanly (see %s.log)", GatewayName)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = g.rec.Shutdown(ctx)
	g.Proxy.Close()
	g.hist.Close()
}
