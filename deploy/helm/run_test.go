package helm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/idkeeper/idkeeper/internal/harness/ntptest"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
)

// The tests below run the containers the chart renders as real processes on
// loopback, each with exactly the arguments and environment the chart gives it and
// the files of its Secrets; only the pod's paths, ports and addresses are mapped to
// this machine's, and the agent's NTP servers to a responder on loopback (a node's
// kernel clock may not be synchronised here). Each process is waited for by its
// own rendered readiness probe.

// podWorld maps a rendering's pods onto this machine.
type podWorld struct {
	t       *testing.T
	bin     string
	dir     string
	secrets string // the release Secret's files (/run/idkeeper/secrets)
	store   string // the store Secret's files (/run/idkeeper/store)
	ntp     string
	common  map[string]string // whole values mapped the same in every process
}

func newPodWorld(t *testing.T, r rendered) *podWorld {
	t.Helper()
	ntp, err := ntptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ntp.Close)
	w := &podWorld{t: t, bin: idkeeper(t), dir: t.TempDir(), ntp: ntp.Addr()}
	w.secrets, w.store = w.mkdir("secrets"), w.mkdir("store")
	for k, v := range one[corev1.Secret](t, r, named("secrets")).Data {
		w.write(w.secrets, k, v)
	}
	agent := loop(freePort(t))
	w.common = map[string]string{
		"--listen=0.0.0.0:4123":        "--listen=" + agent,
		named("clock-agent") + ":4123": agent,
		"tckclk://127.0.0.1:4123":      "tckclk://" + agent,
	}
	return w
}

func loop(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func (w *podWorld) mkdir(name string) string {
	d := filepath.Join(w.dir, name)
	if err := os.Mkdir(d, 0o700); err != nil {
		w.t.Fatal(err)
	}
	return d
}

func (w *podWorld) write(dir, name string, b []byte) {
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// command is container c as a process whose state volume is the directory state
// and whose own whole values (its listen addresses) map as own says.
func (w *podWorld) command(c corev1.Container, state string, own map[string]string) *exec.Cmd {
	remap := func(s string) string {
		if v, ok := own[s]; ok {
			return v
		}
		if v, ok := w.common[s]; ok {
			return v
		}
		s = strings.ReplaceAll(s, "/var/lib/idkeeper", state)
		s = strings.ReplaceAll(s, "/run/idkeeper/secrets", w.secrets)
		return strings.ReplaceAll(s, "/run/idkeeper/store", w.store)
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = remap(a)
	}
	cmd := exec.Command(w.bin, args...)
	cmd.Dir = state // the image's working directory, /var/lib/idkeeper
	cmd.Env = []string{"HOME=" + w.dir, "TMPDIR=" + w.dir}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			w.t.Fatalf("container %s: %s from %+v: the test maps literal values only", c.Name, e.Name, e.ValueFrom)
		}
		v := remap(e.Value)
		if e.Name == "IDKEEPER_NTP_SERVER" {
			v = w.ntp
		}
		cmd.Env = append(cmd.Env, e.Name+"="+v)
	}
	return cmd
}

// startAgent runs the clock agent and waits for its rendered readiness probe.
func (w *podWorld) startAgent(r rendered) {
	agent := one[appsv1.DaemonSet](w.t, r, named("clock-agent")).Spec.Template.Spec.Containers[0]
	start(w.t, "clock-agent", w.command(agent, w.mkdir("agent"), nil))
	probe := w.command(corev1.Container{Name: "probe", Args: agent.ReadinessProbe.Exec.Command[1:]}, w.dir, nil)
	waitFor(w.t, "the clock agent's readiness probe", func() bool {
		return exec.Command(probe.Path, probe.Args[1:]...).Run() == nil
	})
}

// replica is one registry pod on this machine.
type replica struct {
	state string
	api   string
	stop  func()
}

// startRegistry runs replica i of the StatefulSet with the state volume dir state
// and waits for its rendered readiness probe.
func (w *podWorld) startRegistry(r rendered, i int, state string) replica {
	ctr := one[appsv1.StatefulSet](w.t, r, named("registry")).Spec.Template.Spec.Containers[0]
	api := loop(freePort(w.t))
	name := "registry-" + strconv.Itoa(i)
	stop := start(w.t, name, w.command(ctr, state, map[string]string{":8080": api, ":9090": loop(freePort(w.t))}))
	waitFor(w.t, name+"'s "+ctr.ReadinessProbe.HTTPGet.Path, func() bool { return get200(api, ctr.ReadinessProbe.HTTPGet.Path) })
	return replica{state: state, api: api, stop: stop}
}

// startGateway runs the gateway against registry and waits for its readiness.
func (w *podWorld) startGateway(r rendered, registry string) string {
	ctr := one[appsv1.Deployment](w.t, r, named("gateway")).Spec.Template.Spec.Containers[0]
	addr := loop(freePort(w.t))
	start(w.t, "gateway", w.command(ctr, w.mkdir("gateway"), map[string]string{
		":8081": addr, ":9091": loop(freePort(w.t)), "http://" + named("registry") + ":8080": "http://" + registry}))
	waitFor(w.t, "the gateway's "+ctr.ReadinessProbe.HTTPGet.Path, func() bool { return get200(addr, ctr.ReadinessProbe.HTTPGet.Path) })
	return addr
}

