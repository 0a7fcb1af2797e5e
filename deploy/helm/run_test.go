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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/idkeeper/idkeeper/internal/harness/ntptest"
)

// TestRenderedPodsServeIDs runs the containers the chart renders by default (bolt,
// one replica), as real processes on loopback: the clock agent, the registry's
// init container, the registry and the gateway, each with exactly the arguments and
// environment the chart gives it and its Secret's files, only the pod's paths,
// ports and addresses mapped to this machine's (the agent's NTP servers to a
// responder on loopback, since a node's kernel clock may not be synchronised here).
// Each is waited for by its own rendered readiness probe, the gateway then hands
// out IDs to a consumer key of the Secret (and refuses a request without one). The
// init container run again (a pod made anew) leaves the initialised store alone,
// and a lost store that the state volume saw too (issue #30).
func TestRenderedPodsServeIDs(t *testing.T) {
	bin := idkeeper(t)
	ntp, err := ntptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer ntp.Close()
	r := renderChart(t, map[string]any{"clockAgent": map[string]any{"source": "ntp"}})

	dir := t.TempDir()
	state, secrets := filepath.Join(dir, "state"), filepath.Join(dir, "secrets")
	for _, d := range []string{state, secrets} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	secret := one[corev1.Secret](t, r, named("secrets"))
	for k, v := range secret.Data {
		if err := os.WriteFile(filepath.Join(secrets, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	regPort, regMetrics, gwPort, gwMetrics, agentPort := freePort(t), freePort(t), freePort(t), freePort(t), freePort(t)
	loop := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	// The pod's world → this machine's: whole values first, then path prefixes.
	whole := map[string]string{
		":8080": loop(regPort), ":9090": loop(regMetrics), ":8081": loop(gwPort), ":9091": loop(gwMetrics),
		"--listen=0.0.0.0:4123":                 "--listen=" + loop(agentPort),
		named("clock-agent") + ":4123":          loop(agentPort),
		"http://" + named("registry") + ":8080": "http://" + loop(regPort),
		"tckclk://127.0.0.1:4123":               "tckclk://" + loop(agentPort),
	}
	remap := func(s string) string {
		if v, ok := whole[s]; ok {
			return v
		}
		s = strings.ReplaceAll(s, "/var/lib/idkeeper", state)
		return strings.ReplaceAll(s, "/run/idkeeper/secrets", secrets)
	}
	command := func(c corev1.Container) *exec.Cmd {
		args := make([]string, len(c.Args))
		for i, a := range c.Args {
			args[i] = remap(a)
		}
		cmd := exec.Command(bin, args...)
		cmd.Dir = state // the image's working directory, /var/lib/idkeeper
		cmd.Env = []string{"HOME=" + dir, "TMPDIR=" + dir}
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				t.Fatalf("container %s: %s from %+v: the test maps literal values only", c.Name, e.Name, e.ValueFrom)
			}
			v := remap(e.Value)
			if e.Name == "IDKEEPER_NTP_SERVER" {
				v = ntp.Addr()
			}
			cmd.Env = append(cmd.Env, e.Name+"="+v)
		}
		return cmd
	}

	agent := one[appsv1.DaemonSet](t, r, named("clock-agent")).Spec.Template.Spec.Containers[0]
	start(t, "clock-agent", command(agent))
	probe := agent.ReadinessProbe.Exec.Command
	waitFor(t, "the clock agent's readiness probe", func() bool {
		args := make([]string, len(probe)-1)
		for i, a := range probe[1:] {
			args[i] = remap(a)
		}
		return exec.Command(bin, args...).Run() == nil
	})

	reg := one[appsv1.StatefulSet](t, r, named("registry")).Spec.Template.Spec
	runInit := func() string {
		out, err := command(reg.InitContainers[0]).CombinedOutput()
		if err != nil {
			t.Fatalf("the init container: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := runInit(); !strings.Contains(out, "initialised") {
		t.Fatalf("the init container did not initialise the new volume's store:\n%s", out)
	}
	stopRegistry := start(t, "registry", command(reg.Containers[0]))
	waitFor(t, "the registry's /readyz", func() bool { return get200(loop(regPort), reg.Containers[0].ReadinessProbe.HTTPGet.Path) })

	gw := one[appsv1.Deployment](t, r, named("gateway")).Spec.Template.Spec.Containers[0]
	start(t, "gateway", command(gw))
	waitFor(t, "the gateway's /readyz", func() bool { return get200(loop(gwPort), gw.ReadinessProbe.HTTPGet.Path) })

	consumerKey := strings.TrimSpace(string(secret.Data["consumer-keys"]))
	req, _ := http.NewRequest(http.MethodPost, "http://"+loop(gwPort)+"/v1/ids", strings.NewReader(`{"count":5}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", consumerKey)
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
	// Without the key, the gateway refuses.
	if resp, err := http.Post("http://"+loop(gwPort)+"/v1/ids", "application/json", strings.NewReader(`{"count":1}`)); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /v1/ids without a consumer key: %d, want 401", resp.StatusCode)
	}

	// A pod made anew (deleted, or its node rebooted; a restarted container does not
	// rerun it) runs its init container again before the registry: the store is
	// initialised, so init changes nothing.
	stopRegistry()
	if out := runInit(); !strings.Contains(out, "is initialised already") || !strings.Contains(out, "nothing changed") {
		t.Errorf("the init container's second run on the initialised store:\n%s", out)
	}
	// The store lost (its file gone) while the state volume remembers it (issue #30):
	// the init container leaves it alone, and the registry would recover it.
	if err := os.Remove(filepath.Join(state, "idkeeper.db")); err != nil {
		t.Fatal(err)
	}
	if out := runInit(); !strings.Contains(out, "not initialising the store") {
		t.Errorf("the init container initialised a store its state volume saw:\n%s", out)
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
