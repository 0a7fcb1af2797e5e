package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/tlstest"
)

// runCommand runs a long-running command in this process and waits for the log
// line msg that carries its address; it returns that address, the log and stop.
func runCommand(t *testing.T, args []string, env map[string]string, msg string) (addr string, logs *lockedBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := run(ctx, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard, pw)
		pw.Close()
		done <- code
	}()
	logs = &lockedBuffer{}
	found := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == msg {
				select {
				case found <- rec.Addr:
				default:
				}
			}
		}
	}()
	stop = func() int { cancel(); code := <-done; <-scanned; return code }
	t.Cleanup(func() { cancel() })
	select {
	case addr = <-found:
		return addr, logs, stop
	case code := <-done:
		<-scanned
		t.Fatalf("%v exited with %d before %q:\n%s", args, code, msg, logs)
	case <-time.After(20 * time.Second):
		t.Fatalf("%v did not log %q:\n%s", args, msg, logs)
	}
	return "", nil, nil
}

// httpsClient trusts pool only.
func httpsClient(ca *tlstest.CA) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
}

func get(t *testing.T, hc *http.Client, url string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The registry and the gateway serve HTTPS (TLS 1.2+) with a private CA's
// certificate; the gateway reaches the registry over https:// trusting the CA
// through --server-ca-file; /metrics moves to its own listener with
// --metrics-listen; secrets come from files.
func TestTLSSecretFilesAndMetricsListen(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	crt, key, bundle := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.pem")
	ca.WriteLeaf(t, 7, crt, key)
	ca.WriteCA(t, bundle)
	keyFile := filepath.Join(dir, "bootstrap-key")
	if err := os.WriteFile(keyFile, []byte(bootstrapKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := "bolt:" + filepath.Join(dir, "idkeeper.db")
	initInProcess(t, store)
	storeFile := filepath.Join(dir, "store")
	os.WriteFile(storeFile, []byte(store), 0o600)

	regAddr, regLogs, stopReg := runCommand(t, []string{"server", "--listen", "127.0.0.1:0", "--store-file", storeFile,
		"--tls-cert", crt, "--tls-key", key, "--metrics-listen", "127.0.0.1:0", "--log-format", "json"},
		map[string]string{BootstrapKeyEnv + "_FILE": keyFile}, "listening")
	hc := httpsClient(ca)
	if st, body := get(t, hc, "https://"+regAddr+"/v1/leases/remaining", "X-API-Key", bootstrapKey); st != 200 {
		t.Fatalf("remaining over https with the key from a file: %d %s", st, body)
	}
	if st, _ := get(t, &http.Client{Timeout: 5 * time.Second}, "http://"+regAddr+"/v1/version"); st == 200 {
		t.Fatal("plain HTTP answered on a TLS listener")
	}
	if st, body := get(t, hc, "https://"+regAddr+"/metrics"); st != 404 || !strings.Contains(body, "metrics-listen") {
		t.Fatalf("/metrics on the API listener with --metrics-listen: %d %s", st, body)
	}
	var metricsAddr string
	for _, line := range strings.Split(regLogs.String(), "\n") {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving /metrics on its own listener" {
			metricsAddr = rec.Addr
		}
	}
	if st, body := get(t, &http.Client{Timeout: 5 * time.Second}, "http://"+metricsAddr+"/metrics"); st != 200 || !strings.Contains(body, "idkeeper_alloc_total") {
		t.Fatalf("/metrics on the metrics listener %q: %d", metricsAddr, st)
	}
	if strings.Contains(regLogs.String(), "without TLS") {
		t.Fatalf("a warning about plain HTTP on a TLS loopback listener:\n%s", regLogs)
	}

	apiKeyFile := filepath.Join(dir, "api-key")
	os.WriteFile(apiKeyFile, []byte(bootstrapKey), 0o600)
	gwAddr, gwLogs, stopGw := runCommand(t, []string{"gateway", "--listen", "127.0.0.1:0", "--server", "https://" + regAddr,
		"--server-ca-file", bundle, "--tls-cert", crt, "--tls-key", key, "--idempotency-store", "none", "--log-format", "json"},
		map[string]string{"IDKEEPER_API_KEY_FILE": apiKeyFile}, "gateway listening; leasing node IDs")
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, body := get(t, hc, "https://"+gwAddr+"/health")
		if st == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway over https never got healthy: %d %s\n%s", st, body, gwLogs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := stopGw(); code != exitOK {
		t.Fatalf("gateway exit %d", code)
	}
	if code := stopReg(); code != exitOK {
		t.Fatalf("server exit %d", code)
	}
	for _, l := range []*lockedBuffer{regLogs, gwLogs} {
		if strings.Contains(l.String(), bootstrapKey) {
			t.Fatal("a key was logged")
		}
	}
}

// A secret given on the command line works but is warned about; a secret flag and
// its -file twin together, or a half certificate pair, refuse to start; a plain
// listener on a non-loopback address is warned about.
func TestSecretFlagsAndPlainListenerWarnings(t *testing.T) {
	dir := t.TempDir()
	store := "bolt:" + filepath.Join(dir, "idkeeper.db")
	initInProcess(t, store)
	_, logs, stop := runCommand(t, []string{"server", "--listen", "0.0.0.0:0", "--store", store, "--log-format", "json"},
		bootstrapEnv, "listening")
	stop()
	if !strings.Contains(logs.String(), "without TLS") {
		t.Fatalf("no warning for plain HTTP on 0.0.0.0:\n%s", logs)
	}
	if strings.Contains(logs.String(), "holds a secret") {
		t.Fatalf("a bolt path was taken for a secret:\n%s", logs)
	}

	keyFile := filepath.Join(dir, "k")
	os.WriteFile(keyFile, []byte(bootstrapKey), 0o600)
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"gateway", "--server", "http://127.0.0.1:1", "--api-key", bootstrapKey, "--api-key-file", keyFile}, nil,
			"give --api-key or --api-key-file, not both"},
		{[]string{"gateway", "--server", "http://127.0.0.1:1", "--api-key-file", filepath.Join(dir, "missing")}, nil,
			"--api-key-file"},
		{[]string{"server", "--store", store, "--tls-cert", keyFile}, nil, "give both a certificate and a key file"},
		{[]string{"server", "--store", store}, map[string]string{BootstrapKeyEnv: bootstrapKey, BootstrapKeyEnv + "_FILE": keyFile},
			"not both"},
		{[]string{"apikey", "list", "--store", store, "--store-file", keyFile}, nil, "give --store or --store-file, not both"},
	} {
		code, _, stderr := runInProcess(context.Background(), c.args, c.env)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %v: exit %d, %q; want exit 2 and %q", c.args, c.env, code, stderr, c.want)
		}
	}

	// A Redis password on the command line: warned about, never printed.
	code, _, stderr := runInProcess(context.Background(), []string{"apikey", "list", "--store", "redis://:s3cret-pw@127.0.0.1:1/0"}, nil)
	if code == exitOK || !strings.Contains(stderr, "--store on the command line holds a secret") || strings.Contains(stderr, "s3cret-pw") {
		t.Fatalf("a password in --store: exit %d, %q", code, stderr)
	}
	// The gateway's API key on the command line: warned about.
	_, gwLogs, stopGw := runCommand(t, []string{"gateway", "--listen", "127.0.0.1:0", "--server", "http://127.0.0.1:1",
		"--api-key", bootstrapKey, "--idempotency-store", "none", "--log-format", "json"}, nil, "gateway listening; leasing node IDs")
	stopGw()
	if !strings.Contains(gwLogs.String(), "--api-key on the command line holds a secret") || strings.Contains(gwLogs.String(), bootstrapKey) {
		t.Fatalf("the gateway's key on the command line:\n%s", gwLogs)
	}
}