// run runs a container to its end and returns its output, failing on an error.
func (w *podWorld) run(name string, cmd *exec.Cmd) string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	c.Dir, c.Env = cmd.Dir, cmd.Env
	out, err := c.CombinedOutput()
	if err != nil {
		w.t.Fatalf("%s: %v\n%s", name, err, out)
	}
	return string(out)
}

// mintThroughGateway asks the gateway for five IDs with the Secret's consumer key,
// and for one without a key (refused).
func mintThroughGateway(t *testing.T, r rendered, gateway string) {
	t.Helper()
	key := strings.TrimSpace(string(one[corev1.Secret](t, r, named("secrets")).Data["consumer-keys"]))
	req, _ := http.NewRequest(http.MethodPost, "http://"+gateway+"/v1/ids", strings.NewReader(`{"count":5}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ IDs []int64 }
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(body.IDs) != 5 {
		t.Fatalf("POST /v1/ids with the Secret's consumer key: %d %v %v", resp.StatusCode, body.IDs, err)
	}
	resp, err = (&http.Client{Timeout: 5 * time.Second}).Post("http://"+gateway+"/v1/ids", "application/json", strings.NewReader(`{"count":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /v1/ids without a consumer key: %d, want 401", resp.StatusCode)
	}
}

// TestRenderedPodsServeIDs runs the default rendering (bolt, one replica): the
// clock agent, the registry's init container, the registry and the gateway, which
// hands out IDs to the Secret's consumer key and refuses a request without one.
// The init container run again (a pod made anew; a restarted container does not
// rerun it) leaves the initialised store alone, and a lost store that the state
// volume saw too (issue #30).
func TestRenderedPodsServeIDs(t *testing.T) {
	r := renderChart(t, map[string]any{"clockAgent": map[string]any{"source": "ntp"}})
	w := newPodWorld(t, r)
	w.startAgent(r)
	pod := one[appsv1.StatefulSet](t, r, named("registry")).Spec.Template.Spec
	state := w.mkdir("state")
	runInit := func() string { return w.run("the init container", w.command(pod.InitContainers[0], state, nil)) }
	if out := runInit(); !strings.Contains(out, "initialised bolt:") {
		t.Fatalf("the init container did not initialise the new volume's store:\n%s", out)
	}
	reg := w.startRegistry(r, 0, state)
	mintThroughGateway(t, r, w.startGateway(r, reg.api))

	reg.stop()
	if out := runInit(); !strings.Contains(out, "is initialised already") || !strings.Contains(out, "nothing changed") {
		t.Errorf("the init container's second run on the initialised store:\n%s", out)
	}
	if err := os.Remove(filepath.Join(state, "idkeeper.db")); err != nil {
		t.Fatal(err)
	}
	if out := runInit(); !strings.Contains(out, "not initialising the store") {
		t.Errorf("the init container initialised a store its state volume saw:\n%s", out)
	}
}

// TestRenderedPodsOnRedis runs the rendering for Redis with its URL (password
// included) in a Secret: the init Job, two registry replicas with a state volume
// each, both ready on the one store, and the gateway with its Idempotency-Key
// records in that store.
func TestRenderedPodsOnRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.WithAOF(), redistest.WithPassword("chart-test-redis-0123456789"))
	r := renderChart(t, map[string]any{
		"store":      map[string]any{"type": "redis", "existingSecret": "idk-store"},
		"registry":   map[string]any{"replicas": 2},
		"clockAgent": map[string]any{"source": "ntp"}})
	w := newPodWorld(t, r)
	w.write(w.store, "store-url", []byte(rs.URL()))
	w.startAgent(r)
	job := one[batchv1.Job](t, r, named("init")).Spec.Template.Spec.Containers[0]
	if out := w.run("the init Job", w.command(job, w.mkdir("job"), nil)); !strings.Contains(out, "initialised redis://") ||
		strings.Contains(out, rs.Password()) {
		t.Fatalf("the init Job did not initialise the store (or printed its password):\n%s", out)
	}
	var replicas []replica
	for i := range 2 {
		replicas = append(replicas, w.startRegistry(r, i, w.mkdir("state-"+strconv.Itoa(i))))
	}
	for _, rep := range replicas {
		entries, err := os.ReadDir(rep.state)
		if err != nil || !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == "registry-state" }) {
			t.Errorf("replica's state volume %s holds no state file: %v %v", rep.state, entries, err)
		}
	}
	gw := w.startGateway(r, replicas[1].api)
	mintThroughGateway(t, r, gw)
	// An Idempotency-Key replays from the store.
	key := strings.TrimSpace(string(one[corev1.Secret](t, r, named("secrets")).Data["consumer-keys"]))
	var answers []string
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, "http://"+gw+"/v1/ids", strings.NewReader(`{"count":3}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", key)
		req.Header.Set("Idempotency-Key", "chart-test-1")
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /v1/ids with an Idempotency-Key: %d %s", resp.StatusCode, b.String())
		}
		answers = append(answers, b.String())
	}
	if answers[0] != answers[1] {
		t.Errorf("the Idempotency-Key's answer was not replayed: %s / %s", answers[0], answers[1])
	}
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start starts cmd and returns its stop: SIGTERM, then SIGKILL after 15 s, also
// when the test ends; its output is printed when the test failed.
func start(t *testing.T, name string, cmd *exec.Cmd) (stop func()) {
	t.Helper()
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s did not stop within 15 s of SIGTERM", name)
		}
	})
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, out.String())
		}
	})
	return stop
}

// waitFor polls ok every 200 ms for at most 60 s.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not ready within 60 s", what)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func get200(addr, path string) bool {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + path)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the test's read.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
