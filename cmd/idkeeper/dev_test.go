package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The README's first command: dev starts on an empty directory with no other
// service, prints a registry URL and an API key that work and a gateway URL whose
// printed curl command shows IDs, and keeps the key across restarts.
func TestDevPrintsAWorkingURLAndKey(t *testing.T) {
	dir := t.TempDir()
	start := func() (out, base, key, gw string, stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		stdout := &lockedBuffer{}
		done := make(chan int, 1)
		go func() {
			args := []string{"dev", "--listen", "127.0.0.1:0", "--gateway-listen", "127.0.0.1:0", "--data", dir}
			done <- run(ctx, args, func(string) (string, bool) { return "", false }, stdout, &lockedBuffer{})
		}()
		re := regexp.MustCompile(`registry\s+(http://\S+)\n\s+API key\s+(\S+)\n\s+gateway\s+(http://\S+)\n`)
		deadline := time.Now().Add(20 * time.Second)
		for {
			if m := re.FindStringSubmatch(stdout.String()); m != nil && strings.Contains(stdout.String(), "Stop with Ctrl-C") {
				return stdout.String(), m[1], m[2], m[3], func() {
					cancel()
					if code := <-done; code != exitOK {
						t.Errorf("dev exited with %d", code)
					}
				}
			}
			select {
			case code := <-done:
				cancel()
				t.Fatalf("dev exited with %d:\n%s", code, stdout)
			default:
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("dev printed no URLs and key:\n%s", stdout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	out, base, key, gw, stop := start()
	c := &client{t: t, base: base, key: key}
	curlSession(c, 4096, 1, 10*time.Minute) // the gateway holds one node ID

	ids := runPrintedCurl(t, out, gw+"/v1/ids -d")
	if len(ids) != 5 {
		t.Fatalf("the printed curl gave %v", ids)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("IDs not ascending: %v", ids)
		}
	}
	strs := runPrintedCurl(t, out, "format=string")
	if len(strs) != 5 || strs[0] <= ids[4] {
		t.Fatalf("format=string gave %v after %v", strs, ids)
	}
	d := (&client{t: t, base: gw}).do("GET", "/v1/ids/"+strconv.FormatInt(ids[0], 10), "", 200)
	if _, ok := d["nodeId"].(float64); !ok || d["id"] != strconv.FormatInt(ids[0], 10) {
		t.Fatalf("decode: %v", d)
	}
	(&client{t: t, base: gw}).do("GET", "/health", "", 200)
	stop()

	info, err := os.Stat(filepath.Join(dir, devKeyFile))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("dev key file: %v %v", info, err)
	}
	_, base2, key2, gw2, stop2 := start()
	defer stop2()
	if key2 != key {
		t.Fatal("a restarted dev printed another API key")
	}
	if got := (&client{t: t, base: base2, key: key2}).status("GET", "/v1/leases/remaining"); got != http.StatusOK {
		t.Fatalf("remaining after restart: %d", got)
	}
	if got := (&client{t: t, base: gw2}).status("GET", "/health"); got != http.StatusOK {
		t.Fatalf("gateway health after restart: %d", got)
	}
	if !strings.HasPrefix(key, "idk_") {
		t.Fatalf("key %q", key)
	}
}

// runPrintedCurl runs, with sh, the curl line dev printed that contains marker,
// and returns the IDs of its answer (numbers or strings).
func runPrintedCurl(t *testing.T, out, marker string) []int64 {
	t.Helper()
	var line string
	for l := range strings.Lines(out) {
		if strings.Contains(l, "curl") && strings.Contains(l, marker) {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		t.Fatalf("dev printed no curl line with %q:\n%s", marker, out)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is not installed (scripts/test installs it); the printed command is %s", line)
	}
	b, err := exec.Command("sh", "-c", line).Output()
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	var v struct{ IDs []json.RawMessage }
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s answered %s: %v", line, b, err)
	}
	ids := make([]int64, len(v.IDs))
	for i, raw := range v.IDs {
		if ids[i], err = strconv.ParseInt(strings.Trim(string(raw), `"`), 10, 64); err != nil {
			t.Fatalf("%s answered %s", line, b)
		}
	}
	return ids
}

// TestDevBanner: the banner is, byte for byte, the one dev printed with Fprintf
// before it became a template, with the admin web's lines (issue #10) and how to
// reset a lost admin password (issue #30).
func TestDevBanner(t *testing.T) {
	var b strings.Builder
	err := devBanner.Execute(&b, devInfo{Version: "v1.2.3", Store: "data/idkeeper.db", Registry: "http://127.0.0.1:8080",
		APIKey: "idk_k", Gateway: "http://localhost:8081", Now: "2026-01-02T03:04:05.006Z",
		Admin: "http://127.0.0.1:8080/admin/", AdminLogin: "as before", AdminUser: "admin"})
	const want = `IdKeeper v1.2.3 is running on the embedded store data/idkeeper.db

  registry  http://127.0.0.1:8080
  API key   idk_k
  gateway   http://localhost:8081
  admin     http://127.0.0.1:8080/admin/
  admin login: as before

Get IDs from the gateway:
  curl -s -X POST -H 'Content-Type: application/json' http://localhost:8081/v1/ids -d '{"count":5}'
  curl -s -X POST -H 'Content-Type: application/json' 'http://localhost:8081/v1/ids?format=string' -d '{"count":5}'
  curl -s http://localhost:8081/v1/ids/<an ID>
  curl -s http://localhost:8081/health

Talk to the registry with the API key:
  curl -s -H 'X-API-Key: idk_k' http://127.0.0.1:8080/v1/leases/remaining
  curl -s -H 'X-API-Key: idk_k' -H 'Content-Type: application/json' http://127.0.0.1:8080/v1/leases \
       -d '{"requester":{"machineId":"my-laptop","pid":1234,"startedAt":"2026-01-02T03:04:05.006Z"},"count":2}'

Lost the admin password? Stop dev, then set a new one (read from standard input):
  idkeeper users reset-password admin --store bolt:data/idkeeper.db

Stop with Ctrl-C.
`
	if err != nil || b.String() != want {
		t.Fatalf("%v\n%s\nwant\n%s", err, b.String(), want)
	}
}
