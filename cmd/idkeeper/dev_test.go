package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's first command: dev starts on an empty directory with no other
// service, prints a URL and an API key that work, and keeps the key across restarts.
func TestDevPrintsAWorkingURLAndKey(t *testing.T) {
	dir := t.TempDir()
	start := func() (base, key string, stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		out := &lockedBuffer{}
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"dev", "--listen", "127.0.0.1:0", "--data", dir}, func(string) (string, bool) { return "", false }, out, &lockedBuffer{})
		}()
		re := regexp.MustCompile(`registry\s+(http://\S+)\n\s+API key\s+(\S+)`)
		deadline := time.Now().Add(20 * time.Second)
		for {
			if m := re.FindStringSubmatch(out.String()); m != nil {
				return m[1], m[2], func() {
					cancel()
					if code := <-done; code != exitOK {
						t.Errorf("dev exited with %d", code)
					}
				}
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("dev printed no URL and key:\n%s", out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	base, key, stop := start()
	c := &client{t: t, base: base, key: key}
	curlSession(c, 4096, 10*time.Minute)
	stop()

	info, err := os.Stat(filepath.Join(dir, devKeyFile))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("dev key file: %v %v", info, err)
	}
	base2, key2, stop2 := start()
	defer stop2()
	if key2 != key {
		t.Fatal("a restarted dev printed another API key")
	}
	if got := (&client{t: t, base: base2, key: key2}).status("GET", "/v1/leases/remaining"); got != http.StatusOK {
		t.Fatalf("remaining after restart: %d", got)
	}
	if !strings.HasPrefix(key, "idk_") {
		t.Fatalf("key %q", key)
	}
}
